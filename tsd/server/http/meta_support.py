"""Request-side pieces shared by the meta, search, suggest and annotation handlers.

* :func:`meta_service`: the daemon's :class:`~tsd.meta.service.MetaService` (built on first use
  when the daemon did not provide one, without meta tracking hooked to the writer);
* :func:`required_param`: ``getRequiredQueryStringParam`` and its message.
"""

from __future__ import annotations

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.meta.service import MetaService
from tsd.server.http.app import SERVICES

#: Key of the MetaService in ``Services.extra``.
META_KEY = "meta"


def meta_service(request: web.Request) -> MetaService:
    services = request.app[SERVICES]
    meta = services.extra.get(META_KEY)
    if not isinstance(meta, MetaService):
        storage = services.uids.metrics.storage
        meta = MetaService(storage, services.uids, services.config, services.registry)
        services.extra[META_KEY] = meta
    return meta


def required_param(params: dict[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise BadRequestError(f"Missing parameter <code>{name}</code>")
    return value


async def body_of(request: web.Request) -> bytes:
    """The request body (b"" when none)."""
    if not request.body_exists:
        return b""
    return await request.read()
