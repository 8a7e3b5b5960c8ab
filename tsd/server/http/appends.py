"""The awaited forms of :class:`~tsd.write.ingest.IngestSession`'s ways in, for request
handlers (a body may hold more points than the writer has room for, or more new series
than the session's window of lookups): flow control around the session's own calls."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from tsd.data_points import DataPoint
from tsd.write.ingest import IngestSession, Put, RefPoint

T = TypeVar("T")


async def append_in_room(
    session: IngestSession[T], points: list[RefPoint], tags: Sequence[T] | None = None
) -> None:
    """:meth:`IngestSession.append_run` in runs of what the writer has room for, waiting
    while it is full."""
    start, count = 0, len(points)
    while start < count:
        await session.wait_room()
        end = min(count, start + max(1, session.room()))
        run = points if start == 0 and end == count else points[start:end]
        session.append_run(run, None if tags is None else tags[start:end])
        start = end


async def put_waiting(
    session: IngestSession[T], point: DataPoint, tag: T, aliases: Iterable[Hashable]
) -> None:
    """:meth:`IngestSession.put`, waiting for a lookup of the session's window when all
    are busy."""
    if session.put(point, tag, aliases) is Put.BUSY:
        await session.wait_lookup()
        session.put(point, tag, aliases)
