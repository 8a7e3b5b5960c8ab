"""OpenTSDB's request paths and verbs, as every handler reads them: the route key and the
segments below it (:class:`ApiPath`, from ``HttpQuery.getQueryBaseRoute`` and
``explodeAPIPath``), ``method_override`` (:func:`api_method`), the 405 reply and the
query string's last-value rule. Apart from :mod:`tsd.server.http.app` so that handlers and
the access rules read them without importing the application that mounts them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.java_text import java_split

#: OpenTSDB's HttpQuery.MAX_API_VERSION.
MAX_API_VERSION = 1


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


#: paths whose :class:`ApiPath` is kept (clients send a few paths again and again; a
#: bounded cache, as paths are the client's to choose)
PARSED_PATHS = 256


@functools.lru_cache(maxsize=PARSED_PATHS)
def parse_api_path(path: str) -> ApiPath:
    """OpenTSDB's getQueryBaseRoute and explodeAPIPath in one step (an :class:`ApiPath` is
    frozen: the cache's answers are shared)."""
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
