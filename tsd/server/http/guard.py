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

DNS rebinding defeats the Origin check: a hostile name re-pointed at this TSD's address makes
the hostile page same-origin (``Host`` and ``Origin`` both name it), so it could stop the
daemon and read every answer. A browser request (any of the three headers above, or
``Accept-Language``: see :data:`BROWSER_HEADERS`) whose ``Host`` is a name that is not one
of this TSD's is therefore refused outright, reads included (issue 25). This TSD's names
are the loopback names (``localhost``, ``*.localhost``), the machine's host names, the
bound name and ``tsd.http.allowed_hosts`` (names with optional ports; ``*`` for any). IP
literals always pass: rebinding needs a name. Clients that are not browsers send none of the
headers and are never refused.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from tsd.errors import ConfigError
from tsd.log import HTTP, get_logger
from tsd.server.credentials import Right
from tsd.server.http.access import FOREIGN_ORIGIN, cross_origin_refused, required_right
from tsd.server.http.context import CORS_DOMAINS, SERVICES
from tsd.server.http.errors import error_response

log = get_logger(HTTP)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


ALLOWED_HOSTS_KEY = "tsd.http.allowed_hosts"


@web.middleware
async def origin_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if from_browser(request) and not request.app[ALLOWED_HOSTS].allows(request.host):
        log.warning(
            "http.foreign_host_refused",
            host=request.host,
            method=request.method,
            path=request.path,
            peer=request.remote,
        )
        request.app[SERVICES].registry.counter("http.foreign_host_refused").inc()
        details = (
            f"A browser request for the host {request.host!r}, which is not one of this "
            f"TSD's names (a DNS rebinding page looks like this); add the name to "
            f"{ALLOWED_HOSTS_KEY} to allow it"
        )
        response: web.StreamResponse = error_response(403, "Host not allowed", details)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
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
            response = error_response(403, refusal.message, refusal.details)
        else:
            response = await handler(request)
    else:
        response = await handler(request)
    return nosniff(response)


def nosniff(response: web.StreamResponse) -> web.StreamResponse:
    """``X-Content-Type-Options: nosniff`` on ``response`` (unless a streamed reply sent
    its headers already)."""
    if not response.prepared:
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


#: Headers that say "a browser sent this". Over plain HTTP, Chromium and Firefox send Fetch
#: Metadata (Sec-Fetch-*) only to potentially trustworthy origins, and a page can drop the
#: Referer (``referrerPolicy: "no-referrer"``) while a GET carries no Origin; what such a
#: request still carries is Accept-Language, which browsers add to every request and a page
#: cannot remove. Collectors, curl and HTTP client libraries send none of these.
BROWSER_HEADERS = ("Origin", "Sec-Fetch-Site", "Referer", "Accept-Language")


def from_browser(request: web.Request) -> bool:
    """Whether a browser sent ``request`` (:data:`BROWSER_HEADERS`)."""
    headers = request.headers
    return any(name in headers for name in BROWSER_HEADERS)


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a browser may use for this TSD (see the module's docstring)."""

    #: lower-cased names without a trailing dot, any port
    names: frozenset[str]
    #: (name, port) pairs listed with a port
    with_port: frozenset[tuple[str, int]]
    #: ``*`` listed: every name
    any: bool = False

    def allows(self, host: str) -> bool:
        """Whether a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``) is one of
        this TSD's names; an unparsable value is not."""
        if self.any:
            return True
        parsed = _split_host(host)
        if parsed is None:
            return False
        name, port = parsed
        if _is_ip_literal(name) or name == "localhost" or name.endswith(".localhost"):
            return True
        return name in self.names or (port is not None and (name, port) in self.with_port)


#: The application's :class:`AllowedHosts`, set by ``make_app``.
ALLOWED_HOSTS = web.AppKey("allowed_hosts", AllowedHosts)


def parse_allowed_hosts(text: str, bind: str = "") -> AllowedHosts:
    """``tsd.http.allowed_hosts`` (comma-separated ``name`` or ``name:port``, ``*`` for any)
    plus the machine's own names and the bound name; a bad entry stops the start."""
    names = {_normal(n) for n in (socket.gethostname(), socket.getfqdn(), bind) if n}
    with_port: set[tuple[str, int]] = set()
    entries = [e.strip() for e in text.split(",") if e.strip()]
    for entry in entries:
        if entry == "*":
            continue
        parsed = _split_host(entry)
        if parsed is None or not parsed[0]:
            raise ConfigError(
                ALLOWED_HOSTS_KEY, f"{entry!r} is not a host name with an optional port"
            )
        name, port = parsed
        if port is None:
            names.add(name)
        else:
            with_port.add((name, port))
    return AllowedHosts(frozenset(names), frozenset(with_port), any="*" in entries)


def _split_host(host: str) -> tuple[str, int | None] | None:
    """(normalised name, port or None) of a ``Host`` value, None when it does not parse."""
    try:
        parts = urlsplit("//" + host)
        port = parts.port
    except ValueError:
        return None
    name = parts.hostname
    if name is None or parts.username is not None or parts.path or parts.query:
        return None
    if any(c.isspace() for c in name):
        return None
    return _normal(name), port


def _normal(name: str) -> str:
    name = name.lower()
    return name[:-1] if name.endswith(".") else name


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
