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
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tsd.config import Config
from tsd.errors import BadRequestError, ConfigError
from tsd.protocol.names import NameRules
from tsd.stats import StatsRegistry
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService

#: OpenTSDB's HttpQuery.MAX_API_VERSION.
MAX_API_VERSION = 1

#: Handler modules, each with a ``ROUTES`` mapping.
ROUTE_MODULES = (
    "tsd.server.http.put",
    "tsd.server.http.uid",
    "tsd.server.http.version",
    "tsd.server.http.stats",
    "tsd.server.http.misc",
    "tsd.server.http.query",
    "tsd.server.http.suggest",
    "tsd.server.http.search",
    "tsd.server.http.annotation",
    "tsd.server.http.ui",
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


@dataclass(slots=True)
class Services:
    """Everything handlers may call, built by the daemon."""

    config: Config
    ingest: IngestService
    uids: UidService
    registry: StatsRegistry
    stats_tags: tuple[tuple[str, str], ...]
    rules: NameRules
    request_shutdown: Callable[[], None]
    #: the query engine, once the daemon has one (``tsd.query.engine.QueryEngine``)
    query_engine: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


SERVICES = web.AppKey("services", Services)
ROUTES = web.AppKey("routes", dict)
#: True for requests under /api: their replies are JSON, errors included.
IS_API = web.RequestKey("tsd.is_api", bool)


def split_path(path: str) -> list[str]:
    """``path.substring(1).split("/")`` in Java: trailing empty strings dropped."""
    parts = path[1:].split("/") if path.startswith("/") else path.split("/")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


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


def query_params(request: web.Request) -> dict[str, str]:
    """The query string with the *last* value of a repeated key (Netty's getQueryStringParam
    takes the last one)."""
    return {key: value for key, value in request.query.items()}


def parse_cors_domains(text: str) -> frozenset[str] | None:
    """``tsd.http.request.cors_domains``: None when empty (CORS off), else the upper-cased
    domains; ``*`` cannot be mixed with domains (RpcHandler's constructor refuses it)."""
    domains = frozenset(d.strip().upper() for d in text.split(",") if d.strip())
    if not domains:
        return None
    if "*" in domains and len(domains) > 1:
        raise ConfigError(
            "tsd.http.request.cors_domains",
            "must be a public resource (*) or a list of specific domains, you cannot mix both",
        )
    return domains


CORS_DOMAINS = web.AppKey("cors_domains", frozenset)


@web.middleware
async def cors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """RpcHandler.applyCorsConfig: OPTIONS and cross-origin requests."""
    from tsd.server.http.errors import error_response

    domains: frozenset[str] | None = request.app.get(CORS_DOMAINS)
    origin = request.headers.get("Origin", "")
    if request.method != "OPTIONS" and (domains is None or not origin):
        response: web.StreamResponse = await handler(request)
        return response
    if domains is None or not origin:
        details = f"The HTTP method [{request.method}] is not permitted"
        return error_response(405, "Method not allowed", details)
    if "*" not in domains and origin.upper() not in domains:
        # OpenTSDB: a 200 without the allow-origin header, the refusal in the body.
        return error_response(
            200, "CORS domain not allowed", f"The domain [{origin}] is not permitted access"
        )
    headers = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE",
        "Access-Control-Allow-Headers": request.app[SERVICES].config.http.cors_headers,
    }
    if request.method == "OPTIONS":
        return web.Response(status=200, headers=headers)
    response = await handler(request)
    response.headers.update(headers)
    return response


def make_app(services: Services) -> web.Application:
    """The application serving every HTTP route of tsd."""
    from tsd.server.http.errors import error_middleware
    from tsd.server.http.middleware import response_middleware

    app = web.Application(
        client_max_size=services.config.http.max_body_bytes,
        # CORS outside: its headers go on error replies too.
        middlewares=[response_middleware, cors_middleware, error_middleware],
        handler_args={"max_field_size": 65536, "max_line_size": 65536},
    )
    app[SERVICES] = services
    app[ROUTES] = enabled_routes(services.config)
    cors = parse_cors_domains(services.config.http.cors_domains)
    if cors is not None:
        app[CORS_DOMAINS] = cors
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
