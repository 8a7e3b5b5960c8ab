"""Running and recently completed queries, for ``/api/stats/query``. Pure and sync.

OpenTSDB's QueryStats keeps the queries in progress and a cache of the last 256 completed
ones, keyed by (remote address, query, HTTP status): the same query from the same client
with the same outcome bumps ``executed`` instead of taking a new entry. The reply is
``{"completed": [...], "running": [...]}`` (a TreeMap: keys sorted), each entry shaped as
Jackson writes QueryStats. Times are Unix epoch milliseconds; durations milliseconds.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

#: Request headers kept masked: /api/stats/query shows the others to anyone who may ask.
SECRET_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})

#: QueryStats.COMPLETED_QUERY_CACHE_SIZE
COMPLETED_QUERIES = 256

#: Netty's reason phrases for the statuses /api/query answers with.
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    408: "Request Timeout",
    413: "Request Entity Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(slots=True)
class TrackedQuery:
    """One query from its parse to its reply."""

    remote: str
    query: dict[str, Any]
    headers: dict[str, str]
    start_ms: int
    start_s: float  # the monotonic clock, for durations
    serial: int
    status: int = 0
    exception: str | None = None
    completed_ms: int = 0
    executed: int = 1
    sent: bool = False
    stats: dict[str, Any] = field(default_factory=dict)


class QueryTracker:
    """The running queries and a bounded cache of completed ones."""

    def __init__(
        self,
        completed_size: int = COMPLETED_QUERIES,
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._running: dict[int, TrackedQuery] = {}
        self._completed: OrderedDict[bytes, TrackedQuery] = OrderedDict()
        self._size = completed_size
        self._wall_clock = wall_clock
        self._clock = clock
        self._serials = itertools.count()

    @property
    def running_count(self) -> int:
        return len(self._running)

    def start(self, remote: str, query: dict[str, Any], headers: Mapping[str, str]) -> TrackedQuery:
        tracked = TrackedQuery(
            remote=remote,
            query=query,
            headers={
                str(key): "********" if key.lower() in SECRET_HEADERS else str(value)
                for key, value in headers.items()
            },
            start_ms=int(self._wall_clock() * 1000),
            start_s=self._clock(),
            serial=next(self._serials),
        )
        self._running[tracked.serial] = tracked
        return tracked

    def finish(
        self,
        tracked: TrackedQuery,
        status: int,
        *,
        exception: str | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> None:
        """Move ``tracked`` to the completed cache (QueryStats.markSerialized + markSent)."""
        self._running.pop(tracked.serial, None)
        elapsed_ms = (self._clock() - tracked.start_s) * 1000
        tracked.status = status
        tracked.exception = exception
        tracked.completed_ms = int(self._wall_clock() * 1000)
        tracked.sent = status == 200
        tracked.stats = {
            **(stats or {}),
            "processingPreWriteTime": elapsed_ms,
            "totalTime": elapsed_ms,
        }
        key = orjson.dumps([tracked.remote, tracked.query, status])
        earlier = self._completed.get(key)
        if earlier is not None:
            earlier.executed += 1
            self._completed.move_to_end(key)
            return
        self._completed[key] = tracked
        if len(self._completed) > self._size:
            self._completed.popitem(last=False)

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """The /api/stats/query body."""
        now_s = self._clock()
        running = [
            {
                "query": q.query,
                "remote": q.remote,
                "user": None,
                "headers": q.headers,
                "queryStart": q.start_ms,
                "elapsed": (now_s - q.start_s) * 1000,
            }
            for q in self._running.values()
        ]
        completed = [self._completed_entry(q) for q in self._completed.values()]
        return {"completed": completed, "running": running}

    def _completed_entry(self, q: TrackedQuery) -> dict[str, Any]:
        return {
            "user": None,
            "requestHeaders": q.headers,
            "numRunningQueries": len(self._running),
            # QueryStats.getException: the text "null" when there was none
            "exception": q.exception if q.exception is not None else "null",
            "httpResponse": {"code": q.status, "reasonPhrase": REASONS.get(q.status, "")},
            "executed": q.executed,
            "query": q.query,
            "queryStartTimestamp": q.start_ms,
            "queryCompletedTimestamp": q.completed_ms,
            "sentToClient": q.sent,
            "stats": dict(sorted(q.stats.items())),
        }
