"""Rows leaving the head (:mod:`tsd.head`) for the embedded store: one compacted cell each.

When (docs/write-path.md): a row whose hour ended ``tsd.storage.head.grace`` seconds ago
and that got no point for as long (:meth:`tsd.head.Head.closed`); the oldest rows, at
once, while the head holds more than ``tsd.storage.head.max_bytes``; everything on
shutdown.

How, per chunk of rows: read the rows storage already holds (a late point for an hour
already written), compact each row's stored data cells followed by the head's (the newer)
with :func:`tsd.codec.compact_row` (OpenTSDB's compaction, as the compactor applies it),
and write the compacted cells and delete the cells they replace in one atomic
``mutate``; then the head drops the points written. A fresh row (nothing stored) whose
points arrived in order is written as its runs joined (:func:`tsd.codec.join_compacted`,
what compact_row returns for them). A row that compaction refuses (two values at one time
with ``tsd.storage.fix_duplicates`` off) is written as its single cells, as OpenTSDB leaves
such a row, and counted.

tsd's own rollups (``tsd.rollups.compute``, docs/rollups.md): each chunk's rows, as
written (the merged row when a late point joined a stored one), give their rollup cells
(:class:`RollupHook`), stored before the head lets the rows go: a crash between the two
replays the rows from the log, and writing them out again recomputes the same cells.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from tsd.codec import KeyLayout, compact_row
from tsd.codec.const import FAMILY
from tsd.config import StorageConfig
from tsd.errors import CodecError, StorageError, StorageRefused
from tsd.head import Head, Taken
from tsd.head.head import ROW_OVERHEAD_BYTES
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.storage.base import Cell, CellBlock, Delete, Mutation, Put, Row, Storage
from tsd.tasks import cancel_and_wait
from tsd.wal import WriteAheadLog
from tsd.wal.record import CELLS, RowRun, decode_row_runs, encode_cells_and_runs
from tsd.write.rollup import replace_rollup_cells

log = get_logger(WRITER)

#: Rows per read-and-write round.
CHUNK_ROWS = 512


class RollupHook(Protocol):
    """Rollup cells of whole data rows, per table (tsd.query.rollup_compute.ComputedRollups,
    handed in by the daemon: write/ does not decode rows)."""

    def cells_of_block(
        self, block: CellBlock, *, fix_duplicates: bool, table: str | None = None
    ) -> Mapping[str, Sequence[tuple[bytes, bytes, bytes]]]: ...


async def write_rollups(
    storage: Storage, hook: RollupHook, block: CellBlock, *, fix_duplicates: bool
) -> int:
    """Compute and store the rollup cells of the data rows ``block``; the cells stored.
    Rows that cannot be decoded (OpenTSDB could not read them either) get no rollups
    (logged); a storage failure raises StorageError."""
    try:
        computed = hook.cells_of_block(block, fix_duplicates=fix_duplicates)
    except CodecError as exc:
        log.warning("rollup.not_computed", rows=len(block), error=str(exc))
        return 0
    stored = 0
    for table, cells in computed.items():
        await replace_rollup_cells(storage, table, cells)
        stored += len(cells)
    return stored


class HeadFlusher:
    """Writes rows of a head to a data table as compacted cells."""

    def __init__(
        self,
        head: Head,
        storage: Storage,
        table: str,
        registry: StatsRegistry,
        *,
        fix_duplicates: bool,
        rollups: RollupHook | None = None,
    ) -> None:
        self.head = head
        self.rollups = rollups
        self._rollup_cells = registry.counter("rollup.computed", type="cells")
        self._storage = storage
        self._table = table
        self._fix_duplicates = fix_duplicates
        self._rows = registry.counter("head.flushed", type="rows")
        self._points = registry.counter("head.flushed", type="points")
        self._merged = registry.counter("head.flushed", type="merged")
        self._refused = registry.counter("compaction.errors", type="duplicates")

    async def flush(self, keys: Sequence[bytes]) -> None:
        """Write the rows ``keys`` (sorted keys preferred). Raises StorageError when
        storage refuses a chunk: its rows stay in the head, the chunks before are out."""
        for start in range(0, len(keys), CHUNK_ROWS):
            taken = [t for k in keys[start : start + CHUNK_ROWS] if (t := self.head.take(k))]
            if taken:
                await self._flush_chunk(taken)

    async def _flush_chunk(self, taken: list[Taken]) -> None:
        stored = {
            row.key: row
            for row in await self._storage.get_many(self._table, [t.key for t in taken], (FAMILY,))
        }
        mutations: list[Mutation] = []
        written: list[Row] = []
        for item in taken:
            cell = self._plan(item, stored.get(item.key), mutations)
            if cell is not None:
                written.append(Row(item.key, (Cell(FAMILY, *cell),)))
        await self._storage.mutate(self._table, mutations)
        if self.rollups is not None and written:
            block = CellBlock.from_rows(written)
            self._rollup_cells.inc(
                await write_rollups(
                    self._storage, self.rollups, block, fix_duplicates=self._fix_duplicates
                )
            )
        for item in taken:
            self.head.release(item)
            self._points.inc(item.count)
        self._rows.inc(len(taken))

    def _plan(
        self, item: Taken, stored: Row | None, out: list[Mutation]
    ) -> tuple[bytes, bytes] | None:
        """Add the row's mutations to ``out``; the row's compacted cell as written (None
        when it is written as single cells, or not at all)."""
        stored_cells = [
            (c.qualifier, c.value)
            for c in (stored.cells if stored is not None else ())
            if c.family == FAMILY and len(c.qualifier) % 2 == 0
        ]
        old = stored_cells
        if old:
            # A single cell put again is replaced, as any cell put again (a compacted
            # cell's qualifier is longer than any single one).
            replaced = {q for q, _ in item.single_cells()}
            old = [cell for cell in old if cell[0] not in replaced]
            self._merged.inc()
        cells = item.cells
        if not old and len(cells) == 1:
            qualifier, value = cells[0]  # points in order: already compacted
        else:
            try:
                compacted = compact_row(old + cells, self._fix_duplicates, row_key=item.key)
            except CodecError as exc:
                self._refused.inc()
                log.warning("head.row_not_compacted", row=item.key.hex(), error=str(exc))
                out.extend(Put(item.key, FAMILY, q, v) for q, v in item.single_cells())
                return None
            if compacted is None:
                return None
            qualifier, value = compacted
        out.append(Put(item.key, FAMILY, qualifier, value))
        out.extend(Delete(item.key, FAMILY, q) for q, _ in stored_cells if q != qualifier)
        return qualifier, value


#: Closed rows written out per flush (a tick of about a second) at most; the rest wait for
#: the next ones. An hour of a million series closes at once, and writing a million rows
#: (tens of microseconds each) in one go held the writer thread, and the interpreter with
#: it, for most of a minute while points kept arriving (bench/cardinality). Rows past the
#: memory bound and the shutdown's are written without this limit.
CLOSED_ROWS_PER_FLUSH = 5_000


#: The most one cell's bytes cost the head (a 4-byte millisecond qualifier and an 8-byte
#: value, with their room to grow).
CELL_BYTES = 14
#: The writer's pending cells in front of the smallest head (a bound of a few KiB).
MIN_PENDING_CELLS = 64


class HeadSink:
    """The writer's side of the head: batches in (numbered), rows out on time through a
    :class:`HeadFlusher`, and the write-ahead log's records released once every row they
    fed is in storage.

    A batch's number orders it; the head knows the oldest batch each row still holds
    points of, so every batch older than :meth:`tsd.head.Head.oldest_batch` is wholly in
    storage and its log record may go (the segments replayed at start go once the head no
    longer holds the batches replayed from them)."""

    def __init__(
        self,
        flusher: HeadFlusher,
        registry: StatsRegistry,
        *,
        max_bytes: int,
        grace_s: float,
        wal: WriteAheadLog | None,
        wall_clock: Callable[[], float],
        tick_s: float = 1.0,
        closed_per_flush: int = CLOSED_ROWS_PER_FLUSH,
        longest_key: int = 64,
    ) -> None:
        """``longest_key``: the longest row key the head may get (``tsd.storage.max_tags``
        tags: :func:`build_head_sink`)."""
        self.head = head = flusher.head
        self._flusher = flusher
        self._max_bytes = max_bytes
        #: the most a row costs the head beside its points (a new row of the longest key)
        self._row_bytes = ROW_OVERHEAD_BYTES + longest_key
        self._grace_s = grace_s
        self._wal = wal
        self._clock = wall_clock
        self._tick_s = tick_s
        self._closed_per_flush = closed_per_flush
        self._next_batch = 0
        self._logged: deque[tuple[int, int]] = deque()  # (batch, log record), by batch
        self._recovered_until: int | None = None  # replayed batches are below this
        self._releases_seen = -1  # head.releases at the last look at the oldest batch
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._refusal: StorageRefused | None = None
        #: bytes :meth:`room` promised to batches not in the head yet
        self._reserved = 0
        # One write-out at a time (the tick, a tool's request, the close): two would take
        # the same points and release them twice.
        self._writing_out = asyncio.Lock()
        #: closed rows written since the heap's free pages were last given back
        registry.gauge("head.bytes", lambda: head.bytes)
        registry.gauge("head.rows", lambda: len(head))
        registry.gauge("head.points", lambda: head.points)

    @property
    def max_pending_cells(self) -> int:
        """The most cells the writer should hold (buffered and in flight) in front of
        this head: as new rows (the worst a cell costs the head) a quarter of its bound,
        so that a batch always fits once older rows are written out (:meth:`room`). The
        writer's own default (200,000) is below it from a bound of about 256 MiB (rows
        of 8 tags at most)."""
        return max(MIN_PENDING_CELLS, self._max_bytes // (4 * (self._row_bytes + CELL_BYTES)))

    # -- in -----------------------------------------------------------------------------------

    @staticmethod
    def encode(
        rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]] | dict[bytes, dict[bytes, bytes]],
    ) -> tuple[bytes, list[RowRun]]:
        """A writer batch's log record, and its rows as the head takes them."""
        return encode_cells_and_runs(rows)

    def add(self, runs: Sequence[RowRun], seq: int | None, logged: Sequence[int] = ()) -> None:
        """Add a writer batch's rows, logged as record ``seq`` (None: no log or no record
        of its own) and in the records ``logged`` (parts logged before the batch:
        :meth:`tsd.write.batch.Batch.add_logged`)."""
        number = self._add(runs)
        for earlier in logged:
            self._logged.append((number, earlier))
        if seq is not None:
            self._logged.append((number, seq))

    @property
    def refusal(self) -> StorageRefused | None:
        """Storage's refusal (full, read-only) of the head's rows while the head is past
        its bound: new batches are refused too, rather than held in memory."""
        if self._refusal is not None and self.head.bytes > self._max_bytes:
            return self._refusal
        return None

    async def room(self, runs: Sequence[RowRun], cells: int) -> int:
        """Return once the head has room for ``runs`` (a writer batch of ``cells`` cells at
        most) within ``tsd.storage.head.max_bytes``, writing its oldest rows out
        meanwhile; the bytes reserved for them, handed back with :meth:`unreserve` once the
        batch is added (or given up). The writer awaits this before each batch, so that
        past the bound new points wait for the write-out (and the protocols stop reading,
        the writer's pending bound) instead of growing the head.

        Why a reservation, and the batch's own size: new series come faster than rows are
        written out (a burst of a million: about 30,000 a second against about 12,000 rows
        written), and a batch of new series is large (up to the writer's pending cells,
        200,000 rows: about 60 MB). Waiting only while the head was past its bound let
        each batch land on a head just under it, and two batches in flight (one waiting
        for its log write) both did: head.bytes reached about 355 MB against 256 MiB. Now
        the head holds at most ``max_bytes`` (:meth:`tsd.head.Head.bytes_to_add` is an
        upper bound), unless one batch alone is larger than what can be written out
        (:attr:`max_pending_cells`, which sizes the writer's batches to the bound, keeps
        that from happening) or storage fails.

        Storage refusing the rows ends the wait (:attr:`refusal` then refuses the batch);
        another storage error too (logged; the tick tries again)."""
        head = self.head
        # the usual case, far from the bound: an upper bound without a pass over the runs
        needed = len(runs) * self._row_bytes + cells * CELL_BYTES
        if head.bytes + self._reserved + needed <= self._max_bytes:
            self._reserved += needed
            return needed
        while True:
            needed = head.bytes_to_add(runs)
            incoming = self._reserved + needed
            if head.bytes + incoming <= self._max_bytes:
                break
            try:
                if not await self.flush_due(incoming):
                    break  # nothing left to write out: the batch goes in all the same
            except StorageRefused:
                break
            except StorageError as exc:
                log.warning("head.flush_failed", error=str(exc))
                break
        self._reserved += needed
        return needed

    def unreserve(self, reserved: int) -> None:
        """Hand back what :meth:`room` reserved (the batch is in the head, or failed)."""
        self._reserved -= reserved

    def _add(self, runs: Sequence[RowRun]) -> int:
        number = self._next_batch
        self._next_batch += 1
        self.head.add_runs(runs, number, self._clock())
        if self.head.bytes > self._max_bytes:
            self._wake.set()
        return number

    async def replay(self, records: Iterable[tuple[int, bytes]]) -> int:
        """Add a segment's records (read at start) to the head; the cells added. Rows are
        written out meanwhile when the head passes its bound."""
        cells = 0
        for kind, payload in records:
            if kind != CELLS:
                continue
            runs = decode_row_runs(payload)
            cells_here = sum(run[1] for run in runs)
            cells += cells_here
            reserved = await self.room(runs, cells_here)
            try:
                self._add(runs)
            finally:
                self.unreserve(reserved)
        self._recovered_until = self._next_batch
        return cells

    # -- out ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._tick_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush_due()
            except StorageError as exc:
                log.warning("head.flush_failed", error=str(exc))
            except Exception:  # a bug must not end the flushing for the daemon's lifetime
                log.exception("head.flush_crashed")

    async def flush_due(self, incoming: int = 0) -> int:
        """Write the rows that are closed (at most ``closed_per_flush`` of them: the
        others at the next calls), and the oldest while the head, with ``incoming`` bytes
        more (batches about to go in), is over its bound, down to 3/4 of it; the rows
        written."""
        async with self._writing_out:
            return await self._flush_due(incoming)

    async def _flush_due(self, incoming: int) -> int:
        head = self.head
        keys = head.closed(self._clock(), self._grace_s, self._closed_per_flush)
        held = head.bytes + incoming
        if held > self._max_bytes:
            keys = sorted({*keys, *head.oldest(held - self._max_bytes * 3 // 4)})
        try:
            if keys:
                await self._flusher.flush(keys)
        except StorageRefused as exc:
            self._refusal = exc
            raise
        finally:
            self._release()
        self._refusal = None
        if keys and self._wal is not None:
            self._wal.cut()  # the records of the rows just written can go with their segment
        return len(keys)

    async def close(self, budget_s: float) -> None:
        """Stop the task, write every row. With a log, within ``budget_s``: what is left
        stays in the log for the next start. Without one the rows left would be lost
        (acknowledged points), so the close keeps writing past the budget, saying so; only
        storage refusing them leaves rows unwritten (logged as an error)."""
        await cancel_and_wait(self._task)
        self._task = None
        try:
            async with asyncio.timeout(budget_s):
                await self.flush_all()
            return
        except StorageError as exc:
            log.error("head.close_incomplete", rows=len(self.head), error=str(exc))
            return
        except TimeoutError:
            if self._wal is not None:
                log.error("head.close_incomplete", rows=len(self.head), error="budget spent")
                return
        log.warning("head.close_over_budget", rows=len(self.head), budget_s=budget_s)
        try:
            await self.flush_all()
        except StorageError as exc:
            log.error("head.close_incomplete", rows=len(self.head), error=str(exc))

    async def flush_all(self) -> int:
        """Write every row of the head, whatever its hour (a stop; a tool beside the
        daemon, :mod:`tsd.write.control`); the rows written. Points arriving meanwhile
        stay for the next write-out; a late point for a row written is merged into its
        stored cell then, as for any row."""
        async with self._writing_out:
            keys = self.head.all_keys()
            try:
                await self._flusher.flush(keys)
            finally:
                self._release()
            return len(keys)

    def _release(self) -> None:
        """Tell the log which records are wholly in storage."""
        wal = self._wal
        if wal is None:
            return
        head = self.head
        if head.releases == self._releases_seen and len(head):
            return  # no row left since the last look: the oldest batch held is the same
        self._releases_seen = head.releases
        oldest = head.oldest_batch()
        below = self._next_batch if oldest is None else oldest
        logged = self._logged
        while logged and logged[0][0] < below:
            wal.mark_stored(logged.popleft()[1])
        if self._recovered_until is not None and self._recovered_until <= below:
            self._recovered_until = None
            wal.drop_recovered()


def build_head_sink(
    storage: Storage,
    cfg: StorageConfig,
    registry: StatsRegistry,
    *,
    wal: WriteAheadLog | None,
    wall_clock: Callable[[], float],
    rollups: RollupHook | None = None,
) -> HeadSink:
    """A new head for ``cfg``'s data table, and the sink writing it out as configured
    (``tsd.storage.head.*``)."""
    layout = KeyLayout.from_storage_config(cfg)
    flusher = HeadFlusher(
        Head(layout),
        storage,
        cfg.data_table,
        registry,
        fix_duplicates=cfg.fix_duplicates,
        rollups=rollups,
    )
    return HeadSink(
        flusher,
        registry,
        max_bytes=cfg.head_max_bytes,
        grace_s=cfg.head_grace_s,
        wal=wal,
        wall_clock=wall_clock,
        longest_key=layout.tags_start + cfg.max_tags * (layout.tagk_width + layout.tagv_width),
    )
