"""What one query may cost, checked before the memory is spent, and how it is stopped. Pure.

Theory of operation (issue 13; VictoriaMetrics' ``-search.maxPointsPerTimeseries``,
``-search.maxSamplesPerQuery`` and ``-search.maxMemoryPerQuery`` are the model; OpenTSDB
2.4.1 has only ``tsd.query.limits.data_points`` / ``bytes``, counted while scanning):

* **Buckets** (``tsd.query.limits.buckets``): a downsampler with a fill policy emits every
  interval of the window for every series, so it allocates ``intervals x series`` cells
  whatever the data. The interval count is known at planning time: one series' worth over
  the limit is refused before the scan; once the scan says how many series there are, the
  product is checked before any kernel runs.
* **Output points** (``tsd.query.limits.output_points``): an upper bound of the points the
  answer can carry (per group: the buckets, or the points read when not downsampling),
  checked before aggregating.
* **Memory** (``tsd.query.limits.memory``): bytes the query is expected to hold, estimated
  from the points decoded so far and the cells the kernels will allocate; checked while
  scanning and before aggregating. Every running query also charges a process-wide
  :class:`MemoryPool` (``tsd.query.memory_budget``): a query that would pass it is refused
  with a 503 and nothing else is disturbed.
* **Cancellation**: a :class:`QueryControl` per query carries a cancel flag (set when the
  client goes away or the daemon stops), the query's deadline (``tsd.query.timeout``) and
  its regexp budget (``tsd.query.filter.regexp_budget``). Kernels running in worker threads
  call :meth:`QueryControl.check` at each chunk boundary, so a cancelled query stops at the
  next chunk instead of finishing.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from tsd.errors import BadRequestError, TsdError
from tsd.query.calendar import FIXED_UNIT_MS
from tsd.query_spec import DownsampleSpec, FillPolicy

__all__ = [
    "BYTES_PER_CELL",
    "BYTES_PER_OUTPUT_POINT",
    "BYTES_PER_POINT",
    "BYTES_PER_SERIES",
    "MemoryPool",
    "QueryCancelled",
    "QueryControl",
    "QueryLimits",
    "buckets_per_series",
]

#: Estimated bytes a decoded point costs until the answer is built: the decoded arrays
#: (timestamp, double, integer, flag: 25 bytes), the assembled spans (a copy) and slack.
BYTES_PER_POINT = 48
#: Estimated bytes per series read: its key, tags, TSUID, result objects and arrays.
BYTES_PER_SERIES = 2048
#: Estimated bytes per point of the answer until it is written (the series' arrays and
#: their JSON text).
BYTES_PER_OUTPUT_POINT = 24
#: Estimated bytes per downsampling cell (bucket of one series): the filled values, the
#: presence mask, the timestamps and the aggregation's working copies.
BYTES_PER_CELL = 40

#: Nominal length of a calendar unit, the shortest it can be (more intervals: an upper bound).
_CALENDAR_MIN_MS = {
    "d": 23 * 3_600_000,  # a day that loses an hour to DST
    "w": 7 * 23 * 3_600_000,
    "n": 28 * 86_400_000,
    "y": 365 * 86_400_000,
}

TOO_MANY_BUCKETS = (
    "Sorry, you have attempted to compute more than our limit of {limit} downsampling "
    "buckets (intervals x series). Please use a longer downsampling interval, filter using "
    "more tags or decrease your time range."
)
TOO_MANY_OUTPUT_POINTS = (
    "Sorry, you have attempted to return more than our limit of {limit} data points. "
    "Please use a longer downsampling interval, filter using more tags or decrease your "
    "time range."
)
TOO_MUCH_MEMORY = (
    "Sorry, this query would need more than our limit of {mb}MB of memory. Please try "
    "filtering using more tags or decrease your time range."
)
TIMED_OUT = "Query timed out after {ms} ms (tsd.query.timeout)"
BUSY = "The TSD is busy with other queries (tsd.query.memory_budget); please try again later"


class QueryCancelled(TsdError):
    """The query was cancelled (client gone, daemon stopping): its work stops here."""

    status = 503


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """The ``tsd.query.limits.*`` bounds of one query (0 = no bound)."""

    buckets: int = 0
    output_points: int = 0
    memory_bytes: int = 0


def buckets_per_series(spec: DownsampleSpec | None, start_ms: int, end_ms: int) -> int:
    """How many intervals a downsampler emits per series over the window (an upper bound
    for calendar intervals); 0 without downsampling, 1 for ``0all``."""
    if spec is None:
        return 0
    if spec.run_all:
        return 1
    span = max(0, end_ms - start_ms)
    if spec.use_calendar:
        unit = spec.calendar_unit
        unit_ms = FIXED_UNIT_MS.get(unit) or _CALENDAR_MIN_MS.get(unit, 23 * 3_600_000)
        interval = max(1, spec.calendar_amount) * unit_ms
    else:
        interval = max(1, spec.interval_ms)
    return math.ceil(span / interval) + 1


def fills(spec: DownsampleSpec | None) -> bool:
    """True when the downsampler emits every interval (a fill policy other than none)."""
    return spec is not None and not spec.run_all and spec.fill_policy is not FillPolicy.NONE


class MemoryPool:
    """Bytes charged by every running query against one budget (0 = unbounded). Used from
    the event loop only."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.charged = 0

    def take(self, nbytes: int) -> None:
        if self.budget > 0 and self.charged + nbytes > self.budget:
            raise BadRequestError(BUSY, status=503)
        self.charged += nbytes

    def give_back(self, nbytes: int) -> None:
        self.charged = max(0, self.charged - nbytes)


