"""/api/search/<type> (OpenTSDB's SearchRpc; behaviour doc §1.7).

``lookup`` is built in: ``GET ?m=metric{k=v,k=*,*=v}&limit=N`` or a JSON body
``{"metric": .., "tags": [{"key": .., "value": ..}], "limit": N}``; see
:mod:`tsd.meta.lookup`. The other types (``tsmeta``, ``tsmeta_summary``, ``tsuids``,
``uidmeta``, ``annotation``) need a search plugin, which tsd does not have: 400 "Searching is
not enabled", as OpenTSDB without one.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tsd.errors import BadRequestError
from tsd.meta.binding import as_bool, as_int, as_object, as_text, loads, require_body
from tsd.meta.lookup import DEFAULT_LIMIT, LookupQuery, TagPair, lookup_response, parse_lookup_m
from tsd.server.http.errors import json_response
from tsd.server.http.meta_support import body_of, meta_service, required_param
from tsd.server.http.routing import ApiPath, Route, api_method, query_params

SEARCH_TYPES = ("tsmeta", "tsmeta_summary", "tsuids", "uidmeta", "annotation", "lookup")


async def handle_search(request: web.Request, path: ApiPath) -> web.StreamResponse:
    method = api_method(request)
    if method not in ("GET", "POST"):
        raise BadRequestError(f"Unsupported method: {method}")
    endpoint = path.parts[1] if len(path.parts) > 1 else ""
    if not endpoint:
        raise BadRequestError(
            "Invalid search query type supplied", "Type provided was null or empty"
        )
    if endpoint.lower() not in SEARCH_TYPES:
        raise BadRequestError("Invalid search query type supplied", f"Unknown type: {endpoint}")
    body = await body_of(request)
    if endpoint.lower() != "lookup":
        if not body:
            required_param(query_params(request), "query")
        raise BadRequestError("Searching is not enabled", "Searching is not enabled")
    query, echo = _lookup_from_body(body) if body else _lookup_from_params(request)
    response = await lookup_response(meta_service(request).lookup, query, echo)
    return json_response(orjson.dumps(response))


def _lookup_from_params(request: web.Request) -> tuple[LookupQuery, list[TagPair]]:
    params = query_params(request)
    metric, tags = parse_lookup_m(required_param(params, "m"))
    limit = DEFAULT_LIMIT
    if "limit" in params:
        try:
            limit = int(params["limit"])
        except ValueError:
            raise BadRequestError("Unable to convert 'limit' to a valid number") from None
    return LookupQuery(metric, tuple(tags), limit), tags


def _lookup_from_body(body: bytes) -> tuple[LookupQuery, list[TagPair] | None]:
    require_body(body)
    fields = as_object(loads(body), "SearchQuery")
    metric = as_text(fields.get("metric"), "metric") if "metric" in fields else "*"
    raw_tags: Any = fields.get("tags")
    tags: list[TagPair] | None = None
    if raw_tags is not None:
        if not isinstance(raw_tags, list):
            raise BadRequestError("Unable to parse the given JSON", "tags must be an array")
        tags = []
        for item in raw_tags:
            pair = as_object(item, "a tag pair")
            tags.append((as_text(pair.get("key"), "key"), as_text(pair.get("value"), "value")))
    limit = as_int(fields["limit"], "limit") if "limit" in fields else DEFAULT_LIMIT
    query = LookupQuery(
        metric,
        tuple(tags or ()),
        limit,
        start_index=as_int(fields.get("startIndex"), "startIndex"),
        use_meta=as_bool(fields.get("useMeta", True), "useMeta"),
    )
    return query, tags


ROUTES = {"api/search": Route(handle_search, modes=frozenset({"rw", "ro"}))}
