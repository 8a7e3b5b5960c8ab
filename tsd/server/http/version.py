"""/api/version (JSON) and the legacy /version (two text lines, JSON when the URI ends in
``json``), from one build description (:mod:`tsd.buildinfo`) shared with the telnet
``version`` reply."""

from __future__ import annotations

import datetime

import orjson
from aiohttp import web

from tsd.buildinfo import build_info
from tsd.errors import BadRequestError
from tsd.protocol.telnet import format_version
from tsd.server.http.app import ApiPath, Route, method_not_allowed
from tsd.server.http.errors import json_response


def version_reply() -> bytes:
    """The telnet ``version`` lines (and /version's text)."""
    info = build_info()
    return format_version(
        version=info["version"],
        short_revision=info["short_revision"] or "unknown",
        repo_status=info["repo_status"],
        date=_date(info["timestamp"]),
        user=info["user"],
        host=info["host"],
        repo=info["repo"] or "unknown",
    )


def _date(timestamp: str) -> str:
    """BuildData's date form (``2019/01/21 18:17:20 +0000``) of the commit's Unix time."""
    if not timestamp.isdigit():
        return "unknown"
    moment = datetime.datetime.fromtimestamp(int(timestamp), datetime.UTC)
    return moment.strftime("%Y/%m/%d %H:%M:%S +0000")


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
