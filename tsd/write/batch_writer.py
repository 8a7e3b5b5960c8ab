"""The storage side of the write path: points of resolved series -> cells -> batch -> storage.

* Input. Series are resolved (UIDs, row-key template) by the ingest service
  (:mod:`tsd.write.ingest`), the only caller: :meth:`add_points` buffers a whole run of
  ``(series, timestamp, value)`` (a socket read, a request body) in one call, encoded by
  :func:`tsd.codec.qualifier.encode_points_into`, at most :meth:`room` points at a time;
  :meth:`add_to` buffers one.
* Batching. Cells go into the current :class:`~tsd.write.batch.Batch`; a background task
  flushes it when it is full or due (``tsd.storage.flush_interval``), at most
  ``max_in_flight`` writes at a time, each a sorted list of puts (or, with
  ``tsd.storage.enable_appends``, one append per row).
* Acknowledgements. :meth:`add_points` returns the future of the batch the point went
  into; it resolves once storage holds that batch (``/api/put?sync``). Nobody has to await
  it: without ``sync`` a point is acknowledged when buffered, as OpenTSDB acknowledges once
  its HBase client queued the RPC.
* Memory is bounded. Buffered plus in-flight cells are capped at ``max_pending_cells``;
  past it :meth:`is_full` is true and protocols stop reading from their sockets until
  :meth:`wait_writable` returns, so a slow store slows the clients down instead of
  growing the heap.
* Failed writes are retried (``retry_delays_s``); a batch that still fails is dropped,
  logged and its future fails ("Storage exception"). On HBase with the log, a failed
  write is not retried here: the batch joins the :class:`~tsd.write.spool.Spool`, which
  keeps what HBase cannot take in the log and drains it in order (``spool_max_bytes``).
  While storage refuses writes (disk
  full, read-only: :class:`~tsd.errors.StorageRefused`) :attr:`storage_refusal` says so,
  until a write succeeds; every new batch is still tried, so recovery needs no restart.
* The head (embedded store): with a :class:`~tsd.write.head_flush.HeadSink`, a batch is
  logged, then goes into the in-memory head (visible to queries) instead of storage; the
  sink writes each row once, compacted, when its hour is closed (docs/write-path.md).
  No single cells are written then, and nothing is left to compact.
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from tsd.codec import KeyLayout, SeriesKey, encode_append_entry, encode_point
from tsd.codec.const import APPEND_COLUMN_QUALIFIER, TIMESTAMP_BYTES
from tsd.codec.const import FAMILY as DATA_FAMILY
from tsd.config import StorageConfig
from tsd.errors import StorageError, StorageRefused, StorageUnavailable
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.storage.base import Put, Storage
from tsd.tasks import cancel_and_wait
from tsd.wal import WriteAheadLog, encode_cells
from tsd.wal.record import (
    CELLS,
    Columns,
    EncodedPart,
    Row,
    frame,
    frame_cells,
    iter_records,
)
from tsd.write.batch import DEFAULT_MAX_CELLS, Batch, BatchPolicy
from tsd.write.compactor import Compactor
from tsd.write.head_flush import HeadSink
from tsd.write.retention import RetainedInterval, Retention, row_spans
from tsd.write.rollup_tracker import RollupTracker
from tsd.write.schedule import CompactionSchedule
from tsd.write.spool import Spool

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
    #: pauses between attempts of a failed batch write
    retry_delays_s: tuple[float, ...] = (0.1, 0.5, 2.0)
    #: seconds a shutdown spends compacting rows that are due
    close_compaction_budget_s: float = 30.0
    #: with a spool, the longest a ``sync`` put without ``sync_timeout`` waits for HBase
    spooled_sync_wait_s: float = 60.0
    #: with a spool, first and longest pause between attempts to log a batch while the log
    #: fails (its disk full) and HBase does not take writes either
    spool_log_retry_s: tuple[float, float] = (0.1, 2.0)


class Writer:
    """Buffers data points into sorted batches and writes them to the data table."""

    def __init__(
        self,
        storage: Storage,
        cfg: StorageConfig,
        registry: StatsRegistry,
        *,
        limits: WriterLimits | None = None,
        schedule: CompactionSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        wal: WriteAheadLog | None = None,
        spool_max_bytes: int | None = None,
        head: HeadSink | None = None,
        rollups: RollupTracker | None = None,
        rollup_intervals: Sequence[RetainedInterval] = (),
    ) -> None:
        """``wal``: log each batch there (fsynced) while storing it, acknowledging it once
        both are done; batches are then cut
        at least every ``tsd.storage.wal.sync_interval``, so that a point acknowledged
        without ``sync`` is on disk within that interval. ``spool_max_bytes`` (with a
        ``wal``; the HBase backend): keep batches storage does not take in the log, up
        to that many bytes, and store them in order once it takes writes again.
        ``rollup_intervals``: the rollup configuration in force, whose tables retention
        covers with the data table (tsd/write/retention.py)."""
        self._storage = storage
        self._wal = wal
        self._head = head
        #: tsd's own rollups of rows stored as cells (tsd/write/rollup_tracker.py)
        self._rollups = rollups
        self._table = cfg.data_table
        self._appends = cfg.enable_appends
        self._layout = KeyLayout.from_storage_config(cfg)
        limits = limits or WriterLimits()
        if head is not None and head.max_pending_cells < limits.max_pending_cells:
            # batches sized to the head's bound (HeadSink.max_pending_cells)
            pending = head.max_pending_cells
            limits = replace(
                limits,
                max_pending_cells=pending,
                max_batch_cells=min(limits.max_batch_cells, max(1, pending // 4)),
            )
        self._limits = limits
        interval_ms = cfg.flush_interval_ms
        if wal is not None:
            interval_ms = min(interval_ms, cfg.wal_sync_interval_ms)
        self._policy = BatchPolicy(self._limits.max_batch_cells, interval_ms / 1000)
        self._clock = clock
        self._wall_clock = wall_clock
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
        self._compacting = cfg.enable_compaction and not cfg.enable_appends and head is None
        self._schedule = schedule if schedule is not None else CompactionSchedule()
        self._compactor = Compactor(
            storage, self._table, registry, fix_duplicates=cfg.fix_duplicates
        )
        self._compaction_tick_s = max(1, cfg.compaction_flush_interval_s)
        self._compaction_task: asyncio.Task[None] | None = None
        retention_s = cfg.embedded_retention_s if cfg.backend == "embedded" else 0
        tables = row_spans(self._table, rollup_intervals)
        self._retention = Retention(storage, tables, self._layout, retention_s)
        self._expired = registry.counter("retention.deleted", type="entries")
        self._time_at = self._layout.salt_width + self._layout.metric_width
        # Stats, under OpenTSDB's names where it has them.
        self._added = registry.counter("datapoints.added", type="all")
        self._stored = registry.counter("datapoints.stored", type="all")
        self._flushes = registry.counter("hbase.rpcs", type="put")
        self._append_rpcs = registry.counter("hbase.rpcs", type="append")
        self._storage_errors = registry.counter("rpc.errors", type="hbase_errors")
        self._dropped = registry.counter("datapoints.dropped", type="storage_errors")
        self._batch_latency = registry.histogram("writer.batch.latency")
        self._spool: Spool | None = None
        if wal is not None and spool_max_bytes is not None:
            self._spool = Spool(
                wal, self._store_columns, self._spooled, registry, max_bytes=spool_max_bytes
            )
        registry.gauge("writer.pending_cells", self.pending_cells)
        registry.gauge("compaction.queue.size", lambda: len(self._schedule))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background flush (and compaction) tasks; call from the running loop."""
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
            if self._spool is not None:
                self._spool.start()
            if self._head is not None:
                self._head.start()
            if self._rollups is not None:
                self._rollups.start()
        housekeeping = self._compacting or self._retention.retention_s > 0
        if housekeeping and self._compaction_task is None:
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
        if self._spool is not None:
            await self._spool.close()
        if self._head is not None:
            await self._head.close(self._limits.close_compaction_budget_s)
        if self._wal is not None:
            await self._wal.close()
        if self._compaction_task is not None:
            await cancel_and_wait(self._compaction_task)
            rows = self._schedule.take_eligible(self._wall_clock()) if self._compacting else []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._limits.close_compaction_budget_s):
                    await self._compactor.compact(rows)
        if self._rollups is not None:
            await self._rollups.close()
        self._closed = True

    # -- adding points ------------------------------------------------------------------------

    def add_points(self, points: Sequence[tuple[SeriesKey, int, int | float]]) -> Ack:
        """Buffer points of known series, in order: the bulk form of :meth:`add_to` (one
        call per socket read or request body). Timestamps and values must be valid, as the
        protocol parsers type them. Callers that honour back-pressure pass at most
        :meth:`room` points."""
        batch, was_empty = self._open_batch(len(points))
        batch.add_points(points)
        self._added.value += len(points)
        return self._added_to_batch(was_empty)

    def _open_batch(self, points: int) -> tuple[Batch, bool]:
        """The batch that takes ``points`` more points (started now if it had none yet)
        and whether it was empty; raises when the writer takes no points (shutting down,
        or the spool refusing: those points counted as refused)."""
        if self._closing:
            raise StorageUnavailable("the writer is shutting down")
        if self._spool is not None and self._spool.refusal is not None:
            self._spool.count_refused(points)
            raise self._spool.refusal
        batch = self._batch
        if batch.started_at is None:
            batch.start(self._clock())
        return batch, batch.cells == 0

    @property
    def logs_points(self) -> bool:
        """Whether :meth:`add_part_logged` is available: the embedded store's head
        behind a write-ahead log."""
        return self._head is not None and self._wal is not None

    async def add_part_logged(self, part: EncodedPart, cells: int) -> None:
        """Buffer points of known series once the write-ahead log holds them, written and
        fsynced (:attr:`logs_points` only): ``part``'s payload becomes a log record of its
        own (committed with the other appenders' records: group commit, the commit letting
        the loop turn first so that parts of requests already received join it), then its runs
        join the current batch as a part already logged, which the head takes with the
        batch (its own record leaves them out). So a caller may acknowledge them as
        durable without waiting for a batch of its own (remote write: a batch per request
        would cost a pass over the head per request). Readers see them once the batch is
        written (within ``tsd.storage.flush_interval``; :meth:`show_logged` waits for it).

        ``part`` holds points of known series in ``cells`` cells, encoded where the
        caller types them (remote write: a row per point,
        :func:`~tsd.wal.record.encode_samples_payload`, its runs the samples themselves:
        :class:`~tsd.wal.record.SampleBlock`).

        Raises StorageError, with nothing buffered, when the log fails or the writer
        takes no points (shutting down, the head over its bound and storage refusing).
        Values and timestamps must be valid, as for :meth:`add_points`."""
        if self._closing:
            raise StorageUnavailable("the writer is shutting down")
        sink, wal = self._head, self._wal
        if sink is None or wal is None:
            raise StorageUnavailable("the write-ahead log does not take points directly")
        if sink.refusal is not None:
            raise sink.refusal
        # Not compressed: zstd was the largest part of logging a request's record in a
        # profile of the daemon (cProfile); the segments go once the head is written.
        seq = await wal.append(frame(CELLS, part.payload), cells, gather=True)
        batch = self._batch
        if batch.started_at is None:
            batch.start(self._clock())
        was_empty = batch.cells == 0
        batch.add_logged(part.runs, cells, seq)
        self._added.value += part.points
        self._added_to_batch(was_empty)

    async def show_logged(self) -> None:
        """Return once the head holds every point :meth:`add_part_logged` took so far
        (a reader that must see them: remote read); at once when there are none."""
        if self._batch.logged or self._in_flight:
            await self.flush()

    def add_part(self, part: EncodedPart) -> Ack:
        """Buffer points encoded ahead (a telnet connection's): a log record's payload and
        the same rows as runs (:meth:`Batch.add_part`). Costs a few steps per call, none
        per point."""
        batch, was_empty = self._open_batch(part.points)
        batch.add_part(part)
        self._added.value += part.points
        return self._added_to_batch(was_empty)

    @property
    def head(self) -> HeadSink | None:
        """The embedded store's in-memory head (None: batches go to storage as cells)."""
        return self._head

    @property
    def storage_refusal(self) -> StorageRefused | None:
        """The error of the last write when storage refused it (full, read-only); None
        again once a write succeeds. Protocols use it to stop acknowledging points before
        they are stored while the store refuses writes. On HBase, also the spool's
        refusal once the log holds ``tsd.storage.wal.max_bytes`` HBase has not taken."""
        if self._refusal is None and self._spool is not None:
            return self._spool.refusal
        return self._refusal

    @property
    def spool(self) -> Spool | None:
        """The HBase spool (None on the embedded store or without the log)."""
        return self._spool

    def sync_wait_s(self, timeout_s: float | None) -> float | None:
        """How long a ``sync`` put waits for storage, given its ``sync_timeout``: with a
        spool, at most :attr:`WriterLimits.spooled_sync_wait_s` without one (during an
        outage the points wait in the log, and the reply is OpenTSDB's sync timeout)."""
        if timeout_s is None and self._spool is not None:
            return self._limits.spooled_sync_wait_s
        return timeout_s

    def room(self) -> int:
        """Points that can still be buffered before the writer is full (0 when it is)."""
        if not self._writable.is_set():
            return 0
        return max(0, self._max_pending_cells - self._in_flight_cells - self._batch.cells)

    def add_to(self, series: SeriesKey, timestamp: int, value: int | float) -> Ack:
        """Buffer one point of a known series (the hot path: no suspension, no lookups)."""
        if self._closing:
            raise StorageUnavailable("the writer is shutting down")
        if self._spool is not None and self._spool.refusal is not None:
            self._spool.count_refused(1)
            raise self._spool.refusal
        base_time_s, qualifier, value_bytes = encode_point(timestamp, value)
        batch = self._batch
        if batch.started_at is None:
            batch.start(self._clock())
        batch.add_cell(series.row_key(base_time_s), qualifier, value_bytes)
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
        """Write the current batch now rather than when due (``sync`` callers). Not
        while spooling: the batch would wait in the log all the same, and batches cut
        once per interval keep the spool's queue growing with time, not with requests."""
        if self._spool is not None and self._spool.active:
            return
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

    async def write_out(self) -> int:
        """Put every point acknowledged so far in storage, where another process reading
        it (a tool beside the daemon) finds it: the buffered batch is written, then, on the
        embedded store, every row of the head, whatever its hour; the head's rows
        written. Raises StorageError when storage refuses them."""
        await self.flush()
        if self._head is None:
            return 0
        return await self._head.flush_all()

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
        if self._head is not None:
            await self._write_to_head(self._head, batch, ack, slots)
            return
        batch.fold()  # cells from here on (parts a telnet worker encoded)
        spool = self._spool
        if spool is not None:
            if spool.active:
                await self._write_to_spool(spool, batch, ack, slots)
                return
            spool.direct_started()
        try:
            await self._write_direct(batch, ack, slots)
        finally:
            if spool is not None:
                spool.direct_done()

    def _written(self, batch: Batch, slots: asyncio.Semaphore) -> None:
        """A batch left memory (stored, logged for the spool, or failed)."""
        self._in_flight_cells -= batch.cells
        slots.release()
        if self.pending_cells() < self._limits.max_pending_cells * 3 // 4:
            self._writable.set()

    async def _write_to_spool(
        self, spool: Spool, batch: Batch, ack: Ack, slots: asyncio.Semaphore
    ) -> None:
        """While spooling: log the batch only; the spool stores it after those before it."""
        spool.routing_started()
        try:
            logged = await self._log(batch)
            delay = self._limits.spool_log_retry_s[0]
            while logged is None and not self._closing:
                # Neither HBase nor the log takes it (the log's disk full): keep it, refuse
                # new points meanwhile (the writer's slots and memory bound hold the rest).
                spool.log_failing(True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._limits.spool_log_retry_s[1])
                logged = await self._log(batch)
        finally:
            self._written(batch, slots)
        if logged is None:
            spool.routing_failed()
            self._fail(batch, ack, StorageError("the write-ahead log failed while spooling"))
            return
        spool.log_failing(False)
        spool.add(logged[0], batch.cells, logged[1], ack, routed=True)

    async def _write_direct(self, batch: Batch, ack: Ack, slots: asyncio.Semaphore) -> None:
        started = time.perf_counter()
        # The log's write and fsync run beside the store's write: storage is not held up
        # by the fsync, and the ack waits for both (a crash between them loses nothing:
        # whichever finished holds the cells).
        logged = asyncio.ensure_future(self._log(batch))
        try:
            error = await self._write_with_retries(list(batch.sorted_rows()), batch.cells)
        finally:
            self._batch_latency.observe(time.perf_counter() - started)
            self._written(batch, slots)
        record = await logged
        seq = None if record is None else record[0]
        if error is not None and record is not None and self._spool is not None:
            self._spool.add(record[0], batch.cells, record[1], ack, routed=False, error=error)
            return
        if error is not None:
            self._fail(batch, ack, error)
            return
        if seq is not None and self._wal is not None:
            self._wal.mark_stored(seq)
        self._refusal = None
        self._stored.inc(batch.cells)
        if not ack.done():
            ack.set_result(None)
        if self._compacting:
            self._note_rows(batch.rows)
        if self._rollups is not None:
            self._rollups.note(batch.rows)

    async def _write_to_head(
        self, sink: HeadSink, batch: Batch, ack: Ack, slots: asyncio.Semaphore
    ) -> None:
        """Log the batch, then put it in the head (visible to queries from then on), then
        acknowledge it: the head only holds logged points. A failed log write fails the
        batch (the head would be its only copy); so does a head over its bound whose rows
        storage refuses."""
        started = time.perf_counter()
        reserved = 0
        try:
            payload, runs = batch.payload_and_runs()
            # room within tsd.storage.head.max_bytes (after a write-out), kept until added
            reserved = await sink.room(runs, batch.cells)
            error: StorageError | None = sink.refusal
            seq = None
            own_cells = batch.cells - batch.logged_cells  # the others are logged already
            if error is None and self._wal is not None and own_cells:
                try:
                    seq = await self._wal.append(frame_cells(payload), own_cells)
                except StorageError as exc:
                    log.error("writer.wal_failed", cells=own_cells, error=exc.message)
                    error = exc
            if error is None:
                sink.add(runs, seq, batch.logged)
        finally:
            sink.unreserve(reserved)
            self._batch_latency.observe(time.perf_counter() - started)
            self._written(batch, slots)
        if error is not None:
            self._fail(batch, ack, error)
            return
        self._refusal = None
        self._stored.inc(batch.cells)
        if not ack.done():
            ack.set_result(None)

    def _fail(self, batch: Batch, ack: Ack, error: StorageError) -> None:
        """Storage did not take the batch: it is dropped (the log keeps it, if it took it,
        for the next start) and its ack fails."""
        self._dropped.inc(batch.cells)
        if isinstance(error, StorageRefused):
            self._refusal = error
        if not ack.done():
            ack.set_exception(error)

    async def _log(self, batch: Batch) -> tuple[int, int] | None:
        """Log the batch (written and fsynced); its record's number and size, None
        without a log or when the log failed (the batch is still stored: the log is a
        second copy)."""
        if self._wal is None:
            return None
        record = encode_cells(batch.rows.items())
        try:
            return await self._wal.append(record, batch.cells), len(record)
        except StorageError as exc:
            log.error("writer.wal_failed", cells=batch.cells, error=exc.message)
            return None

    async def _write_with_retries(self, rows: list[Row], cells: int) -> StorageError | None:
        """None once storage holds the rows, else the last error. With a spool, one
        attempt: the spool does the retrying, in order."""
        delays = self._limits.retry_delays_s if self._spool is None else ()
        for attempt in range(len(delays) + 1):
            try:
                await self._write_rows(rows)
                return None
            except StorageError as exc:
                self._storage_errors.inc()
                if attempt < len(delays) and not isinstance(exc, StorageUnavailable):
                    log.warning("writer.flush_retry", cells=cells, error=str(exc))
                    await asyncio.sleep(delays[attempt])
                    continue
                if self._spool is None:  # else the spool says what happens next
                    log.error("writer.flush_failed", cells=cells, error=str(exc))
                return exc
            except Exception as exc:  # a bug: fail the ack rather than hang sync callers
                log.exception("writer.flush_crashed", cells=cells)
                return StorageError(f"Unexpected exception: {exc}")
        raise AssertionError("unreachable")

    async def _write_rows(self, rows: list[Row]) -> None:
        if self._appends:
            await self._write_appends(rows)
        else:
            await self._write_puts(rows)

    # -- replay -------------------------------------------------------------------------------

    async def recover(self) -> int:
        """Store the cells the log holds from the last run (before taking new points);
        the number of cells replayed. Raises StorageError when storage refuses them (the
        log keeps them for the next try). With a spool (HBase) they are queued in it
        instead, ahead of every new batch, and drained once the writer starts: 0.

        Records are decoded and turned into puts while storage writes the record before
        (its engine works in a thread of its own), the collector held off as in
        :func:`_make_puts`."""
        wal = self._wal
        if wal is None:
            return 0
        if self._spool is not None:  # on HBase: drained in the background, in order
            await self._spool.adopt()
            return 0
        replayed = 0
        for path in await asyncio.to_thread(wal.segments):
            records = await asyncio.to_thread(wal.read_segment, path)
            if self._head is not None:  # into the head: it drops the segments once written
                cells = await self._head.replay(records)
                log.info("wal.replayed", segment=str(path), records=len(records), cells=cells)
                replayed += cells
                continue
            cells = 0
            writing: asyncio.Future[None] | None = None
            for columns in iter_records(records):
                cells += sum(len(qualifiers) for _, qualifiers, _ in columns)
                if self._compacting:
                    self._note_rows(row for row, _, _ in columns)
                if self._rollups is not None:
                    self._rollups.note(row for row, _, _ in columns)
                if self._appends:
                    await self._write_appends(
                        [(row, list(zip(qs, vs, strict=True))) for row, qs, vs in columns]
                    )
                    continue
                puts = _make_puts((row, zip(qs, vs, strict=True)) for row, qs, vs in columns)
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(self._storage.put(self._table, puts))
                await asyncio.sleep(0)  # let it reach storage's thread before the next decode
            if writing is not None:
                await writing
            log.info("wal.replayed", segment=str(path), records=len(records), cells=cells)
            replayed += cells
        if self._head is None:
            await asyncio.to_thread(wal.drop_recovered)
        self._stored.inc(replayed)
        return replayed

    async def _store_columns(self, columns: list[Columns]) -> None:
        """Store a logged record's cells (the spool's drain)."""
        if self._appends:
            await self._write_appends(
                [(row, list(zip(qs, vs, strict=True))) for row, qs, vs in columns]
            )
            return
        puts = _make_puts((row, zip(qs, vs, strict=True)) for row, qs, vs in columns)
        await self._storage.put(self._table, puts)
        self._flushes.inc()

    def _spooled(self, columns: list[Columns], cells: int) -> None:
        """The spool stored a record: count it, and schedule its rows' compaction."""
        self._stored.inc(cells)
        if self._compacting:
            self._note_rows(row for row, _, _ in columns)
        if self._rollups is not None:
            self._rollups.note(row for row, _, _ in columns)

    async def _write_puts(self, rows: list[Row]) -> None:
        await self._storage.put(self._table, _make_puts(rows))
        self._flushes.inc()

    async def _write_appends(self, rows: list[Row]) -> None:
        # One append per row with its cells concatenated in qualifier order: the row's
        # append column then reads as if each point had been appended on its own.
        storage, table = self._storage, self._table
        for row, cells in rows:
            entry = b"".join(encode_append_entry(q, v) for q, v in cells)
            await storage.append(table, row, DATA_FAMILY, APPEND_COLUMN_QUALIFIER, entry)
            self._append_rpcs.inc()

    def _note_rows(self, rows: Iterable[bytes]) -> None:
        start, end = self._time_at, self._time_at + TIMESTAMP_BYTES
        now = self._wall_clock()
        note = self._schedule.note
        for row in rows:
            note(row, int.from_bytes(row[start:end], "big"), now)

    # -- the compaction task ------------------------------------------------------------------

    async def _compact_loop(self) -> None:
        """Compaction of closed hours and, with a retention, dropping expired ones."""
        while True:
            await asyncio.sleep(self._compaction_tick_s)
            try:
                rows = self._schedule.take(self._wall_clock()) if self._compacting else []
                if rows:
                    await self._compactor.compact(rows)
                if self._retention.due(self._wall_clock()):
                    await self.apply_retention()
            except Exception:  # a bug must not end compaction for the daemon's lifetime
                log.exception("compaction.crashed")

    async def apply_retention(self) -> int:
        """Drop the rows (data, rollups, pre-aggregates) whose span ended longer than
        ``tsd.storage.embedded.retention`` ago; the entries deleted."""
        try:
            by_table = await self._retention.apply(self._wall_clock())
        except StorageError as exc:
            log.warning("retention.failed", error=str(exc))
            return 0
        deleted = sum(by_table.values())
        self._expired.inc(deleted)
        if deleted:
            dropped = {table: n for table, n in by_table.items() if n}
            log.info("retention.dropped", entries=dropped, cutoff=self._retention.cutoff_s)
        return deleted

    async def compact_due(self) -> int:
        """Compact the rows the schedule releases now; the number of rows handed out."""
        rows = self._schedule.take(self._wall_clock())
        await self._compactor.compact(rows)
        return len(rows)


def _make_puts(rows: Iterable[tuple[bytes, Iterable[tuple[bytes, bytes]]]]) -> list[Put]:
    """Sorted rows' cells as Puts on the data family (sorted by row then qualifier).

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
        for row, cells in rows:
            for qualifier, value in cells:
                append(Put(row, DATA_FAMILY, qualifier, value))
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
