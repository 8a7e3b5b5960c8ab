"""Request-side pieces shared by the meta, search, suggest and annotation handlers.

* :func:`meta_service`: the daemon's :class:`~tsd.meta.service.MetaService` (built on first use
  when the daemon did not provide one, without meta tracking hooked to the writer);
* :func:`api_method`: ``HttpQuery.getAPIMethod``, the verb after ``?method_override=``;
* :func:`required_param`: ``getRequiredQueryStringParam`` and its message.
"""

from __future__ import annotations

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.meta.service import MetaService
from tsd.server.http.app import SERVICES, query_params

#: Key of the MetaService in ``Services.extra``.
META_KEY = "meta"

_OVERRIDES = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE"}


def meta_service(request: web.Request) -> MetaService:
    services = request.app[SERVICES]
    meta = services.extra.get(META_KEY)
    if not isinstance(meta, MetaService):
        storage = services.uids.metrics.storage
        meta = MetaService(storage, services.uids, services.config, services.registry)
        services.extra[META_KEY] = meta
    return meta


def api_method(request: web.Request) -> str:
    """The verb a handler acts on: a GET may name another with ``method_override``."""
    if request.method != "GET" or "method_override" not in request.query:
        return request.method
    value = request.query.getall("method_override")[-1]
    if not value:
        raise BadRequestError("Missing method override value", status=405)
    method = _OVERRIDES.get(value.lower())
    if method is None:
        raise BadRequestError("Unknown or unsupported method override value", status=405)
    return method


def required_param(params: dict[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise BadRequestError(f"Missing parameter <code>{name}</code>")
    return value


def params_of(request: web.Request) -> dict[str, str]:
    """The query string, last value of a repeated key winning (as Netty's decoder)."""
    return query_params(request)


def method_not_allowed_for(method: str) -> BadRequestError:
    """The 405 of the meta and annotation handlers (no space before the bracket in some of
    OpenTSDB's messages is not reproduced: one wording)."""
    return BadRequestError(
        "Method not allowed",
        f"The HTTP method [{method}] is not permitted for this endpoint",
        status=405,
    )


async def body_of(request: web.Request) -> bytes:
    """The request body (b"" when none)."""
    if not request.body_exists:
        return b""
    return await request.read()
