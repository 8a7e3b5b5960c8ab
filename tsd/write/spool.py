"""Spool: while HBase cannot take writes, points wait in the write-ahead log, on disk,
and go to HBase in log order once it answers again (docs/write-path.md, "HBase outage").

Theory of operation:

* Direct. Normally the writer logs a batch and puts it to HBase side by side, as single
  cells (OpenTSDB reading the same tables sees them at once); the spool only counts the
  direct writes in flight (:meth:`direct_started`, :meth:`direct_done`).
* Spooling. A direct write that fails (one attempt: the drain does the retrying) hands
  its logged record to :meth:`add` and the spool becomes :attr:`active`. From then on
  every new batch is only logged (fsynced) and handed over too, so the batches HBase has
  not taken form one queue in log order, and a later point of a series never reaches
  HBase before an earlier one.
* On disk, not in memory. The spool keeps a few numbers per record (its sequence number,
  size, time and the batch's acknowledgement), never its cells: the drain reads each
  record back from its segment (:func:`tsd.wal.log.read_record_at`). Batches are cut at
  most once per sync interval while spooling (``sync`` puts do not cut them early), so
  the queue grows by about one entry a second of outage, whatever the ingest rate.
* Draining. One task takes the oldest record, reads it, and puts its cells until HBase
  takes them, waiting between attempts (:data:`DRAIN_RETRY_DELAYS_S`, the last one
  repeated); then the log is told the record is stored (its segment goes once all of it
  is) and the batch's acknowledgement resolves (``/api/put?sync`` replies then). It
  starts once no direct write is in flight, so a direct write that fails late still
  joins the queue in its place. An empty queue ends spooling: batches go direct again.
* Bounded. Past ``max_bytes`` of records waiting, :attr:`refusal` is set and the writer
  refuses new points with it (:class:`~tsd.errors.SpoolFull`, 503 / ``put: HBase
  error: ...``); points it took before are still logged, so the log passes ``max_bytes``
  by at most the writer's in-memory bound. Points are taken again once the backlog is
  below :data:`RESUME_FRACTION` of the bound.
* The log failing too (its disk full): the batch stays in memory and is logged again
  (every 0.1 s, doubling to 2 s), new points are refused meanwhile (:meth:`log_failing`),
  so nothing acknowledged is lost and memory stays within the writer's bound.
* Visible. ``spool.*`` stats (backlog bytes, records, cells, oldest age; drained records
  and cells; drain errors; refused points) and ``spool.*`` log lines (started, waiting,
  draining, progress, drained, full, accepting).
* Shutdown (:meth:`close`): the drain stops; records not stored stay in the log.
  Acknowledgements still waiting fail. On the next start :meth:`adopt` queues them
  before anything new (the daemon listens at once; each segment is deleted once drained).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from tsd.errors import SpoolFull, StorageError, StorageUnavailable
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.tasks import cancel_and_wait
from tsd.wal import WriteAheadLog
from tsd.wal.log import read_record_at
from tsd.wal.record import HEADER, SEGMENT_MAGIC, Columns, iter_records

log = get_logger(WRITER)

#: Pauses between attempts to drain the oldest record; the last one repeats.
DRAIN_RETRY_DELAYS_S = (0.1, 0.25, 0.5, 1.0, 2.0)
#: Seconds between two progress (or still-failing) log lines.
LOG_EVERY_S = 10.0
#: Points are taken again once the backlog is below this fraction of ``max_bytes``.
RESUME_FRACTION = 0.9


@dataclass(slots=True)
class _Spooled:
    """A logged record HBase has not taken yet."""

    seq: int  # negative: a record the last run left (no sequence number in this run)
    cells: int  # 0 for those: counted once read
    size: int
    logged_at: float  # wall clock
    ack: asyncio.Future[None] | None
    #: a record the last run left: its segment and offset, and whether it ends the segment
    where: tuple[Path, int] | None = None
    ends_segment: bool = False


class Spool:
    """The queue of logged records waiting for HBase, and the task that drains it."""

    def __init__(
        self,
        wal: WriteAheadLog,
        store: Callable[[list[Columns]], Awaitable[None]],
        on_stored: Callable[[list[Columns], int], None],
        registry: StatsRegistry,
        *,
        max_bytes: int,
        retry_delays_s: tuple[float, ...] = DRAIN_RETRY_DELAYS_S,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``store(columns)`` puts a record's cells (raises StorageError when HBase does
        not take them); ``on_stored(columns, cells)`` follows each record stored."""
        self._wal = wal
        self._store = store
        self._on_stored = on_stored
        self._max_bytes = max_bytes
        self._delays = retry_delays_s
        self._wall_clock = wall_clock
        self._pending: deque[_Spooled] = deque()
        self._bytes = 0
        self._cells = 0
        self._routing = 0  # batches being logged on their way into the queue
        self._direct = 0  # direct writes in flight
        self._active = False
        self._refusal: SpoolFull | None = None
        self._log_refusal: SpoolFull | None = None
        self._wake = asyncio.Event()
        self._drainer: asyncio.Task[None] | None = None
        self._started_at = 0.0  # monotonic, when spooling began
        self._outage_cells = 0  # cells drained since then
        self._last_progress = 0.0
        self._drained_records = registry.counter("spool.drained", type="records")
        self._drained_cells = registry.counter("spool.drained", type="cells")
        self._errors = registry.counter("spool.errors", type="drain")
        self._refused = registry.counter("spool.refused", type="points")
        registry.gauge("spool.backlog", lambda: self._bytes, type="bytes")
        registry.gauge("spool.backlog", lambda: len(self._pending), type="records")
        registry.gauge("spool.backlog", lambda: self._cells, type="cells")
        registry.gauge("spool.backlog_age_s", lambda: int(self.oldest_age_s()))
        registry.gauge("spool.active", lambda: int(self._active))

    # -- state --------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True while batches go to the queue instead of HBase."""
        return self._active

    @property
    def refusal(self) -> SpoolFull | None:
        """Set while the backlog is past ``max_bytes``, or while the log cannot be written
        (its disk full) as HBase takes nothing: new points are refused with it."""
        return self._refusal or self._log_refusal

    def log_failing(self, failing: bool) -> None:
        """The writer could (not) log a batch on its way into the queue; the batch waits
        in memory meanwhile, and new points are refused."""
        if failing and self._log_refusal is None:
            self._log_refusal = SpoolFull(
                "HBase is not taking writes and the write-ahead log cannot be written"
                " (see the writer.wal_failed log lines): data points are refused until"
                " either takes them"
            )
            log.error("spool.log_failing", **self._status())
        elif not failing and self._log_refusal is not None:
            self._log_refusal = None
            log.info("spool.log_writable", **self._status())

    def backlog(self) -> tuple[int, int, int]:
        """Bytes, records and cells waiting for HBase."""
        return self._bytes, len(self._pending), self._cells

    def oldest_age_s(self) -> float:
        """Seconds the oldest waiting record has been in the log (0 when none)."""
        if not self._pending:
            return 0.0
        return max(0.0, self._wall_clock() - self._pending[0].logged_at)

    def count_refused(self, points: int) -> None:
        self._refused.inc(points)

    # -- the writer's hooks -------------------------------------------------------------------

    def direct_started(self) -> None:
        self._direct += 1

    def direct_done(self) -> None:
        self._direct -= 1
        self._wake.set()

    def routing_started(self) -> None:
        """A batch is being logged on its way into the queue (:meth:`add` or
        :meth:`routing_failed` follows)."""
        self._routing += 1

    def routing_failed(self) -> None:
        """The log refused the batch: it never joins the queue."""
        self._routing -= 1
        self._wake.set()

    def add(
        self,
        seq: int,
        cells: int,
        size: int,
        ack: asyncio.Future[None] | None,
        *,
        routed: bool,
        error: StorageError | None = None,
    ) -> None:
        """Queue the logged record ``seq`` (``size`` bytes); ``ack`` resolves once HBase
        holds it. ``routed``: it came through :meth:`routing_started`; else it is a direct
        write that failed with ``error``."""
        if routed:
            self._routing -= 1
        if not self._active:
            self._active = True
            self._started_at = time.monotonic()
            self._outage_cells = 0
            log.warning(
                "spool.started",
                error=None if error is None else error.message,
                cells=cells,
            )
        item = _Spooled(seq, cells, size, self._wall_clock(), ack)
        pending = self._pending
        if not pending or pending[-1].seq < seq:
            pending.append(item)
        else:  # a direct write that failed after later batches were queued
            at = next(i for i, other in enumerate(pending) if other.seq > seq)
            pending.insert(at, item)
        self._bytes += size
        self._cells += cells
        self._check_bound()
        self._wake.set()

    def _check_bound(self) -> None:
        if self._refusal is None and self._bytes >= self._max_bytes:
            self._refusal = SpoolFull(
                f"HBase is not taking writes and {self._bytes} bytes of data points wait"
                f" for it in the write-ahead log (tsd.storage.wal.max_bytes ="
                f" {self._max_bytes}): data points are refused until it catches up"
            )
            log.error("spool.full", **self._status())

    async def adopt(self) -> int:
        """Queue the records the last run left in the log, before any new batch (call
        before :meth:`start`): the daemon listens at once and they drain in the
        background, rather than being replayed first. The number of records queued."""
        wal = self._wal
        adopted: list[_Spooled] = []
        for path in await asyncio.to_thread(wal.segments):
            records = await asyncio.to_thread(wal.read_segment, path)
            if not records:
                wal.drop_segment(path)
                continue
            logged_at = (await asyncio.to_thread(path.stat)).st_mtime
            offset = len(SEGMENT_MAGIC)
            for n, (_, payload) in enumerate(records):
                size = HEADER.size + len(payload)
                last = n == len(records) - 1
                adopted.append(_Spooled(0, 0, size, logged_at, None, (path, offset), last))
                offset += size
        for n, item in enumerate(adopted):
            item.seq = n - len(adopted)  # before every record of this run (0 and up)
        if adopted:
            self._pending.extendleft(reversed(adopted))
            self._bytes += sum(item.size for item in adopted)
            self._active = True
            self._started_at = time.monotonic()
            self._outage_cells = 0
            log.warning("spool.adopted", **self._status())
            self._check_bound()
            self._wake.set()
        return len(adopted)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain_loop())

    async def close(self) -> None:
        """Stop draining. What HBase has not taken stays in the log for the next start."""
        await cancel_and_wait(self._drainer)
        self._drainer = None
        if self._pending:
            log.warning("spool.closed", **self._status())
        error = StorageUnavailable(
            "shutting down: the data points stay in the write-ahead log for the next start"
        )
        for item in self._pending:
            if item.ack is not None and not item.ack.done():
                item.ack.set_exception(error)

    # -- the drain ----------------------------------------------------------------------------

    async def _drain_loop(self) -> None:
        while True:
            await self._wait_for_work()
            item = self._pending[0]
            columns = await self._read(item)
            if columns is not None:
                await self._store_until_taken(columns, item)
            self._stored(item, columns)

    async def _wait_for_work(self) -> None:
        """Return once a record waits and no direct write is in flight (one that fails
        must join the queue before anything after it is drained)."""
        while not self._pending or self._direct:
            if self._active and not self._pending and not self._routing:
                self._finish()
            self._wake.clear()
            await self._wake.wait()

    async def _read(self, item: _Spooled) -> list[Columns] | None:
        """The record's cells, read back from its segment; None when it cannot be read
        (damage under the log: logged, and the record is given up)."""
        where = item.where or self._wal.location(item.seq)
        try:
            if where is None:
                raise StorageError(f"write-ahead log: record {item.seq} is not in the log")
            record = await asyncio.to_thread(read_record_at, *where)
        except StorageError as exc:
            log.error("spool.record_lost", seq=item.seq, cells=item.cells, error=exc.message)
            return None
        return next(iter_records([record]), [])

    async def _store_until_taken(self, columns: list[Columns], item: _Spooled) -> None:
        attempt = 0
        last_log = 0.0
        while True:
            try:
                await self._store(columns)
            except Exception as exc:
                self._errors.inc()
                message = exc.message if isinstance(exc, StorageError) else repr(exc)
                now = time.monotonic()
                if attempt == 0 or now - last_log >= LOG_EVERY_S:
                    if not isinstance(exc, StorageError):
                        log.exception("spool.drain_crashed", seq=item.seq)
                    log.warning(
                        "spool.waiting", error=message, attempts=attempt + 1, **self._status()
                    )
                    last_log = now
                await asyncio.sleep(self._delays[min(attempt, len(self._delays) - 1)])
                attempt += 1
                continue
            if attempt:
                log.info("spool.draining", attempts=attempt + 1, **self._status())
            return

    def _stored(self, item: _Spooled, columns: list[Columns] | None) -> None:
        pending = self._pending
        if pending[0] is item:
            pending.popleft()
        else:  # (a failed direct write queued ahead of it meanwhile: cannot happen today)
            pending.remove(item)
        self._bytes -= item.size
        self._cells -= item.cells
        if item.where is None:
            self._wal.mark_stored(item.seq)
        elif item.ends_segment:
            self._wal.drop_segment(item.where[0])
        if columns is not None:
            cells = item.cells or sum(len(qualifiers) for _, qualifiers, _ in columns)
            self._drained_records.inc()
            self._drained_cells.inc(cells)
            self._outage_cells += cells
            self._on_stored(columns, cells)
            if item.ack is not None and not item.ack.done():
                item.ack.set_result(None)
        elif item.ack is not None and not item.ack.done():
            item.ack.set_exception(StorageError("write-ahead log: spooled record lost"))
        if self._refusal is not None and self._bytes < self._max_bytes * RESUME_FRACTION:
            self._refusal = None
            log.info("spool.accepting", **self._status())
        now = time.monotonic()
        if pending and now - self._last_progress >= LOG_EVERY_S:
            self._last_progress = now
            log.info("spool.progress", **self._status())

    def _finish(self) -> None:
        self._active = False
        log.info(
            "spool.drained",
            seconds=round(time.monotonic() - self._started_at, 3),
            drained_cells=self._outage_cells,
        )

    def _status(self) -> dict[str, int | float]:
        return {
            "backlog_bytes": self._bytes,
            "backlog_records": len(self._pending),
            "backlog_cells": self._cells,
            "oldest_age_s": round(self.oldest_age_s(), 3),
        }
