"""The read of one scan plan: storage's rows and the head's, decoded as they come.

A sub-query's read (engine.py runs it) goes through :class:`RowReader`:

1. the head's rows of the plan are copied first (the embedded engine's in-memory rows), so
   a row written out meanwhile is found in one or both (identical points fold), never in
   neither;
2. for a read of rollups tsd computes itself, the rollup cells of the head's rows are
   computed as their write-out will store them (:meth:`RowReader._head_rollups`);
3. storage's rows come along the read path (read_path.py), block by block; each block is
   merged with the head's rows of the same keys, decoded in a worker thread while the next
   is read (data points, rollup cells or histogram cells: decode.py, rollup.py,
   histogram.py) and counted against ``tsd.query.limits.*`` (:class:`ScanTally`). A raw
   read reduced to buckets as decoded hands that reduction to storage as its
   :data:`~tsd.storage.base.BlockWork` (:func:`_bucket_work`): the embedded store does
   it in the reader thread that read the block, so a big scan's time slices are read and
   reduced side by side on every core without a hop to a compute thread per block; a
   block the head has points of is reduced again here, merged;
4. what only the head holds is decoded last: rollup rows only the head's rows fill so far,
   then the head's own rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from tsd.codec import KeyLayout, join_compacted
from tsd.codec.const import FAMILY, MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.codec.rollup import rollup_slot
from tsd.errors import BadRequestError
from tsd.head import Head, HeadRuns, HeadSnapshot
from tsd.query.compute import ComputeSlots, work_clock
from tsd.query.decode import RowPoints, base_times_s, decode_block, decode_buckets
from tsd.query.downsample import RowBuckets
from tsd.query.head_buckets import BucketMemo, HeadHours, without_hours
from tsd.query.head_rows import decode_head_parts, decode_head_runs
from tsd.query.histogram import decode_histogram_rows
from tsd.query.limits import BYTES_PER_POINT, QueryControl
from tsd.query.plan import ScanPlan
from tsd.query.read_path import KEY_BATCH_ROWS, ReadRequest, read_rows
from tsd.query.rollup import ReadSource, decode_rollup_rows
from tsd.query.rollup_compute import ComputedRollups
from tsd.storage.base import (
    Block,
    Cell,
    CellBlock,
    PointBlock,
    ReadStats,
    Row,
    RowFilter,
    ScanSpec,
    Storage,
)

__all__ = ["Part", "RowReader", "ScanTally", "with_head"]

#: OpenTSDB's QueryException texts for tsd.query.limits.* (HTTP 413).
TOO_MANY_POINTS = (
    "Sorry, you have attempted to fetch more than our limit of {limit} data points. "
    "Please try filtering using more tags or decrease your time range."
)
TOO_MANY_BYTES = (
    "Sorry, you have attempted to fetch more than our maximum amount of {mb}MB from "
    "storage. Please try filtering using more tags or decrease your time range."
)

#: At most this many head rows of a rollup read: looked up in storage one by one; more:
#: a key-only scan of the hours they span (:meth:`RowReader._stored_keys`)
STORED_LOOKUPS = 4096

#: Rows read and their points, decoded.
Part = tuple[list[bytes], RowPoints]


@dataclass(slots=True)
class ScanTally:
    """Points and bytes read so far by one sub-query, checked against the limits."""

    max_points: int
    max_bytes: int
    control: QueryControl
    points: int = 0
    stored_bytes: int = 0
    rows: int = 0

    def add(self, part: RowPoints, rows: int) -> None:
        self.control.check()
        # charged by the points decoded, also when rows were reduced to their buckets:
        # the limits answer as for the points (an over-estimate of what is then held)
        self.control.charge(part.decoded_points * BYTES_PER_POINT)
        self.points += part.decoded_points
        self.stored_bytes += part.stored_bytes
        self.rows += rows
        if self.max_points > 0 and self.points > self.max_points:
            raise BadRequestError(TOO_MANY_POINTS.format(limit=self.max_points), status=413)
        if self.max_bytes > 0 and self.stored_bytes > self.max_bytes:
            mb = self.max_bytes // 1024 // 1024
            raise BadRequestError(TOO_MANY_BYTES.format(mb=mb), status=413)


class RowReader:
    """Reads a scan plan's rows from storage and the head, decoded (see the module)."""

    def __init__(
        self,
        storage: Storage,
        head: Head | None,
        layout: KeyLayout,
        table: str,
        fix_duplicates: bool,
        compute: ComputeSlots,
    ) -> None:
        self._storage = storage
        self._head = head
        self._layout = layout
        self._table = table
        self._fix_duplicates = fix_duplicates
        self._compute = compute
        #: the rollups tsd computes itself (tsd.rollups.compute; set by the daemon)
        self.computed: ComputedRollups | None = None
        #: the head rows' buckets of rollup reads, kept until a row changes
        self._memo = BucketMemo(layout)

    async def read(
        self,
        plan: ScanPlan,
        path: str,
        request: ReadRequest,
        tally: ScanTally,
        stats: ReadStats,
        source: ReadSource | None = None,
        buckets: RowBuckets | None = None,
        every_row: bool = False,
    ) -> list[Part]:
        """The plan's rows along ``path`` (read_path.py), each block decoded in a worker
        thread while the next is read, counted against the limits. ``source``: the table
        and cells to read (default: the data table's); ``buckets``: each row reduced to
        its buckets as decoded (of a rollup read: the head's rows, head_buckets.py);
        ``every_row``: the parts name every row read (a delete drops them), never
        several rows as one."""
        head = self._head_snapshot(plan, source, request)
        table = self._table if source is None else source.table
        rollup = source if source is not None and source.is_rollup else None
        # tsd's own rollups of the head's rows (not written out yet), as the write-out will
        # store them: merged into the stored rollup rows, replacing their cells.
        fresh: dict[bytes, dict[bytes, bytes]] = {}
        hours: HeadHours | None = None
        from_head: list[Part] = []
        if rollup is not None and self.own_rollups(rollup):
            if buckets is not None:  # the head's rows: to the rollups' buckets
                hours, from_head = await self._head_buckets(plan, rollup, buckets, tally, every_row)
            else:
                fresh = await self._head_rollups(plan, rollup)
        one = _OneRead(
            self._compute,
            self._layout,
            self._fix_duplicates,
            source,
            buckets,
            head,
            fresh,
            hours,
            tally,
            stats,
        )
        held = head is not None and len(head) > 0  # else storage is read in any case
        work = None
        if buckets is not None and rollup is None and (source is None or source.histograms is None):
            # raw rows to their buckets where storage reads them (its reader threads)
            work = functools.partial(
                _bucket_work, layout=self._layout, fix=self._fix_duplicates, buckets=buckets
            )
        await read_rows(
            self._storage,
            table,
            self._layout,
            plan,
            path,
            request,
            one.decode,
            stats,
            held,
            work,
        )
        await one.finish()
        return one.parts + from_head

    def _head_snapshot(
        self, plan: ScanPlan, source: ReadSource | None, request: ReadRequest
    ) -> HeadSnapshot | None:
        """The head's rows of the plan, copied before storage is read: a row written out
        meanwhile is then found in one or both (identical points fold), never in neither."""
        raw = source is None or (
            source.table == self._table and not source.is_rollup and source.histograms is None
        )
        if self._head is not None and raw:  # the head holds data points only
            return self._head.snapshot(_with_pins(plan.scans, request))
        return None

    async def _head_buckets(
        self,
        plan: ScanPlan,
        read: ReadSource,
        buckets: RowBuckets,
        tally: ScanTally,
        every_row: bool,
    ) -> tuple[HeadHours | None, list[Part]]:
        """The head's rows of ``plan`` (each merged with its stored row) reduced to the
        buckets of ``read``'s rollup points (head_buckets.py), and their row-hours
        (:class:`HeadHours`); a row whose bucket is remembered (:class:`BucketMemo`) is
        handed over from there, several rows of a series as one unless ``every_row``.
        Raises RowsOutOfHour as decode_buckets does."""
        assert self._head is not None
        assert read.interval is not None
        snapshot = self._head.snapshot(plan.scans)
        if not len(snapshot):
            return None, []
        keys = snapshot.keys()
        hours = HeadHours(self._layout, keys, read.interval)
        also_stored = await self._stored_keys(plan, keys)
        stored = await self._storage.get_many(self._table, also_stored, (FAMILY,))
        # nothing stored of these rows (the usual case): no merge to look up
        merged = snapshot.merge_into(CellBlock.from_rows(stored)) if stored else CellBlock.empty()
        # the rows whose bucket is remembered at their version: not decoded again
        recalled = self._memo.recall(snapshot, buckets, by_series=not every_row)
        runs, rest = snapshot.remaining()
        parts: list[Part] = []
        for block in (merged, rest):
            if len(block):
                points, _ = await self._compute.sized(
                    len(block.values) // 4,
                    _timed_decode,
                    block,
                    self._layout,
                    self._fix_duplicates,
                    buckets,
                )
                parts.append((block.keys, points))
        if runs.keys:
            points = await self._compute.sized(
                runs.points, _decode_head, runs, self._layout, buckets
            )
            self._memo.remember(runs, buckets, points)
            parts.append((runs.keys, points))
        # counted as the rollup points they stand for, as their rollup cells were
        parts = [(k, dataclasses.replace(p, row_points=None)) for k, p in parts]
        if recalled is not None:
            keys, points, rows = recalled
            tally.add(points, rows)
            parts.append((keys, points))
        for k, p in parts:
            tally.add(p, len(k))
        return hours, parts

    async def _stored_keys(self, plan: ScanPlan, keys: list[bytes]) -> list[bytes]:
        """Those of the head's row ``keys`` that storage may hold too: all of them when
        they are few; else the keys a key-only scan of ``plan`` over the hours the head
        holds finds among them (30 days in the head are 72,000 rows: a lookup each cost
        more than reducing their points, while the stored rows of those hours, when any,
        are read in key order)."""
        if len(keys) <= STORED_LOOKUPS:
            return keys
        bases = base_times_s(self._layout, keys)
        first, last = int(bases.min()), int(bases.max()) + MAX_TIMESPAN
        specs = []
        for spec in plan.scans:
            prefix = spec.start[:-TIMESTAMP_BYTES]
            start = max(spec.start, prefix + first.to_bytes(TIMESTAMP_BYTES, "big"))
            stop = prefix + last.to_bytes(TIMESTAMP_BYTES, "big")
            stop = min(stop, spec.stop) if spec.stop else stop
            if start < stop:
                specs.append(
                    dataclasses.replace(
                        spec, start=start, stop=stop, row_filter=None, batch_rows=KEY_BATCH_ROWS
                    )
                )
        wanted: set[bytes] | None = None  # built once a scan finds a key (rarely, fresh)
        found: list[bytes] = []
        for spec in specs:
            async with contextlib.aclosing(self._storage.scan_keys(self._table, spec)) as batches:
                async for batch in batches:
                    if batch:
                        wanted = set(keys) if wanted is None else wanted
                        found.extend(k for k in batch if k in wanted)
        return found

    def own_rollups(self, read: ReadSource) -> bool:
        """Whether ``read`` reads rollups tsd computes while the head holds rows."""
        computed = self.computed
        return (
            self._head is not None
            and computed is not None
            and read.interval is not None
            and computed.computes(read.interval)
            and read.table == read.interval.table
        )

    async def _head_rollups(
        self, plan: ScanPlan, read: ReadSource
    ) -> dict[bytes, dict[bytes, bytes]]:
        """The rollup cells of ``read``'s table that the head's rows of ``plan`` give, by
        rollup row key then qualifier: each head row merged with its stored row first (a
        late point's row-hour is recomputed whole, as its write-out will do)."""
        assert self._head is not None
        assert self.computed is not None
        snapshot = self._head.snapshot(plan.scans)
        if not len(snapshot):
            return {}
        keys = snapshot.keys()
        stored = await self._storage.get_many(self._table, keys, (FAMILY,))
        rows = with_head(stored, snapshot)
        computed = self.computed
        cells = await self._compute.sized(
            sum(len(c.value) for r in rows for c in r.cells) // 4,
            computed.cells_of_block,
            CellBlock.from_rows(rows),
            fix_duplicates=self._fix_duplicates,
            table=read.table,
        )
        out: dict[bytes, dict[bytes, bytes]] = {}
        for key, qualifier, value in cells.get(read.table, ()):
            out.setdefault(key, {})[qualifier] = value
        return out


