"""The origin guard: a web page from another origin cannot change this TSD's state.

A browser lets any page it shows send simple requests anywhere: ``<img src>`` GETs, form
POSTs with a ``text/plain`` body, ``fetch(..., {mode: "no-cors"})``. It will not let the
page read the answer, but the request is made, so without this guard a page an operator
merely opened could stop the daemon (``/diediedie``), put data, assign or rename UIDs or
delete annotations (issue 13). OpenTSDB has no such check.

A request needing more than ``read`` (:mod:`tsd.server.http.access`) is refused with a 403
JSON error when it comes from a foreign browser origin, told apart by what browsers add:

* ``Origin`` (every POST, every CORS request): foreign unless its host is the request's own
  ``Host`` or it is listed in ``tsd.http.request.cors_domains`` (``*`` opens reads to every
  page, not state changes); ``Origin: null`` (sandboxed frames, ``file:``) is foreign;
* ``Sec-Fetch-Site: cross-site`` or ``same-site`` (Fetch Metadata, sent by current browsers on
  every request, an ``<img>`` GET included): another origin made the request;
* ``Referer`` naming another host, for browsers that send neither.

Clients that are not browsers (collectors, curl, Grafana's server-side proxy) send none of
these, so OpenTSDB's GET forms and ``method_override`` keep working for them, as for the
TSD's own pages. Every response also gets ``X-Content-Type-Options: nosniff``, so stored
text served as JSON (annotations) is never rendered as HTML.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from tsd.log import HTTP, get_logger
from tsd.server.credentials import Right
from tsd.server.http.access import FOREIGN_ORIGIN, cross_origin_refused, required_right
from tsd.server.http.context import CORS_DOMAINS, SERVICES
from tsd.server.http.errors import error_response

log = get_logger(HTTP)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def origin_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    foreign = foreign_origin(request, request.app.get(CORS_DOMAINS))
    if foreign:
        request[FOREIGN_ORIGIN] = foreign
        if required_right(request) != Right.READ:
            log.warning(
                "http.cross_origin_refused",
                origin=foreign,
                method=request.method,
                path=request.path,
                peer=request.remote,
            )
            request.app[SERVICES].registry.counter("http.cross_origin_refused").inc()
            refusal = cross_origin_refused(foreign)
            response: web.StreamResponse = error_response(403, refusal.message, refusal.details)
        else:
            response = await handler(request)
    else:
        response = await handler(request)
    if not response.prepared:  # a streamed reply sent its headers already
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


def foreign_origin(request: web.Request, allowed: frozenset[str] | None) -> str:
    """The foreign origin a browser says the request comes from, or "" when it comes from
    this TSD's own pages, a listed origin, or a client that is not a browser."""
    headers = request.headers
    own = request.host.lower()
    origin = headers.get("Origin")
    if origin is not None:
        if origin == "null":
            return origin
        if urlsplit(origin).netloc.lower() == own or _listed(origin, allowed):
            return ""
        return origin
    referer = headers.get("Referer", "")
    referer_origin = _origin_of(referer) if referer else ""
    if referer_origin and urlsplit(referer_origin).netloc.lower() != own:
        return "" if _listed(referer_origin, allowed) else referer_origin
    site = headers.get("Sec-Fetch-Site", "").lower()
    if site in ("cross-site", "same-site"):
        return referer_origin or f"a {site} page"
    return ""


def _listed(origin: str, allowed: frozenset[str] | None) -> bool:
    """Explicitly listed in tsd.http.request.cors_domains (``*`` does not count)."""
    return allowed is not None and origin.upper() in allowed


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
