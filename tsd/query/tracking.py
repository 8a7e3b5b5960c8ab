"""Running and recently completed queries, for ``/api/stats/query``. Pure and sync.

OpenTSDB's QueryStats keeps the queries in progress and a cache of the last 256 completed
ones, keyed by (remote address, query, HTTP status): the same query from the same client
with the same outcome bumps ``executed`` instead of taking a new entry. The reply is
``{"completed": [...], "running": [...]}`` (a TreeMap: keys sorted), each entry shaped as
Jackson writes QueryStats. Times are Unix epoch milliseconds; durations milliseconds.

Bounded in bytes, not only in entries (OpenTSDB keeps 256 whole queries: twenty distinct
4 MB queries held 521 MB): each query is kept as its JSON (not as Python objects), whole
up to :data:`MAX_TRACKED_QUERY_BYTES` and otherwise cut down to its top-level scalars and
a ``"truncated"`` note; the completed entries' queries, headers and exception texts
together stay under :data:`COMPLETED_QUERY_BYTES` (the oldest go first), and entries are
told apart by a digest of their key rather than the key itself.
"""

from __future__ import annotations

import hashlib
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
#: A query's JSON kept whole up to this many bytes (a dashboard's queries are a few KB);
#: a larger one keeps its top-level scalars (start, end, ...) and a "truncated" note
MAX_TRACKED_QUERY_BYTES = 64 * 1024
#: The completed entries' queries, headers and exception texts kept in all, at most
COMPLETED_QUERY_BYTES = 8 * 1024 * 1024
#: Characters of a string kept in a truncated query, and of an exception text
MAX_TRACKED_TEXT = 1024

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
    #: the query's JSON, bounded (see the module docstring)
    query: orjson.Fragment
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
    #: digest of the remote address and the whole query: the completed entries' key
    digest: bytes = b""
    #: the bytes this entry keeps (query JSON, headers, exception)
    size: int = 0


class QueryTracker:
    """The running queries and a bounded cache of completed ones."""

    def __init__(
        self,
        completed_size: int = COMPLETED_QUERIES,
        *,
        completed_bytes: int = COMPLETED_QUERY_BYTES,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._running: dict[int, TrackedQuery] = {}
        self._completed: OrderedDict[bytes, TrackedQuery] = OrderedDict()
        self._size = completed_size
        self._max_bytes = completed_bytes
        #: bytes the completed entries keep (their ``size``)
        self.completed_bytes = 0
        self._wall_clock = wall_clock
        self._clock = clock
        self._serials = itertools.count()

    @property
    def running_count(self) -> int:
        return len(self._running)

    def start(self, remote: str, query: dict[str, Any], headers: Mapping[str, str]) -> TrackedQuery:
        whole = orjson.dumps(query)
        kept = whole if len(whole) <= MAX_TRACKED_QUERY_BYTES else _truncated(query, len(whole))
        masked = {
            str(key): "********" if key.lower() in SECRET_HEADERS else str(value)
            for key, value in headers.items()
        }
        tracked = TrackedQuery(
            remote=remote,
            query=orjson.Fragment(kept),
            headers=masked,
            start_ms=int(self._wall_clock() * 1000),
            start_s=self._clock(),
            serial=next(self._serials),
            digest=hashlib.blake2b(orjson.dumps(remote) + whole, digest_size=16).digest(),
            size=len(kept) + sum(len(key) + len(value) for key, value in masked.items()),
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
        if exception is not None and len(exception) > MAX_TRACKED_TEXT:
            exception = exception[:MAX_TRACKED_TEXT] + "..."
        tracked.exception = exception
        tracked.size += len(exception or "")
        tracked.completed_ms = int(self._wall_clock() * 1000)
        tracked.sent = status == 200
        tracked.stats = {
            **(stats or {}),
            "processingPreWriteTime": elapsed_ms,
            "totalTime": elapsed_ms,
        }
        key = tracked.digest + status.to_bytes(2, "big")
        earlier = self._completed.get(key)
        if earlier is not None:
            earlier.executed += 1
            self._completed.move_to_end(key)
            return
        self._completed[key] = tracked
        self.completed_bytes += tracked.size
        while len(self._completed) > self._size or (
            self.completed_bytes > self._max_bytes and len(self._completed) > 1
        ):
            _, oldest = self._completed.popitem(last=False)
            self.completed_bytes -= oldest.size

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


def _truncated(query: dict[str, Any], size: int) -> bytes:
    """A query too large to keep: its top-level scalars (strings cut), and a note."""
    kept: dict[str, Any] = {}
    for key, value in query.items():
        if isinstance(value, str):
            kept[key] = value[:MAX_TRACKED_TEXT]
        elif value is None or isinstance(value, bool | int | float):
            kept[key] = value
    kept["truncated"] = (
        f"the query's JSON is {size} bytes; /api/stats/query keeps {MAX_TRACKED_QUERY_BYTES}"
        " at most"
    )
    return orjson.dumps(kept)