@dataclass(slots=True)
class _OneRead:
    """One read's state: what it merges in, what it decoded so far."""

    compute: ComputeSlots
    layout: KeyLayout
    fix_duplicates: bool
    source: ReadSource | None
    buckets: RowBuckets | None
    head: HeadSnapshot | None
    #: rollup cells computed from the head's rows, by row key (popped as merged)
    fresh: dict[bytes, dict[bytes, bytes]]
    #: the row-hours the head's rows give the rollup points of (None: no head rows)
    hours: HeadHours | None
    tally: ScanTally
    stats: ReadStats
    parts: list[Part] = field(default_factory=list)

    async def decode(self, block: Block) -> None:
        """One block of rows: merged with the head's, decoded, counted. A block storage
        reduced to its buckets already (:func:`_bucket_work`) is taken as it is, unless
        the head had points of its rows (then it is decoded again, merged)."""
        stored = block
        block = self._merged(block)
        # decoded points need only their times: a pass over every point (a fraction of
        # a cell block's work per point, but not per row: rows hold hundreds of points)
        work = len(block.values) // 4 if isinstance(block, CellBlock) else len(block.values)
        source = self.source
        done = cast("tuple[RowPoints, float] | None", stored.prepared)
        if done is not None and block is stored:
            keys = block.keys
            points, spent = done
        elif source is not None and source.histograms is not None:
            keys, points, spent = self._histograms(block, source)
        elif source is not None and source.is_rollup:
            keys, points, spent = await self._rollups(block, source, work)
        else:
            keys = block.keys
            points, spent = await self.compute.sized(
                work,
                _timed_decode,
                block,
                self.layout,
                self.fix_duplicates,
                self.buckets,
            )
        self.stats.decode_s += spent
        self.tally.add(points, len(keys))
        self.parts.append((keys, points))

    def _merged(self, block: Block) -> Block:
        """The block with the head's points of its rows, as cells where cells are read."""
        head = self.head
        if head is not None and head.shares(block.keys):
            # a stored row the head has points for too: read as one row
            if isinstance(block, PointBlock):
                block = block.cells()
            block = head.merge_into(block)
        source = self.source
        cells_only = source is not None and (source.is_rollup or source.histograms is not None)
        if cells_only and isinstance(block, PointBlock):
            # rollup and histogram cells: not data points. (A raw read's source is
            # ReadSource(data table): its PointBlocks are decoded as they are.)
            block = block.cells()
        return block

    def _histograms(self, block: Block, source: ReadSource) -> tuple[list[bytes], RowPoints, float]:
        assert isinstance(block, CellBlock)
        clock = work_clock()
        started = clock()
        histograms = None if source.is_rollup else source.histograms
        points = decode_histogram_rows(block, self.layout, histograms)
        return block.keys, points, clock() - started

    async def _rollups(
        self, block: Block, source: ReadSource, work: int
    ) -> tuple[list[bytes], RowPoints, float]:
        assert isinstance(block, CellBlock)
        fresh = self.fresh
        if fresh and not fresh.keys().isdisjoint(block.keys):
            block = _with_fresh_rollups(block, fresh)
        hours = self.hours
        if hours:
            assert source.interval is not None
            block = without_hours(block, hours, self.layout, source.interval)
        # the rows with a cell of the columns read (OpenTSDB's scan filters cells)
        return await self.compute.sized(work, _timed_rollup_decode, block, self.layout, source)

    async def finish(self) -> None:
        """What only the head holds: rollup rows only its rows fill so far, then its rows."""
        fresh = self.fresh
        if fresh:
            keys = sorted(fresh)
            await self.decode(
                CellBlock.from_rows(
                    [
                        Row(k, tuple(Cell(FAMILY, q, v) for q, v in sorted(fresh[k].items())))
                        for k in keys
                    ]
                )
            )
        head = self.head
        if head is not None and len(head):
            # (rows whose points came out of order read as runs where they can be: not
            # in a rollup read's memo, which remembers clean rows only)
            runs, rest = head.remaining(resort=True)
            if len(rest):
                await self.decode(rest)
            if runs.keys:
                # work in points, as the other steps count it: a day of one series (8,640
                # points, 69 KB of values) is decoded in one compiled pass on the loop, not
                # after a worker-thread hop; a big read in parts on every core
                # (decode_head_parts)
                parts = await self.compute.sized(
                    runs.points, decode_head_parts, runs, self.layout, self.buckets
                )
                for keys, points in parts:
                    self.tally.add(points, len(keys))
                    self.parts.append((keys, points))


