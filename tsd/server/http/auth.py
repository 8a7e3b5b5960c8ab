"""HTTP authentication (``tsd.core.authentication.enable``): every request carries a
credential (:mod:`tsd.server.credentials`) with the right its route needs
(:mod:`tsd.server.http.access`).

No credential, or a wrong one: 401 with ``WWW-Authenticate: Basic realm="tsd"`` (so
browsers and Grafana's datasource ask for or send basic auth). A valid credential short of
the right: 403. OpenTSDB's ``AuthenticationChannelHandler`` answers 401/403 too, but once
per connection and with a bare text body; tsd checks every request and answers with its
JSON error body. CORS preflights (OPTIONS) are answered before this, by the CORS
middleware, as browsers send them without credentials.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from tsd.log import HTTP, get_logger
from tsd.server.credentials import Credentials
from tsd.server.http.access import GRANTED, missing_right, required_right
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import error_response

log = get_logger(HTTP)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CREDENTIALS = web.AppKey("credentials", Credentials)
CHALLENGE = 'Basic realm="tsd", charset="UTF-8"'


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    credentials = request.app[CREDENTIALS]
    header = request.headers.get("Authorization")
    principal = credentials.authorization(header) if header else None
    if principal is None:
        log.info("http.unauthenticated", path=request.path, peer=request.remote, sent=bool(header))
        if header:
            request.app[SERVICES].registry.counter("rpc.auth", type="http_failed").inc()
        details = "Wrong credentials" if header else "This TSD needs credentials"
        response = error_response(401, "Unauthorized", details)
        response.headers["WWW-Authenticate"] = CHALLENGE
        return response
    needed = required_right(request)
    if not principal.may(needed):
        log.info("http.forbidden", path=request.path, user=principal.name, needed=needed.name)
        refusal = missing_right(needed)
        return error_response(403, refusal.message, refusal.details)
    request[GRANTED] = principal.rights
    return await handler(request)
