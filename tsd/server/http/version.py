"""/api/version (JSON) and the legacy /version (two text lines, JSON when the URI ends in
``json``), from one build description shared with the telnet ``version`` reply."""

from __future__ import annotations

import getpass
import socket

import orjson
from aiohttp import web

from tsd import __version__
from tsd.errors import BadRequestError
from tsd.protocol.telnet import format_version
from tsd.server.http.app import ApiPath, Route, method_not_allowed
from tsd.server.http.errors import json_response


def build_info() -> dict[str, str]:
    """OpenTSDB's BuildData fields, all strings. tsd is not built from a tagged tree, so the
    revision fields say so."""
    return {
        "version": __version__,
        "short_revision": "",
        "full_revision": "",
        "timestamp": "",
        "repo_status": "MODIFIED",
        "user": _safe(getpass.getuser),
        "host": _safe(socket.gethostname),
        "repo": "tsd",
        "branch": "",
    }


def version_reply() -> bytes:
    """The telnet ``version`` lines (and /version's text)."""
    info = build_info()
    return format_version(
        version=info["version"],
        short_revision=info["short_revision"] or "unknown",
        repo_status=info["repo_status"],
        date=info["timestamp"] or "unknown",
        user=info["user"],
        host=info["host"],
        repo=info["repo"],
    )


def _safe(read: object) -> str:
    try:
        return str(read())  # type: ignore[operator]
    except Exception:  # no user name in a bare container, no resolvable host name
        return "unknown"


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
