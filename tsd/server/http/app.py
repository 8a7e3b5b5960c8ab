"""The aiohttp application: OpenTSDB's routing, the services handlers need, the middleware.

Routing follows OpenTSDB's ``HttpQuery.getQueryBaseRoute`` instead of aiohttp's router:
the path is split on ``/`` (trailing empty segments dropped, as Java's split does), matched
case-insensitively on its first segment, or on ``api/<second>`` under ``/api``; a version
segment ``v<digits>`` is stripped (``/api/v1/put`` is ``/api/put``), a version above 1 is
501 and an unparseable one 400. Anything below the route (``/api/uid/assign``) is the
handler's business, through :attr:`ApiPath.parts`. Which routes exist depends on
``tsd.mode`` and ``tsd.core.enable_api``/``enable_ui``, as in ``RpcManager``.

Each handler module exposes ``ROUTES: dict[str, Route]``; :data:`ROUTE_MODULES` lists them
(add a module there to mount its routes).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from aiohttp import web

from tsd.config import Config
from tsd.errors import BadRequestError
from tsd.server.http.auth import CREDENTIALS
from tsd.server.http.body_limit import LINGERING_TIME_S, expect_handler
from tsd.server.http.context import CORS_DOMAINS, IS_API, ROUTES, SERVICES, Services
from tsd.server.http.guard import ALLOWED_HOSTS, parse_allowed_hosts
from tsd.server.http.middlewares import layered, parse_cors_domains, use_fast_zlib
from tsd.server.http.routing import Handler, Route, parse_api_path

__all__ = ["ROUTE_MODULES", "enabled_routes", "make_app"]

#: Handler modules, each with a ``ROUTES`` mapping.
ROUTE_MODULES = (
    "tsd.server.http.put",
    "tsd.server.http.rollup",
    "tsd.server.http.histogram",
    "tsd.server.http.uid",
    "tsd.server.http.version",
    "tsd.server.http.stats",
    "tsd.server.http.misc",
    "tsd.server.http.query",
    "tsd.server.http.suggest",
    "tsd.server.http.search",
    "tsd.server.http.annotation",
    "tsd.server.http.ui",
    "tsd.server.http.metrics",
    "tsd.server.http.serializers",
    "tsd.server.http.prom_write",
    "tsd.server.http.prom_read",
)


def enabled_routes(config: Config) -> dict[str, Handler]:
    """Route key -> handler for this configuration (RpcManager.initializeBuiltinRpcs)."""
    core = config.core
    mode = core.mode if core.mode in ("rw", "ro", "wo") else "rw"
    routes: dict[str, Handler] = {}
    for module_name in ROUTE_MODULES:
        module = importlib.import_module(module_name)
        table: Mapping[str, Route] = module.ROUTES
        for key, route in table.items():
            if mode not in route.modes:
                continue
            if not (core.enable_api if route.api else core.enable_ui):
                continue
            if route.needs_diediedie and core.no_diediedie:
                continue
            routes[key] = route.handler
    return routes


async def dispatch(request: web.Request) -> web.StreamResponse:
    """The one aiohttp route: find OpenTSDB's handler for the path."""
    path = parse_api_path(request.path)
    request[IS_API] = path.is_api or path.route == "api"
    handler: Handler | None = request.app[ROUTES].get(path.route)
    if handler is None:
        raise BadRequestError("Endpoint not found", status=404)
    return await handler(request, path)


def make_app(services: Services) -> web.Application:
    """The application serving every HTTP route of tsd."""
    use_fast_zlib()
    credentials = services.credentials
    app = web.Application(
        client_max_size=services.config.http.max_body_bytes,
        # CORS outside: its headers go on error replies too. The guards sit just outside
        # the error middleware (the last one), so their refusals keep CORS headers. One
        # aiohttp middleware runs them all (middlewares.layered).
        middlewares=[layered(authenticated=credentials is not None)],
        handler_args={
            "max_field_size": 65536,
            "max_line_size": 65536,
            "lingering_time": LINGERING_TIME_S,  # no reading on after a 413 (body_limit)
        },
    )
    app[SERVICES] = services
    if credentials is not None:
        app[CREDENTIALS] = credentials
    app[ROUTES] = enabled_routes(services.config)
    cors = parse_cors_domains(services.config.http.cors_domains)
    if cors is not None:
        app[CORS_DOMAINS] = cors
    app[ALLOWED_HOSTS] = parse_allowed_hosts(
        services.config.http.allowed_hosts, services.config.network.bind
    )
    app.router.add_route("*", "/{tail:.*}", dispatch, expect_handler=expect_handler)
    return app
