"""/api/serializers: the serializers the TSD offers, in OpenTSDB's documented shape.

OpenTSDB 2.4.1 builds this list (HttpQuery.initializeSerializerMaps) but no longer
registers the route (a departure noted in the README). tsd has one serializer, JSON, so
the list has one entry: its short name, content types and the ``parse<Name>V1`` /
``format<Name>V1`` operations it implements, named as OpenTSDB's HttpSerializer names
them (without the prefix). Tree operations are left out: tsd has no trees.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed

PARSERS = (
    "PutV1",
    "SuggestV1",
    "UidAssignV1",
    "UidRenameV1",
    "SearchQueryV1",
    "QueryV1",
    "LastPointQueryV1",
    "UidMetaV1",
    "TSMetaV1",
    "AnnotationV1",
    "AnnotationsV1",
    "AnnotationBulkDeleteV1",
)

FORMATTERS = (
    "PutV1",
    "SuggestV1",
    "SerializersV1",
    "AggregatorsV1",
    "VersionV1",
    "DropCachesV1",
    "UidAssignV1",
    "UidRenameV1",
    "QueryV1",
    "LastPointQueryV1",
    "UidMetaV1",
    "TSMetaV1",
    "TSMetaListV1",
    "AnnotationV1",
    "AnnotationsV1",
    "AnnotationBulkDeleteV1",
    "StatsV1",
    "ThreadStatsV1",
    "RegionStatsV1",
    "JVMStatsV1",
    "QueryStatsV1",
    "SearchResultsV1",
    "ConfigV1",
    "FilterConfigV1",
    "NotFoundV1",
    "ErrorV1",
)

SERIALIZERS = [
    {
        "class": "tsd.protocol",
        "serializer": "json",
        "request_content_type": "application/json",
        "response_content_type": "application/json; charset=UTF-8",
        "parsers": list(PARSERS),
        "formatters": list(FORMATTERS),
    }
]


async def handle_serializers(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    return json_response(orjson.dumps(SERIALIZERS))


ROUTES = {"api/serializers": Route(handle_serializers)}