def _with_pins(scans: Sequence[ScanSpec], request: ReadRequest) -> list[ScanSpec]:
    """The scans with the pinned tag pairs in their row filters (RowFilter.contains: the
    head checks them over all its keys at once before the regexp)."""
    if not request.pinned_pairs:
        return list(scans)
    return [
        dataclasses.replace(s, row_filter=RowFilter(s.row_filter.regex, request.pinned_pairs))
        if s.row_filter is not None
        else s
        for s in scans
    ]


def with_head(rows: Sequence[Row], head: HeadSnapshot | None) -> list[Row]:
    """Stored rows and the head's rows of the same read, as rows (the head's points after
    the stored ones of a row both hold)."""
    if head is None or not len(head):
        return list(rows)
    merged = head.merge_into(CellBlock.from_rows(rows))
    runs, rest = head.remaining()
    fresh = CellBlock.from_rows(
        [Row(key, (Cell(FAMILY, q, v),)) for key, q, v in _compacted_runs(runs)]
    )
    return [*merged, *rest, *fresh]


def _with_fresh_rollups(block: CellBlock, fresh: dict[bytes, dict[bytes, bytes]]) -> CellBlock:
    """Stored rollup rows with the cells computed from the head's rows (popped from
    ``fresh``) in place of theirs."""
    rows = []
    for row in block:
        cells = fresh.pop(row.key, None)
        if cells is None:
            rows.append(row)
            continue
        slots = {rollup_slot(q) for q in cells}
        kept = [c for c in row.cells if rollup_slot(c.qualifier) not in slots]
        rows.append(Row(row.key, (*kept, *(Cell(FAMILY, q, v) for q, v in cells.items()))))
    return CellBlock.from_rows(rows, block.wire_bytes)