class QueryControl:
    """One query's limits, memory charge, deadline and cancel flag.

    :meth:`check` is safe from worker threads (the flag is a ``threading.Event``); the
    charging methods run on the event loop.
    """

    def __init__(
        self,
        limits: QueryLimits,
        pool: MemoryPool | None = None,
        *,
        timeout_ms: int = 0,
        regexp_budget_s: float = 0.0,
    ) -> None:
        self.limits = limits
        self.timeout_ms = timeout_ms
        self._pool = pool
        self._cancelled = threading.Event()
        self.reason = ""
        now = time.monotonic()
        self.deadline = now + timeout_ms / 1000 if timeout_ms > 0 else math.inf
        self.regexp_budget_s = regexp_budget_s
        self._regexp_left = regexp_budget_s if regexp_budget_s > 0 else math.inf
        self._regexp_lock = threading.Lock()
        self.charged = 0

    # -- cancellation -------------------------------------------------------------------------

    def cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self.reason = reason
            self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self) -> None:
        """Raise once the query is cancelled (:class:`QueryCancelled`) or past its deadline
        (408, as ``tsd.query.timeout``); called at every chunk boundary of the work."""
        if time.monotonic() > self.deadline:
            self.cancel("timeout")
        if self._cancelled.is_set():
            raise self.cancel_error()

    def cancel_error(self) -> TsdError:
        if self.reason == "timeout":
            return BadRequestError(TIMED_OUT.format(ms=self.timeout_ms), status=408)
        return QueryCancelled(f"The query was cancelled ({self.reason})")

    # -- regexp budget ------------------------------------------------------------------------

    def regexp_time_left(self) -> float:
        """Seconds the query's regexp filters may still spend (``inf`` when unbounded)."""
        return min(self._regexp_left, self.deadline - time.monotonic())

    def spend_regexp(self, seconds: float) -> None:
        with self._regexp_lock:
            self._regexp_left -= seconds

    # -- planning-time checks -----------------------------------------------------------------

    def check_buckets(self, per_series: int, series: int, filled: bool) -> None:
        """The buckets bound: before the scan ``series`` is 1, after it the real count."""
        limit = self.limits.buckets
        if filled and limit > 0 and per_series * series > limit:
            raise BadRequestError(TOO_MANY_BUCKETS.format(limit=limit), status=413)

    def check_output(self, points: int) -> None:
        limit = self.limits.output_points
        if limit > 0 and points > limit:
            raise BadRequestError(TOO_MANY_OUTPUT_POINTS.format(limit=limit), status=413)

    def charge(self, nbytes: int) -> None:
        """Account ``nbytes`` more: 413 past the query's own limit, 503 past the pool's."""
        limit = self.limits.memory_bytes
        if limit > 0 and self.charged + nbytes > limit:
            mb = limit // 1024 // 1024
            raise BadRequestError(TOO_MUCH_MEMORY.format(mb=mb), status=413)
        if self._pool is not None:
            self._pool.take(nbytes)
        self.charged += nbytes

    def release(self) -> None:
        """Give back everything charged (the query is over)."""
        if self._pool is not None:
            self._pool.give_back(self.charged)
        self.charged = 0
