"""The write path: data point -> UIDs -> row key -> cell -> batch -> storage.

* UIDs. A series (metric + tags) is resolved once; its row-key template
  (:class:`tsd.codec.SeriesKey`) is cached, so a known series costs a dict lookup and the
  qualifier/value encoding. Misses await :meth:`UidService.resolve_many_for_write`, a
  whole burst of new series at once (:meth:`series_of_many`), which assigns new UIDs in
  batches when auto-create allows it.
* The hot path. Protocols remember a template under their own key for a series
  (:meth:`remember_alias`: raw telnet words, /api/put keys) and look runs of points up
  in :attr:`aliases` themselves; :meth:`add_points` then buffers a whole run (a socket
  read, a request body) in one call, encoded by
  :func:`tsd.codec.qualifier.encode_points_into`, at most :meth:`room` points at a time.
* Batching. Cells go into the current :class:`~tsd.write.batch.Batch`; a background task
  flushes it when it is full or due (``tsd.storage.flush_interval``), at most
  ``max_in_flight`` writes at a time, each a sorted list of puts (or, with
  ``tsd.storage.enable_appends``, one append per row).
* Acknowledgements. :meth:`Writer.add` returns the future of the batch the point went
  into; it resolves once storage holds that batch (``/api/put?sync``). Nobody has to await
  it: without ``sync`` a point is acknowledged when buffered, as OpenTSDB acknowledges once
  its HBase client queued the RPC.
* Memory is bounded. Buffered plus in-flight cells are capped at ``max_pending_cells``;
  past it :meth:`is_full` is true and protocols stop reading from their sockets until
  :meth:`wait_writable` returns, so a slow store slows the clients down instead of
  growing the heap.
* Failed writes are retried (``retry_delays_s``); a batch that still fails is dropped,
  logged and its future fails ("Storage exception"). While storage refuses writes (disk
  full, read-only: :class:`~tsd.errors.StorageRefused`) :attr:`storage_refusal` says so,
  until a write succeeds; every new batch is still tried, so recovery needs no restart.
* Compaction. Rows stored by the writer are queued in a
  :class:`~tsd.write.schedule.CompactionSchedule`; a background task hands them to the
  :class:`~tsd.write.compactor.Compactor` once their hour has closed.
* :meth:`close` stops taking points, flushes what is buffered, waits for the writes in
  flight and compacts the rows that are due.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from tsd.codec import KeyLayout, SeriesKey, encode_append_entry, encode_point, make_series_key
from tsd.codec.const import APPEND_COLUMN_QUALIFIER, TIMESTAMP_BYTES
from tsd.codec.const import FAMILY as DATA_FAMILY
from tsd.config import StorageConfig
from tsd.errors import (
    NoSuchUniqueName,
    StorageError,
    StorageRefused,
    StorageUnavailable,
    TsdError,
)
from tsd.log import WRITER, get_logger
from tsd.model import DataPoint, Tags
from tsd.stats import StatsRegistry
from tsd.storage.base import Put, Storage
from tsd.uid.service import UidService
from tsd.write.batch import DEFAULT_MAX_CELLS, Batch, BatchPolicy
from tsd.write.compactor import Compactor
from tsd.write.schedule import CompactionSchedule

log = get_logger(WRITER)

#: The acknowledgement of a batch: resolves when storage holds it.
Ack = asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class WriterLimits:
    """Sizes of the write path (not in opentsdb.conf: OpenTSDB has no such knobs)."""

    max_batch_cells: int = DEFAULT_MAX_CELLS
    #: buffered + in-flight cells before protocols stop reading (about 40 MB of cells)
    max_pending_cells: int = 4 * DEFAULT_MAX_CELLS
    #: concurrent storage writes
    max_in_flight: int = 2
    #: series row-key templates kept; the cache is cleared when it grows past this
    max_series: int = 1_000_000
    #: pauses between attempts of a failed batch write
    retry_delays_s: tuple[float, ...] = (0.1, 0.5, 2.0)
    #: seconds a shutdown spends compacting rows that are due
    close_compaction_budget_s: float = 30.0


class Writer:
    """Buffers data points into sorted batches and writes them to the data table."""

    def __init__(
        self,
        storage: Storage,
        uids: UidService,
        cfg: StorageConfig,
        registry: StatsRegistry,
        *,
        limits: WriterLimits | None = None,
        schedule: CompactionSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_new_series: Callable[[bytes, list[tuple[bytes, bytes]]], None] | None = None,
    ) -> None:
        """``on_new_series(metric_uid, tag_uid_pairs)`` is called (synchronously) when a
        series gets its row-key template, i.e. once per series until the template cache is
        cleared: meta tracking (tsd.meta.tracking.MetaTracker.on_new_series) hangs there."""
        self._storage = storage
        self._uids = uids
        self._table = cfg.data_table
        self._appends = cfg.enable_appends
        self._layout = KeyLayout.from_storage_config(cfg)
        self._limits = limits or WriterLimits()
        self._policy = BatchPolicy(self._limits.max_batch_cells, cfg.flush_interval_ms / 1000)
        self._clock = clock
        self._wall_clock = wall_clock
        self._on_new_series = on_new_series
        self._series: dict[tuple[str, Tags], SeriesKey] = {}
        self._aliases: dict[Hashable, SeriesKey] = {}
        self._max_batch_cells = self._policy.max_cells
        self._max_pending_cells = self._limits.max_pending_cells
        self._batch = Batch(self._policy)
        self._ack: Ack | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._in_flight_cells = 0
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._flush_asked = False
        self._closing = False
        self._closed = False
        self._refusal: StorageRefused | None = None
        self._flusher: asyncio.Task[None] | None = None
        # Compaction (never with appends: OpenTSDB does not compact append rows).
        self._compacting = cfg.enable_compaction and not cfg.enable_appends
        self._schedule = schedule if schedule is not None else CompactionSchedule()
        self._compactor = Compactor(
            storage, self._table, registry, fix_duplicates=cfg.fix_duplicates
        )
        self._compaction_tick_s = max(1, cfg.compaction_flush_interval_s)
        self._compaction_task: asyncio.Task[None] | None = None
        self._time_at = self._layout.salt_width + self._layout.metric_width
        # Stats, under OpenTSDB's names where it has them.
        self._added = registry.counter("datapoints.added", type="all")
        self._stored = registry.counter("datapoints.stored", type="all")
        self._flushes = registry.counter("hbase.rpcs", type="put")
        self._append_rpcs = registry.counter("hbase.rpcs", type="append")
        self._storage_errors = registry.counter("rpc.errors", type="hbase_errors")
        self._dropped = registry.counter("datapoints.dropped", type="storage_errors")
        self._batch_latency = registry.histogram("writer.batch.latency")
        registry.gauge("writer.pending_cells", self.pending_cells)
        registry.gauge("compaction.queue.size", lambda: len(self._schedule))

    @property
    def uids(self) -> UidService:
        return self._uids

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background flush (and compaction) tasks; call from the running loop."""
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        if self._compacting and self._compaction_task is None:
            self._compaction_task = asyncio.get_running_loop().create_task(self._compact_loop())

    async def close(self) -> None:
        """Refuse new points, write everything buffered, compact what is due. Idempotent."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if self._flusher is None:  # never started: flush inline
            self.start()
        assert self._flusher is not None
        await self._flusher
        if self._compaction_task is not None:
            self._compaction_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compaction_task
            rows = self._schedule.take_eligible(self._wall_clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._limits.close_compaction_budget_s):
                    await self._compactor.compact(rows)
        self._closed = True

    # -- adding points ------------------------------------------------------------------------

    def try_add(self, point: DataPoint) -> Ack | None:
        """Buffer ``point`` if its series is known, without suspending; None on a miss."""
        series = self._series.get((point.metric, point.tags))
        if series is None:
            return None
        return self.add_to(series, point.timestamp, point.value)

    async def add(self, point: DataPoint) -> Ack:
        """Buffer ``point``, resolving (and maybe assigning) its UIDs first.

        Raises NoSuchUniqueName (auto-create off), UidAssignmentError or StorageError from
        the UID lookup, StorageUnavailable once closing. The returned future resolves when
        storage holds the point; it may fail with StorageError.
        """
        series = await self.series_of(point.metric, point.tags)
        return self.add_to(series, point.timestamp, point.value)

    async def series_of(self, metric: str, tags: Tags) -> SeriesKey:
        """The row-key template of a series, resolving (maybe assigning) its UIDs once."""
        series = self._series.get((metric, tags))
        if series is not None:
            return series
        (found,) = await self.series_of_many([(metric, tags)])
        if isinstance(found, TsdError):
            raise found
        return found

    async def series_of_many(
        self, keys: Sequence[tuple[str, Tags]]
    ) -> list[SeriesKey | NoSuchUniqueName]:
        """The templates of many series, in order: those not cached are resolved in one
        :meth:`UidService.resolve_many_for_write` (a few storage round trips for the whole
        burst of new series). A series a name of which auto-create refused gets its
        NoSuchUniqueName; storage errors raise for all."""
        cache = self._series
        found: list[SeriesKey | NoSuchUniqueName | None] = [cache.get(key) for key in keys]
        missing = list(
            dict.fromkeys(key for key, got in zip(keys, found, strict=True) if got is None)
        )
        if missing:
            resolved = await self._uids.resolve_many_for_write(missing)
            made: dict[tuple[str, Tags], SeriesKey | NoSuchUniqueName] = {}
            for key, result in zip(missing, resolved, strict=True):
                if isinstance(result, NoSuchUniqueName):
                    made[key] = result
                    continue
                metric_uid, pairs = result
                series = make_series_key(self._layout, metric_uid, pairs)
                if self._on_new_series is not None:
                    self._on_new_series(metric_uid, pairs)
                if len(cache) >= self._limits.max_series:
                    cache.clear()
                made[key] = cache[key] = series
            found = [
                made[key] if got is None else got for key, got in zip(keys, found, strict=True)
            ]
        return cast(list[SeriesKey | NoSuchUniqueName], found)

    def cached_series(self, metric: str, tags: Tags) -> SeriesKey | None:
        """The template of a series already resolved, without suspending; None on a miss."""
        return self._series.get((metric, tags))

    def series_for_alias(self, alias: Hashable) -> SeriesKey | None:
        """A template remembered under a protocol's own key (raw telnet words), or None."""
        return self._aliases.get(alias)

    def remember_alias(self, alias: Hashable, series: SeriesKey) -> None:
        """Remember ``series`` under ``alias``: the caller guarantees that the alias always
        stands for that series (same bytes, same parse). Cleared with the series cache."""
        aliases = self._aliases
        if len(aliases) >= self._limits.max_series:
            aliases.clear()
        aliases[alias] = series

    @property
    def aliases(self) -> Mapping[Hashable, SeriesKey]:
        """The templates remembered under protocols' own keys (see :meth:`remember_alias`),
        for hot loops that look many points up at once."""
        return self._aliases

    def add_points(self, points: Sequence[tuple[SeriesKey, int, int | float]]) -> Ack:
        """Buffer points of known series, in order: the bulk form of :meth:`add_to` (one
        call per socket read or request body). Timestamps and values must be valid, as the
        protocol parsers type them. Callers that honour back-pressure pass at most
        :meth:`room` points."""
        if self._closing:
            raise StorageUnavailable("the writer is shutting down")
        batch = self._batch
        if batch.started_at is None:
            batch.start(self._clock())
        was_empty = batch.cells == 0
        batch.add_points(points)
        self._added.value += len(points)
        return self._added_to_batch(was_empty)

    @property
    def storage_refusal(self) -> StorageRefused | None:
        """The error of the last write when storage refused it (full, read-only); None
        again once a write succeeds. Protocols use it to stop acknowledging points before
        they are stored while the store refuses writes."""
        return self._refusal

    def room(self) -> int:
        """Points that can still be buffered before the writer is full (0 when it is)."""
        if not self._writable.is_set():
            return 0
        return max(0, self._max_pending_cells - self._in_flight_cells - self._batch.cells)

    def add_to(self, series: SeriesKey, timestamp: int, value: int | float) -> Ack:
        """Buffer one point of a known series (the hot path: no suspension, no lookups)."""
        if self._closing:
            raise StorageUnavailable("the writer is shutting down")
        base_time_s, qualifier, value_bytes = encode_point(timestamp, value)
        batch = self._batch
        if batch.started_at is None:
            batch.start(self._clock())
        batch.add(series.row_key(base_time_s), qualifier, value_bytes)
        self._added.value += 1
        return self._added_to_batch(batch.cells == 1)

    def _added_to_batch(self, was_empty: bool) -> Ack:
        """After points joined the batch: wake the flusher for a new or full batch, mark
        the writer full (a full buffer goes now, whatever its age); the batch's ack."""
        cells = self._batch.cells
        if was_empty or cells >= self._max_batch_cells:
            self._wake.set()
        if self._in_flight_cells + cells >= self._max_pending_cells:
            self._writable.clear()
            self._flush_asked = True
            self._wake.set()
        ack = self._ack
        if ack is None:
            ack = self._ack = _new_ack()
        return ack

    # -- flow control and sync ----------------------------------------------------------------

    def pending_cells(self) -> int:
        """Cells buffered or being written."""
        return self._in_flight_cells + self._batch.cells

    def is_full(self) -> bool:
        """True when protocols should stop reading until :meth:`wait_writable`."""
        return not self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def flush_soon(self) -> None:
        """Write the current batch now rather than when due (``sync`` callers)."""
        if not self._batch.is_empty():
            self._flush_asked = True
            self._wake.set()

    async def flush(self) -> None:
        """Write everything buffered so far and wait until storage holds it."""
        ack = self._ack
        waiting = [*self._in_flight]
        self.flush_soon()
        if ack is not None:
            with contextlib.suppress(StorageError):
                await asyncio.shield(ack)
        if waiting:
            await asyncio.wait(waiting)

    def drop_caches(self) -> None:
        """Forget the series templates (with the UID caches: ``dropcaches``)."""
        self._series.clear()
        self._aliases.clear()

    # -- the flush task -----------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        slots = asyncio.Semaphore(self._limits.max_in_flight)
        while True:
            batch = self._batch
            if not batch.is_empty():
                now = self._clock()
                if self._closing or self._flush_asked or batch.is_full() or batch.is_due(now):
                    await slots.acquire()
                    self._start_write(slots)
                    continue
            elif self._closing:
                break
            self._wake.clear()
            timeout = batch.due_in(self._clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        if self._in_flight:
            await asyncio.wait([*self._in_flight])

    def _start_write(self, slots: asyncio.Semaphore) -> None:
        batch, ack = self._batch, self._ack or _new_ack()
        self._batch = Batch(self._policy)
        self._ack = None
        self._flush_asked = False
        self._in_flight_cells += batch.cells
        task = asyncio.get_running_loop().create_task(self._write(batch, ack, slots))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _write(self, batch: Batch, ack: Ack, slots: asyncio.Semaphore) -> None:
        started = time.perf_counter()
        try:
            error = await self._write_with_retries(batch)
        finally:
            self._batch_latency.observe(time.perf_counter() - started)
            self._in_flight_cells -= batch.cells
            slots.release()
            if self.pending_cells() < self._limits.max_pending_cells * 3 // 4:
                self._writable.set()
        if error is not None:
            self._dropped.inc(batch.cells)
            if isinstance(error, StorageRefused):
                self._refusal = error
            if not ack.done():
                ack.set_exception(error)
            return
        self._refusal = None
        self._stored.inc(batch.cells)
        if not ack.done():
            ack.set_result(None)
        if self._compacting:
            self._note_rows(batch)

    async def _write_with_retries(self, batch: Batch) -> StorageError | None:
        """None once storage holds the batch, else the last error."""
        delays = self._limits.retry_delays_s
        for attempt in range(len(delays) + 1):
            try:
                if self._appends:
                    await self._write_appends(batch)
                else:
                    await self._write_puts(batch)
                return None
            except StorageError as exc:
                self._storage_errors.inc()
                if attempt < len(delays) and not isinstance(exc, StorageUnavailable):
                    log.warning("writer.flush_retry", cells=batch.cells, error=str(exc))
                    await asyncio.sleep(delays[attempt])
                    continue
                log.error("writer.flush_failed", cells=batch.cells, error=str(exc))
                return exc
            except Exception as exc:  # a bug: fail the ack rather than hang sync callers
                log.exception("writer.flush_crashed", cells=batch.cells)
                return StorageError(f"Unexpected exception: {exc}")
        raise AssertionError("unreachable")

    async def _write_puts(self, batch: Batch) -> None:
        await self._storage.put(self._table, _make_puts(batch))
        self._flushes.inc()

    async def _write_appends(self, batch: Batch) -> None:
        # One append per row with its cells concatenated in qualifier order: the row's
        # append column then reads as if each point had been appended on its own.
        storage, table = self._storage, self._table
        for row, cells in batch.sorted_rows():
            entry = b"".join(encode_append_entry(q, v) for q, v in cells)
            await storage.append(table, row, DATA_FAMILY, APPEND_COLUMN_QUALIFIER, entry)
            self._append_rpcs.inc()

    def _note_rows(self, batch: Batch) -> None:
        start, end = self._time_at, self._time_at + TIMESTAMP_BYTES
        now = self._wall_clock()
        note = self._schedule.note
        for row in batch.rows:
            note(row, int.from_bytes(row[start:end], "big"), now)

    # -- the compaction task ------------------------------------------------------------------

    async def _compact_loop(self) -> None:
        while True:
            await asyncio.sleep(self._compaction_tick_s)
            try:
                rows = self._schedule.take(self._wall_clock())
                if rows:
                    await self._compactor.compact(rows)
            except Exception:  # a bug must not end compaction for the daemon's lifetime
                log.exception("compaction.crashed")

    async def compact_due(self) -> int:
        """Compact the rows the schedule releases now; the number of rows handed out."""
        rows = self._schedule.take(self._wall_clock())
        await self._compactor.compact(rows)
        return len(rows)


# Put is a frozen dataclass: its __init__ sets each field through object.__setattr__.
# Setting the slots through their descriptors builds the same object in about half the
# time, which is a tenth of the whole cost of a point on the ingest path.
_new_put = object.__new__
_set_row = vars(Put)["row"].__set__
_set_family = vars(Put)["family"].__set__
_set_qualifier = vars(Put)["qualifier"].__set__
_set_value = vars(Put)["value"].__set__


def _make_puts(batch: Batch) -> list[Put]:
    """The batch's cells as Puts on the data family, sorted by row then qualifier.

    The cyclic garbage collector is held off meanwhile: tens of thousands of new objects
    that live until storage has them would set off a collection every 700, each pushing
    the Puts one generation older, and once they reach the oldest a full collection
    follows (about once a batch, measured: 21 full collections for 400,000 points, a
    third of the daemon's CPU time in the collector). Puts hold no cycles.
    """
    puts: list[Put] = []
    append = puts.append
    collecting = gc.isenabled()
    gc.disable()
    try:
        for row, cells in batch.sorted_rows():
            for qualifier, value in cells:
                put = _new_put(Put)
                _set_row(put, row)
                _set_family(put, DATA_FAMILY)
                _set_qualifier(put, qualifier)
                _set_value(put, value)
                append(put)
    finally:
        if collecting:
            gc.enable()
    return puts


def _new_ack() -> Ack:
    ack: Ack = asyncio.get_running_loop().create_future()
    # Mark a failure as seen even when nobody awaits the ack (points put without sync).
    ack.add_done_callback(_consume)
    return ack


def _consume(ack: Ack) -> None:
    if not ack.cancelled():
        ack.exception()
