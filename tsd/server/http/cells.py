"""The loop /api/rollup and /api/histogram share (PutDataPointRpc.processDataPoint over
their point classes): each point checked and stored in body order, failures collected
with their echo, and /api/put's reply."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from aiohttp import web

from tsd.protocol.put_reply import DatapointEcho, PutError, cells_response, parse_put_flags
from tsd.server.http.errors import json_response
from tsd.server.http.routing import query_params

__all__ = ["Failure", "store_points"]

P = TypeVar("P")


class Failure(Generic[P]):
    """A point not stored: OpenTSDB's details text, the echo, and whether it counts as
    queued (a failure inside the write, which OpenTSDB reports from its errback)."""

    __slots__ = ("echo", "message", "queued")

    def __init__(self, message: str, echo: DatapointEcho, *, queued: bool = False) -> None:
        self.message, self.echo, self.queued = message, echo, queued


async def store_points(
    request: web.Request,
    parsed: Sequence[tuple[P, DatapointEcho] | PutError],
    store: Callable[[P, DatapointEcho], Awaitable[Failure[P] | None]],
) -> web.Response:
    """Store each parsed point with ``store`` (None: stored) and answer as /api/put."""
    flags = parse_put_flags(query_params(request))
    errors: list[PutError] = []
    queued = stored = 0
    for item in parsed:
        if isinstance(item, PutError):
            errors.append(item)
            continue
        failure = await store(*item)
        if failure is None:
            queued += 1
            stored += 1
            continue
        queued += failure.queued
        errors.append(PutError(failure.message, failure.echo))
    status, body = cells_response(
        flags, points=len(parsed), queued=queued, stored=stored, errors=errors
    )
    return json_response(body, status)
