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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from tsd.config import Config
from tsd.errors import BadRequestError
from tsd.java_text import java_split
from tsd.server.http.body_limit import LINGERING_TIME_S, expect_handler
from tsd.server.http.context import CORS_DOMAINS, IS_API, ROUTES, SERVICES, Services
from tsd.server.http.middlewares import MIDDLEWARES, parse_cors_domains

__all__ = [
    "SERVICES",
    "ApiPath",
    "api_method",
    "Route",
    "Services",
    "make_app",
    "method_not_allowed",
    "parse_api_path",
    "query_params",
]

#: OpenTSDB's HttpQuery.MAX_API_VERSION.
MAX_API_VERSION = 1

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
)


@dataclass(frozen=True, slots=True)
class ApiPath:
    """The request path as OpenTSDB's handlers see it.

    ``route`` is the routing key (``api/put``, ``version``); ``parts`` the segments after
    ``/api`` and the version (``explodeAPIPath``: ``["uid", "assign"]``), or the whole path
    split for non-API routes; ``api_version`` 0 outside ``/api``.
    """

    route: str
    parts: tuple[str, ...]
    api_version: int

    @property
    def is_api(self) -> bool:
        return self.api_version > 0


Handler = Callable[[web.Request, ApiPath], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    """A handler and the ``tsd.mode`` values and switches that register it."""

    handler: Handler
    modes: frozenset[str] = frozenset({"rw", "ro", "wo"})
    api: bool = True  # needs tsd.core.enable_api (else tsd.core.enable_ui)
    needs_diediedie: bool = False


def split_path(path: str) -> list[str]:
    """``path.substring(1).split("/")`` in Java; a path of slashes only gives ``[""]`` (the
    root route) where Java's empty array would fail."""
    return java_split(path[1:] if path.startswith("/") else path, "/") or [""]


def parse_api_path(path: str) -> ApiPath:
    """OpenTSDB's getQueryBaseRoute and explodeAPIPath in one step."""
    split = split_path(path)
    first = split[0].lower()
    if first != "api":
        return ApiPath(first, tuple(split), 0)
    if len(split) < 2:
        return ApiPath("api", ("",), MAX_API_VERSION)
    second = split[1]
    if len(second) > 1 and second[0] in "vV" and second[1].isdigit():
        try:
            version = int(second[1:])
        except ValueError:
            raise BadRequestError(
                "Invalid API version format supplied",
                f"API version [{second[1:]}] cannot be parsed to an integer",
            ) from None
        if version > MAX_API_VERSION:
            raise BadRequestError(
                "Requested API version is greater than the max implemented",
                f"API version [{version}] is greater than the max [{MAX_API_VERSION}]",
                status=501,
            )
        rest = tuple(split[2:]) or ("",)
        route = "api" if len(split) < 3 else f"api/{split[2].lower()}"
        return ApiPath(route, rest, version)
    return ApiPath(f"api/{second.lower()}", tuple(split[1:]), MAX_API_VERSION)


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


def method_not_allowed(method: str) -> BadRequestError:
    """OpenTSDB's 405 for a verb a handler does not take."""
    return BadRequestError(
        "Method not allowed",
        f"The HTTP method [{method}] is not permitted for this endpoint",
        status=405,
    )


#: HttpQuery.getAPIMethod's override values.
_METHOD_OVERRIDES = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE"}


def api_method(request: web.Request) -> str:
    """HttpQuery.getAPIMethod: the verb a handler acts on; a GET may name another with
    ``method_override`` (the last value of a repeated key, as getQueryStringParam takes)."""
    if request.method != "GET" or "method_override" not in request.query:
        return request.method
    value = request.query.getall("method_override")[-1]
    if not value:
        raise BadRequestError("Missing method override value", status=405)
    method = _METHOD_OVERRIDES.get(value.lower())
    if method is None:
        raise BadRequestError("Unknown or unsupported method override value", status=405)
    return method


def query_params(request: web.Request) -> dict[str, str]:
    """The query string with the *last* value of a repeated key (Netty's getQueryStringParam
    takes the last one)."""
    return {key: value for key, value in request.query.items()}


def make_app(services: Services) -> web.Application:
    """The application serving every HTTP route of tsd."""
    from tsd.server.http.auth import CREDENTIALS, CREDENTIALS_KEY, auth_middleware
    from tsd.server.http.guard import origin_guard

    credentials = services.extra.get(CREDENTIALS_KEY)
    guards = [origin_guard] if credentials is None else [origin_guard, auth_middleware]
    app = web.Application(
        client_max_size=services.config.http.max_body_bytes,
        # CORS outside: its headers go on error replies too. The guards sit just outside
        # the error middleware (the last one), so their refusals keep CORS headers.
        middlewares=[*MIDDLEWARES[:-1], *guards, MIDDLEWARES[-1]],
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
    app.router.add_route("*", "/{tail:.*}", dispatch, expect_handler=expect_handler)
    return app
