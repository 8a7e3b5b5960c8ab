"""The query page at ``/`` and its static files under ``/s/`` (OpenTSDB serves its GWT UI
the same way: ``/`` and ``/s/<file>``, registered when the UI is enabled in ``rw``/``ro``).

The page is plain HTML and JavaScript in ``tsd/server/static`` (no build step, no library):
several queries (metric from ``/api/suggest``, tags, aggregator, downsample, rate, left or
right axis) on one SVG chart with 1-2-5 value ticks or a log scale per axis and
calendar-aligned time ticks, breaks at gaps in collection, dots for lone points, margins sized
to the labels, values on hover, drag to zoom, relative ranges and auto-refresh, and a status
table fed by ``/api/stats``; the page URL reproduces the view. It only reads, with
same-origin GETs, so the origin guard and the browser's own basic-auth credentials apply to
it as to any client.
"""

from __future__ import annotations

import functools
from pathlib import Path

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.server.http.routing import ApiPath, Route, method_not_allowed

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
CONTENT_TYPES = {
    ".html": "text/html; charset=UTF-8",
    ".js": "text/javascript; charset=UTF-8",
    ".css": "text/css; charset=UTF-8",
    ".ico": "image/x-icon",
    ".png": "image/png",
}


#: The longest static file name looked at (longer ones are 404 without touching the disk).
MAX_NAME = 100


@functools.cache  # one entry: the folder's files
def _shipped_files() -> dict[str, tuple[bytes, str]]:
    """(content, content type) of every file shipped in the static folder, read once.

    Only plain files directly in the folder with a known type: no traversal, no hidden
    files. A fixed set, so the cache is bounded by what tsd ships, whatever clients ask
    for (a cache keyed by the requested name grew with every distinct 404).
    """
    found: dict[str, tuple[bytes, str]] = {}
    for path in STATIC_DIR.iterdir():
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is not None and not path.name.startswith(".") and path.is_file():
            found[path.name] = (path.read_bytes(), content_type)
    return found


def _static_file(name: str) -> tuple[bytes, str] | None:
    if len(name) > MAX_NAME:
        return None
    return _shipped_files().get(name)


def _serve(name: str) -> web.Response:
    found = _static_file(name)
    if found is None:
        raise BadRequestError("Endpoint not found", status=404)
    body, content_type = found
    return web.Response(
        body=body, headers={"Content-Type": content_type, "Cache-Control": "max-age=60"}
    )


async def handle_home(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method)
    if path.parts not in (("",), ()):
        raise BadRequestError("Endpoint not found", status=404)
    return _serve("index.html")


async def handle_static(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method)
    return _serve("/".join(path.parts[1:]))


READ_MODES = frozenset({"rw", "ro"})

ROUTES = {
    "": Route(handle_home, modes=READ_MODES, api=False),
    "s": Route(handle_static, modes=READ_MODES, api=False),
}
