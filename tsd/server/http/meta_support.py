"""Request-side pieces shared by the meta, search, suggest and annotation handlers.

* :func:`meta_service`: the daemon's :class:`~tsd.meta.service.MetaService` (built on first use
  when the daemon did not provide one, without meta tracking hooked to the writer);
* :func:`required_param`: ``getRequiredQueryStringParam`` and its message.
"""

from __future__ import annotations

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.meta.service import MetaService
from tsd.server.http.context import SERVICES


def meta_service(request: web.Request) -> MetaService:
    return request.app[SERVICES].meta


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