def _compacted_runs(runs: HeadRuns) -> list[tuple[bytes, bytes, bytes]]:
    """Clean head rows as (key, compacted qualifier, compacted value)."""
    out = []
    q_at = v_at = 0
    lengths = np.frombuffer(runs.qualifiers[1::2], np.uint8) & 0x7
    v_ends = np.cumsum(lengths.astype(np.int64) + 1).tolist()
    for key, count in zip(runs.keys, runs.counts.tolist(), strict=True):
        q_end = q_at + 2 * count
        v_end = v_ends[q_end // 2 - 1]
        qualifier, value = join_compacted(
            runs.qualifiers[q_at:q_end], runs.values[v_at:v_end], count, False, True
        )
        out.append((key, qualifier, value))
        q_at, v_at = q_end, v_end
    return out


def _timed_rollup_decode(
    block: CellBlock, layout: KeyLayout, source: ReadSource
) -> tuple[list[bytes], RowPoints, float]:
    clock = work_clock()
    started = clock()
    keys, points = decode_rollup_rows(block, layout, source)
    return keys, points, clock() - started


def _decode_head(runs: HeadRuns, layout: KeyLayout, buckets: RowBuckets | None) -> RowPoints:
    """The head's rows decoded (each reduced to its buckets with ``buckets``)."""
    return decode_head_runs(runs, layout, buckets)


def _bucket_work(
    block: Block, *, layout: KeyLayout, fix: bool, buckets: RowBuckets
) -> tuple[RowPoints, float] | None:
    """A raw read's :data:`~tsd.storage.base.BlockWork`: the block reduced to its buckets
    (:func:`_timed_decode`) in the storage's reader thread. None when that fails
    (RowsOutOfHour, a cell that does not decode): :meth:`_OneRead.decode` then decodes
    the block itself and meets the error where a read without the work meets it."""
    try:
        return _timed_decode(block, layout, fix, buckets)
    except Exception:  # noqa: BLE001 - decided again, and raised, on the event loop
        return None


def _timed_decode(
    block: Block, layout: KeyLayout, fix_duplicates: bool, buckets: RowBuckets | None
) -> tuple[RowPoints, float]:
    """decode_block (decode_buckets with ``buckets``) and the CPU time it took (in the
    thread that runs it: :func:`work_clock`)."""
    clock = work_clock()
    started = clock()
    if buckets is None:
        points = decode_block(block, layout, fix_duplicates=fix_duplicates)
    else:
        points = decode_buckets(block, layout, buckets, fix_duplicates=fix_duplicates)
    return points, clock() - started
