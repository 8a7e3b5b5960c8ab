"""/api/version (JSON) and the legacy /version (two text lines, JSON when the URI ends in
``json``), from one build description (:mod:`tsd.buildinfo`) shared with the telnet
``version`` reply."""

from __future__ import annotations

import orjson
from aiohttp import web

from tsd.buildinfo import build_info, version_reply
from tsd.errors import BadRequestError
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed


async def handle_version(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    if path.is_api or request.path.endswith("json"):
        return json_response(orjson.dumps(build_info()))
    if path.route != "version":
        raise BadRequestError("Endpoint not found", status=404)
    return web.Response(body=version_reply(), content_type="text/plain")


ROUTES = {
    "api/version": Route(handle_version),
    "version": Route(handle_version, api=False),
}
