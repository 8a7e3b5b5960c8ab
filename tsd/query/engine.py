"""QueryEngine: /api/query and /api/query/last over the storage. The async edge of query/.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.1; OpenTSDB 2.4.1
src/tsd/QueryRpc.java, src/core/TsdbQuery.java, SaltScanner.java, SpanGroup.java): per
sub-query, in OpenTSDB's order,

1. resolve the metric, the filters' tag keys and literal tag values (plan.py says which);
2. scan every salt bucket concurrently; rows are decoded batch by batch in a worker thread
   while the next batch is read (decode.py), counting points and bytes against
   ``tsd.query.limits.*`` (413 past them);
3. assemble the rows into series, resolve their tag names, apply the filters;
4. group (``none``: one group per series), and per group downsample -> rate -> aggregate
   with interpolation over the scan window, then trim to [start, end] (the kernels);
5. build the result series (metric, tags, aggregateTags, tsuids, annotations).

Everything numeric runs in worker threads, at most ``compute_slots`` at a time (one less
than the CPUs by default), in chunks, so one big query neither blocks the event loop
(ingest keeps flowing) nor takes every core. Each query has a
:class:`~tsd.query.limits.QueryControl`: its limits are checked at planning time and
before each phase allocates (limits.py), and its cancel flag, set when the client goes
away (the handler task is cancelled), at ``tsd.query.timeout`` (ms; dead in OpenTSDB
2.4.1, 60 s by default in tsd) or when the daemon stops (:meth:`QueryEngine.cancel_all`),
stops the worker threads at their next chunk.

tsd deviations: the data point limit counts decoded points (OpenTSDB counts cells, so a
compacted row of 360 points counted as one); /api/query/last needs no meta table (see
last.py); rows are never written back compacted by a query (OpenTSDB's read-triggered
compaction, a source of hourly write bursts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from tsd.codec import KeyLayout, encode_tags, join_compacted, salt_bucket
from tsd.codec.const import FAMILY, MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.codec.rollup import rollup_slot
from tsd.codec.rowkey import salt_bytes
from tsd.config import Config
from tsd.errors import BadRequestError, NoSuchUniqueName, TsdError
from tsd.head import Head, HeadRuns, HeadSnapshot
from tsd.query.decode import (
    RowPoints,
    decode_block,
    decode_buckets,
    decode_rows,
    series_key,
)
from tsd.query.downsample import RowBuckets, RowsOutOfHour, row_buckets
from tsd.query.filters import SeriesFilter
from tsd.query.group import group_series, group_tags
from tsd.query.head_buckets import head_hours, rollup_buckets, without_hours
from tsd.query.head_rows import decode_head_runs
from tsd.query.histogram import decode_histogram_rows, histogram_series
from tsd.query.last import LastPointQuery, LastPointSubQuery, format_last_value
from tsd.query.limits import (
    BYTES_PER_CELL,
    BYTES_PER_OUTPUT_POINT,
    BYTES_PER_POINT,
    BYTES_PER_SERIES,
    MemoryPool,
    QueryCancelled,
    QueryControl,
    QueryLimits,
    buckets_per_series,
    fills,
)
from tsd.query.output import LastPoint, QueryResult, SeriesResult
from tsd.query.plan import (
    SCAN_BATCH_ROWS,
    ResolvedFilter,
    ScanPlan,
    TagCondition,
    group_key,
    literal_names,
    parse_tsuids,
    plan_metric_scan,
    plan_tsuid_scan,
    row_key_regex,
    scan_window_s,
    tag_conditions,
)
from tsd.query.read_path import (
    ReadRequest,
    choose_path,
    read_rows,
    read_stats_json,
    request_for_filters,
    request_for_tsuids,
    sum_reads,
)
from tsd.query.results import (
    SeriesFacts,
    aggregate_groups,
    group_annotations,
    has_data,
    in_range,
    parse_note,
    series_facts,
    series_tag_uids,
)
from tsd.query.rollup import (
    RollupConfigLike,
    RollupRead,
    decode_rollup_rows,
    plan_reads,
)
from tsd.query.rollup_compute import ComputedRollups
from tsd.query.series import AggregatedSeries, BoolArray
from tsd.query.spans import Spans, assemble_spans
from tsd.query.tasks import all_or_none as _all_or_none
from tsd.query_model import SubQuery, TSQuery
from tsd.storage.base import (
    Block,
    Cell,
    CellBlock,
    Delete,
    PointBlock,
    ReadStats,
    Row,
    RowFilter,
    ScanSpec,
    Storage,
)
from tsd.uid.service import UidService

__all__ = ["QueryEngine"]

T = TypeVar("T")

#: OpenTSDB's QueryException texts for tsd.query.limits.* (HTTP 413).
TOO_MANY_POINTS = (
    "Sorry, you have attempted to fetch more than our limit of {limit} data points. "
    "Please try filtering using more tags or decrease your time range."
)
TOO_MANY_BYTES = (
    "Sorry, you have attempted to fetch more than our maximum amount of {mb}MB from "
    "storage. Please try filtering using more tags or decrease your time range."
)
#: Rows deleted per storage call when a query deletes what it read.
DELETE_BATCH_ROWS = 1024
#: Series aggregated per worker-thread call (between two cancel checks and slot turns).
AGGREGATE_CHUNK_SERIES = 8192
#: Result groups (or names) handled on the event loop before it is given back.
RESULTS_CHUNK = 256
#: Work up to this many points (or series, or bytes/4 of cell values) runs on the event loop:
#: a worker-thread hop costs a thread wake-up and two GIL hand-overs, milliseconds on a busy
#: machine, against well under a millisecond of numpy work at this size.
INLINE_WORK = 10_000


@dataclass(slots=True)
class QueryStats:
    """What the engine counts (``query.*`` in /api/stats)."""

    started: int = 0
    refused: int = 0
    cancelled: int = 0
    timed_out: int = 0
    scans: int = 0


@dataclass(slots=True)
class _ScanTally:
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


@dataclass(slots=True)
class _Found:
    """What a sub-query found: its spans, their facts, groups and aggregated series."""

    spans: Spans
    facts: SeriesFacts
    groups: list[list[int]]
    aggregated: list[AggregatedSeries]
    filter_tagks: tuple[bytes, ...]


class QueryEngine:
    """Runs /api/query and /api/query/last against one data table."""

    def __init__(
        self,
        storage: Storage,
        uids: UidService,
        config: Config,
        *,
        compute_slots: int | None = None,
        wall_clock: Callable[[], float] = time.time,
        head: Head | None = None,
    ) -> None:
        """``head``: the embedded engine's in-memory rows, read beside storage."""
        self._storage = storage
        self._head = head
        self._uids = uids
        self._layout = KeyLayout.from_storage_config(config.storage)
        self._table = config.storage.data_table
        self._fix_duplicates = config.storage.fix_duplicates
        #: ``tsd.rollups.config`` when rollups are enabled (set by the daemon)
        self.rollups: RollupConfigLike | None = None
        #: the rollups tsd computes itself (tsd.rollups.compute; set by the daemon)
        self.computed: ComputedRollups | None = None
        self._cfg = cfg = config.query
        if compute_slots is None:
            compute_slots = cfg.compute_slots or (os.cpu_count() or 2) - 1
        self.compute_slots = max(1, compute_slots)
        self._compute = asyncio.Semaphore(self.compute_slots)
        #: filtering by regexps has its own threads, as many: a regexp that backtracks for
        #: its whole budget holds one of them, not a compute slot that every other query
        #: needs (the regex package releases the GIL meanwhile); wildcards (``host=*``, a
        #: dashboard's group-by) cannot backtrack and keep to the compute slots
        self._regexps = asyncio.Semaphore(self.compute_slots)
        self._busy = 0
        self._wall_clock = wall_clock
        self._limits = QueryLimits(
            buckets=cfg.limits_buckets,
            output_points=cfg.limits_output_points,
            memory_bytes=cfg.limits_memory_bytes,
        )
        self.memory = MemoryPool(cfg.memory_budget_bytes)
        self.stats = QueryStats()
        #: running queries: their control and task (cancel_all stops them)
        self._running: dict[QueryControl, asyncio.Task[Any]] = {}
        self._closing = ""

    # -- /api/query ---------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Queries in progress."""
        return len(self._running)

    @property
    def busy_slots(self) -> int:
        """Worker threads computing for queries now (at most ``compute_slots``)."""
        return self._busy

    def cancel_all(self, reason: str = "the TSD is shutting down") -> None:
        """Stop every running query at its next chunk (daemon shutdown): it answers 503,
        and so does every query started later."""
        self._closing = reason
        for control, task in list(self._running.items()):
            control.cancel(reason)
            task.cancel()

    async def execute(self, query: TSQuery) -> QueryResult:
        """Run every sub-query (a few at once; results in sub-query order)."""
        started = time.perf_counter()
        if self._closing:
            raise QueryCancelled(f"The query was cancelled ({self._closing})")
        cfg = self._cfg
        control = QueryControl(
            self._limits,
            self.memory,
            timeout_ms=cfg.timeout_ms,
            regexp_budget_s=cfg.regexp_budget_ms / 1000,
        )
        task = asyncio.current_task()
        assert task is not None
        self._running[control] = task
        self.stats.started += 1
        reads: list[ReadStats] = []
        try:
            async with self._timeout(control):
                global_notes: list[dict[str, Any]] = []
                if query.global_annotations and not query.no_annotations:
                    global_notes = await self._global_annotations(query)
                # A few sub-queries at a time: a thousand of them scanning at once would
                # each hold a batch of rows waiting for a compute slot, uncounted.
                gate = asyncio.Semaphore(self.compute_slots + 1)

                async def gated(sub: SubQuery) -> list[SeriesResult]:
                    async with gate:
                        control.check()
                        return await self._run_sub(query, sub, control, reads)

                per_sub = await _all_or_none([gated(sub) for sub in query.queries])
        except asyncio.CancelledError:
            if control.reason and task.uncancel() == 0:
                # cancel_all, not the client: answer instead of vanishing.
                self.stats.cancelled += 1
                raise control.cancel_error() from None
            control.cancel("the client went away")
            self.stats.cancelled += 1
            raise
        except QueryCancelled:
            self.stats.cancelled += 1
            raise
        except TsdError as exc:
            if exc.status == 408:
                self.stats.timed_out += 1
            elif exc.status in (413, 503):
                self.stats.refused += 1
            raise
        finally:
            control.release()
            del self._running[control]
        series = [s for results in per_sub for s in results]
        summary = None
        if query.show_summary:
            summary = {
                "processingPreWriteTime": (time.perf_counter() - started) * 1000,
                "queryIdx_count": len(query.queries),
                "emittedDPs": sum(len(s.dps) for s in series),
                **read_stats_json(sum_reads(reads)),
            }
        return QueryResult(query, series, global_notes, summary)

    async def compute(
        self, fn: Callable[..., T], *args: Any, work: int | None = None, **kwargs: Any
    ) -> T:
        """Run ``fn`` in a worker thread within the engine's compute slots (the server
        renders a big answer, millions of values to format, this way); on the event loop
        when ``work`` (points it handles) is known and small."""
        return await self._compute_sized(work, fn, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def _timeout(self, control: QueryControl | None = None) -> Any:
        timeout_ms = self._cfg.timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000 if timeout_ms > 0 else None):
                yield
        except TimeoutError:
            if control is not None:
                control.cancel("timeout")  # worker threads stop at their next chunk
            raise BadRequestError(
                f"Query timed out after {timeout_ms} ms (tsd.query.timeout)", status=408
            ) from None

    async def _run_sub(
        self,
        query: TSQuery,
        sub: SubQuery,
        control: QueryControl,
        reads: list[ReadStats] | None = None,
    ) -> list[SeriesResult]:
        """The sub-query over its reads (tsd/query/rollup.py): raw data, or stored rollups
        with their fallbacks, the next tried while one finds no series."""
        plan = plan_reads(self.rollups, sub, self._table, self.computed)
        for source in plan[:-1]:
            found = await self._run_read(query, sub, control, reads, source)
            if found is not None:
                return found
        return await self._run_read(query, sub, control, reads, plan[-1]) or []

    async def _run_read(
        self,
        query: TSQuery,
        sub: SubQuery,
        control: QueryControl,
        reads: list[ReadStats] | None,
        source: RollupRead,
    ) -> list[SeriesResult] | None:
        """One read of the sub-query; None when it found no series."""
        timings: dict[str, Any] = {}
        t0 = time.perf_counter()
        spec = sub.downsample_spec
        if source.is_rollup:
            assert spec is not None
            start_s, end_s = source.scan_window_s(query.start_ms, query.end_ms, sub.rate)
            sub = dataclasses.replace(
                sub, downsample_spec=source.engine_spec(spec), rollup_table=source.name
            )
        else:
            start_s, end_s = scan_window_s(query.start_ms, query.end_ms, spec)
        # Planning time: one series' worth of buckets over the limit is refused unread.
        per_series = buckets_per_series(spec, start_s * 1000, end_s * 1000)
        filled = fills(spec)
        control.check_buckets(per_series, 1, filled)
        filter_tagks: tuple[bytes, ...] = ()
        if sub.tsuids:
            plan = plan_tsuid_scan(self._layout, sub, start_s=start_s, end_s=end_s)
            request = request_for_tsuids(self._layout, parse_tsuids(self._layout, sub.tsuids))
        else:
            plan, filter_tagks, request = await self._plan_metric(sub, start_s, end_s)
        timings["stringToUidTime"] = (time.perf_counter() - t0) * 1000
        if plan.is_empty:
            return None
        t1 = time.perf_counter()
        # Raw data reduced to buckets row by row as decoded, when the spec allows
        # (tsd/query/downsample.py): the series then never hold their points.
        buckets = None
        if not source.is_rollup and source.histograms is None:
            buckets = row_buckets(spec, start_s * 1000)
        elif self._own_rollups(source):  # the head's rows: to the rollups' buckets
            buckets = rollup_buckets(source, start_s * 1000)
        self.stats.scans += 1
        while True:
            tally = _ScanTally(
                self._cfg.limits_data_points_default, self._cfg.limits_bytes_default, control
            )
            read = ReadStats()
            path = read.path = choose_path(plan, request)
            try:
                parts = await self._read(plan, path, request, tally, read, source, buckets)
            except RowsOutOfHour:
                buckets = None  # read again, points kept (the first read's charge stays)
                continue
            break
        if reads is not None:
            reads.append(read)
        spans = await self._compute_sized(
            sum(points.point_count for _, points in parts), assemble_spans, parts, self._layout
        )
        work = spans.batch.point_count + spans.series_count
        control.check_buckets(per_series, spans.series_count, filled)
        control.charge(spans.series_count * BYTES_PER_SERIES)
        timings["queryScanTime"] = (time.perf_counter() - t1) * 1000
        timings["rowsPreFilter"] = tally.rows
        timings["dpsPreFilter"] = tally.points
        timings.update(read_stats_json(read))
        if not spans.series_count:
            return None
        facts = await self._series_facts(spans, work)
        # Filters and grouping run per series; a regexp (or wildcard) can take long on one
        # value whatever the size (tsd.query.filter.regexp_budget): always off the loop.
        patterned = any("regexp" in f.type or "wildcard" in f.type for f in sub.filters)
        if any(f.type == "regexp" for f in sub.filters):
            keep, groups = await self._compute_off_loop(
                self._filter_and_group, sub, plan, facts, control, slots=self._regexps
            )
        else:
            keep, groups = await self._compute_sized(
                None if patterned else work, self._filter_and_group, sub, plan, facts, control
            )
        kept_points = int(spans.point_lengths[keep].sum())
        kept_series = int(keep.sum())
        in_range_points = 0
        if not per_series:  # raw points: the answer holds those within [start, end]
            in_range_points = await self._compute_sized(
                work, _points_in_range, spans.batch, keep, query.start_ms, query.end_ms
            )
        # Before any kernel allocates: the buckets, the answer's size and their memory.
        control.check_buckets(per_series, kept_series, filled)
        if filled:
            output = len(groups) * per_series
        elif per_series:
            output = min(len(groups) * per_series, kept_points)
        else:
            output = in_range_points
        control.check_output(output)
        cells = kept_series * per_series if filled else 0
        control.charge(cells * BYTES_PER_CELL + output * BYTES_PER_OUTPUT_POINT)
        if query.delete:
            await self._delete_rows(parts, spans, keep)
        if source.histograms is not None:
            return await self._histogram_results(sub, query, spans, facts, groups, source)
        t2 = time.perf_counter()
        window = (start_s * 1000, end_s * 1000)
        # rows reduced to buckets as decoded: the kernels start after the downsampling
        reduced = buckets is not None and not source.is_rollup
        kernels = dataclasses.replace(sub, downsample_spec=None) if reduced else sub
        aggregated = await self._aggregate(spans, groups, kernels, query, window, control, work)
        timings["aggregationTime"] = (time.perf_counter() - t2) * 1000
        timings["dpsPostFilter"] = kept_points
        found = _Found(spans, facts, groups, aggregated, filter_tagks)
        return await self._results(sub, query, found, timings, work)

    async def _histogram_results(
        self,
        sub: SubQuery,
        query: TSQuery,
        spans: Spans,
        facts: SeriesFacts,
        groups: list[list[int]],
        source: RollupRead,
    ) -> list[SeriesResult]:
        """A histogram query's series (tsd/query/histogram.py): per group, one series per
        percentile, then per bucket."""
        assert source.histograms is not None
        metric_uid = spans.keys[0][self._layout.salt_width :][: self._layout.metric_width]
        metric = sub.metric or await self._uids.metrics.get_name(metric_uid)
        out: list[SeriesResult] = []
        for members in groups:
            with_data = [i for i in members if facts.has_points[i]]
            if not with_data:
                continue
            tags, aggregate_tags = group_tags([facts.tags[i] for i in with_data])
            series = histogram_series(
                spans.batch,
                with_data,
                source.histograms,
                sub.percentiles,
                sub.show_histogram_buckets,
                sub.downsample_spec,
                query.start_ms,
                query.end_ms,
            )
            for suffix, dps in series:
                out.append(
                    SeriesResult(
                        sub=sub,
                        metric=metric + suffix,
                        tags=tags,
                        aggregate_tags=aggregate_tags,
                        dps=dps,
                        tsuids=[facts.tsuids[i] for i in with_data],
                    )
                )
        return out

    async def scan_plan(self, query: TSQuery, sub: SubQuery) -> ScanPlan:
        """The row scans that ``sub`` of ``query`` reads (``tsdb scan`` prints their rows)."""
        start_s, end_s = scan_window_s(query.start_ms, query.end_ms, sub.downsample_spec)
        if sub.tsuids:
            return plan_tsuid_scan(self._layout, sub, start_s=start_s, end_s=end_s)
        plan, _, _ = await self._plan_metric(sub, start_s, end_s)
        return plan

    async def _plan_metric(
        self, sub: SubQuery, start_s: int, end_s: int
    ) -> tuple[ScanPlan, tuple[bytes, ...], ReadRequest]:
        """The scan plan, the filters' tag key UIDs and what the read path needs."""
        metric_uid = await self._uids.metrics.get_id(sub.metric)
        resolved = await _all_or_none([self._resolve_filter(f) for f in sub.filters])
        tagks = tuple(r.tagk_uid for r in resolved if r.tagk_uid is not None)
        limit = self._cfg.filter_expansion_limit
        plan = plan_metric_scan(
            self._layout,
            metric_uid,
            resolved,
            explicit_tags=sub.explicit_tags,
            start_s=start_s,
            end_s=end_s,
            expansion_limit=limit,
        )
        request = request_for_filters(
            tag_conditions(resolved, limit),
            sub.explicit_tags,
            any(r.filter.type == "not_key" for r in resolved),
        )
        return plan, tagks, request

    async def _resolve_filter(self, f: Any) -> ResolvedFilter:
        try:
            tagk_uid: bytes | None = await self._uids.tagk.get_id(f.tagk)
        except NoSuchUniqueName:
            if f.type != "not_key":
                raise
            tagk_uid = None  # no series carries a key that has no UID
        names = literal_names(f, self._cfg.filter_expansion_limit)
        if names is None:
            return ResolvedFilter(f, tagk_uid)
        uids = await _all_or_none([self._tagv_uid(n) for n in sorted(names)])
        return ResolvedFilter(f, tagk_uid, tuple(u for u in uids if u is not None))

    async def _tagv_uid(self, name: str) -> bytes | None:
        try:
            return await self._uids.tagv.get_id(name)
        except NoSuchUniqueName:
            if self._cfg.skip_unresolved_tagvs:
                return None
            raise

    # -- scanning -----------------------------------------------------------------------------

    async def _read(
        self,
        plan: ScanPlan,
        path: str,
        request: ReadRequest,
        tally: _ScanTally,
        stats: ReadStats,
        source: RollupRead | None = None,
        buckets: RowBuckets | None = None,
    ) -> list[tuple[list[bytes], RowPoints]]:
        """The plan's rows along ``path`` (read_path.py), each block decoded in a worker
        thread while the next is read, counted against the limits. ``source``: the table
        and cells to read (default: the data table's); ``buckets``: each row reduced to
        its buckets as decoded (of a rollup read: the head's rows, head_buckets.py)."""
        parts: list[tuple[list[bytes], RowPoints]] = []
        # The head's rows are copied before storage is read: a row written out meanwhile
        # is then found in one or both (identical points fold), never in neither.
        head = None
        raw = source is None or (
            source.table == self._table and not source.is_rollup and source.histograms is None
        )
        if self._head is not None and raw:  # the head holds data points only
            head = self._head.snapshot(plan.scans)

        table = self._table if source is None else source.table
        rollup = source if source is not None and source.is_rollup else None
        # tsd's own rollups of the head's rows (not written out yet), as the write-out will
        # store them: merged into the stored rollup rows, replacing their cells.
        fresh: dict[bytes, dict[bytes, bytes]] = {}
        hours: dict[bytes, set[int]] = {}
        from_head: list[tuple[list[bytes], RowPoints]] = []
        if rollup is not None and self._own_rollups(rollup):
            if buckets is not None:
                hours, from_head = await self._head_buckets(plan, rollup, buckets, tally)
            else:
                fresh = await self._head_rollups(plan, rollup)

        async def decode(block: Block) -> None:
            if head is not None and head.shares(block.keys):
                # a stored row the head has points for too: read as one row
                if isinstance(block, PointBlock):
                    block = block.cells()
                block = head.merge_into(block)
            cells_only = source is not None and (source.is_rollup or source.histograms is not None)
            if cells_only and isinstance(block, PointBlock):
                # rollup and histogram cells: not data points. (A raw read's source is
                # RollupRead(data table): its PointBlocks are decoded as they are.)
                block = block.cells()
            # decoded points need only their times: a pass over every point (a fraction of
            # a cell block's work per point, but not per row: rows hold hundreds of points)
            work = len(block.values) // 4 if isinstance(block, CellBlock) else len(block.values)
            if source is not None and source.histograms is not None:
                assert isinstance(block, CellBlock)
                started = time.thread_time()
                histograms = None if source.is_rollup else source.histograms
                points = decode_histogram_rows(block, self._layout, histograms)
                spent = time.thread_time() - started
            elif rollup is not None:
                assert isinstance(block, CellBlock)
                if fresh and not fresh.keys().isdisjoint(block.keys):
                    block = _with_fresh_rollups(block, fresh)
                if hours and not hours.keys().isdisjoint(block.keys):
                    assert rollup.interval is not None
                    block = without_hours(block, hours, self._layout, rollup.interval)
                # the rows with a cell of the columns read (OpenTSDB's scan filters cells)
                keys, points, spent = await self._compute_sized(
                    work, _timed_rollup_decode, block, self._layout, rollup
                )
                stats.decode_s += spent
                tally.add(points, len(keys))
                parts.append((keys, points))
                return
            else:
                points, spent = await self._compute_sized(
                    work, _timed_decode, block, self._layout, self._fix_duplicates, buckets
                )
            stats.decode_s += spent
            tally.add(points, len(block))
            parts.append((block.keys, points))

        await read_rows(self._storage, table, self._layout, plan, path, request, decode, stats)
        parts += from_head
        if fresh:  # rollup rows only the head's rows fill so far
            keys = sorted(fresh)
            await decode(
                CellBlock.from_rows(
                    [
                        Row(k, tuple(Cell(FAMILY, q, v) for q, v in sorted(fresh[k].items())))
                        for k in keys
                    ]
                )
            )
        if head is not None and len(head):
            runs, rest = head.remaining()
            if len(rest):
                await decode(rest)
            if runs.keys:
                points = await self._compute_sized(
                    len(runs.values) // 4, _decode_head, runs, self._layout, buckets
                )
                tally.add(points, len(runs.keys))
                parts.append((runs.keys, points))
        return parts

    async def _head_buckets(
        self, plan: ScanPlan, read: RollupRead, buckets: RowBuckets, tally: _ScanTally
    ) -> tuple[dict[bytes, set[int]], list[tuple[list[bytes], RowPoints]]]:
        """The head's rows of ``plan`` (each merged with its stored row) reduced to the
        buckets of ``read``'s rollup points (head_buckets.py), and their row-hours by
        rollup row key. Raises RowsOutOfHour as decode_buckets does."""
        assert self._head is not None
        assert read.interval is not None
        snapshot = self._head.snapshot(plan.scans)
        if not len(snapshot):
            return {}, []
        keys = snapshot.keys()
        hours = head_hours(self._layout, keys, read.interval)
        stored = await self._storage.get_many(self._table, keys, (FAMILY,))
        merged = snapshot.merge_into(CellBlock.from_rows(stored))
        runs, rest = snapshot.remaining()
        parts: list[tuple[list[bytes], RowPoints]] = []
        for block in (merged, rest):
            if len(block):
                points, _ = await self._compute_sized(
                    len(block.values) // 4,
                    _timed_decode,
                    block,
                    self._layout,
                    self._fix_duplicates,
                    buckets,
                )
                parts.append((block.keys, points))
        if runs.keys:
            points = await self._compute_sized(
                len(runs.values) // 4, _decode_head, runs, self._layout, buckets
            )
            parts.append((runs.keys, points))
        # counted as the rollup points they stand for, as their rollup cells were
        parts = [(k, dataclasses.replace(p, row_points=None)) for k, p in parts]
        for k, p in parts:
            tally.add(p, len(k))
        return hours, parts

    def _own_rollups(self, read: RollupRead) -> bool:
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
        self, plan: ScanPlan, read: RollupRead
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
        rows = _with_head(stored, snapshot)
        computed = self.computed
        cells = await self._compute_sized(
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

    async def _compute_sized(
        self, work: int | None, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """``fn`` on the event loop when ``work`` is known and at most ``INLINE_WORK``,
        else in a worker thread (:meth:`_compute_off_loop`)."""
        if work is not None and work <= INLINE_WORK:
            return fn(*args, **kwargs)
        return await self._compute_off_loop(fn, *args, **kwargs)

    async def _compute_off_loop(
        self,
        fn: Callable[..., T],
        *args: Any,
        slots: asyncio.Semaphore | None = None,
        **kwargs: Any,
    ) -> T:
        """Run numpy work in a worker thread, at most ``compute_slots`` at once (in
        ``slots``: the compute slots unless given).

        The slot is held until the thread is done, even when the caller is cancelled (the
        thread cannot be interrupted; its query's cancel flag stops it at the next chunk),
        so cancelled work never pushes the threads past ``compute_slots``."""
        async with slots or self._compute:
            self._busy += 1
            work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                with contextlib.suppress(BaseException):
                    await work
                raise
            finally:
                self._busy -= 1

    async def _aggregate(
        self,
        spans: Spans,
        groups: list[list[int]],
        sub: SubQuery,
        query: TSQuery,
        window: tuple[int, int],
        control: QueryControl,
        work: int,
    ) -> list[AggregatedSeries]:
        """The kernels over every group, in chunks of about ``AGGREGATE_CHUNK_SERIES``
        series per worker-thread call: the slot is given back between chunks (other
        queries take turns) and the cancel flag is checked in between."""
        out: list[AggregatedSeries] = []
        chunk: list[list[int]] = []
        size = 0
        for members in groups:
            chunk.append(members)
            size += len(members)
            if size >= AGGREGATE_CHUNK_SERIES:
                control.check()
                out += await self._compute_sized(
                    work, aggregate_groups, spans.batch, chunk, sub, query, window, control
                )
                chunk, size = [], 0
        if chunk:
            control.check()
            out += await self._compute_sized(
                work, aggregate_groups, spans.batch, chunk, sub, query, window, control
            )
        return out

    async def _delete_rows(
        self, parts: Sequence[tuple[list[bytes], RowPoints]], spans: Spans, keep: Any
    ) -> None:
        """``delete=true``: drop every row read for the series that passed the filters."""
        kept = {spans.keys[i] for i in np.flatnonzero(keep).tolist()}
        doomed = [k for keys, _ in parts for k in keys if series_key(self._layout, k) in kept]
        if self._head is not None:
            self._head.discard(doomed)
        for start in range(0, len(doomed), DELETE_BATCH_ROWS):
            chunk = doomed[start : start + DELETE_BATCH_ROWS]
            await self._storage.delete(self._table, [Delete(k) for k in chunk])

    # -- series, groups, results --------------------------------------------------------------

    async def _series_facts(self, spans: Spans, work: int) -> SeriesFacts:
        tag_uids, tagks, tagvs = await self._compute_sized(
            work, _tag_uids_and_sets, self._layout, spans.keys
        )
        tagk_names = await self._names(self._uids.tagk, tagks)
        tagv_names = await self._names(self._uids.tagv, tagvs)
        return await self._compute_sized(
            work, series_facts, self._layout, spans, tag_uids, tagk_names, tagv_names
        )

    @staticmethod
    async def _names(uids: Any, wanted: set[bytes]) -> dict[bytes, str]:
        names: dict[bytes, str] = {}
        missing = []
        for n, uid in enumerate(wanted):
            if n and n % RESULTS_CHUNK == 0:
                await asyncio.sleep(0)  # 200,000 tag values: let the loop serve others
            name = uids.cached_name(uid)
            if name is None:
                missing.append(uid)
            else:
                names[uid] = name
        if len(missing) == 1:  # the common case: one name, through the shared lookup
            names[missing[0]] = await uids.get_name(missing[0])
        elif missing:
            names.update(await uids.get_names(missing))
        return names

    def _filter_and_group(
        self, sub: SubQuery, plan: ScanPlan, facts: SeriesFacts, control: QueryControl
    ) -> tuple[BoolArray, list[list[int]]]:
        """The series passing the filters, and their groups in OpenTSDB's group order."""
        keep = SeriesFilter(sub.filters, sub.explicit_tags, control).mask(facts.tags)
        kept = np.flatnonzero(keep).tolist()
        if sub.aggregator == "none":
            return keep, [[i] for i in kept]
        keys: list[bytes | None] = [None] * len(facts.tags)
        for i in kept:
            keys[i] = group_key(self._layout, facts.tag_uids[i], plan.group_by)
        return keep, [members for _, members in group_series(keys)]

    async def _results(
        self, sub: SubQuery, query: TSQuery, found: _Found, timings: dict[str, Any], work: int
    ) -> list[SeriesResult]:
        metric_uid = found.spans.keys[0][self._layout.salt_width :][: self._layout.metric_width]
        metric = sub.metric or await self._uids.metrics.get_name(metric_uid)
        out: list[SeriesResult] = []
        for lo in range(0, len(found.groups), AGGREGATE_CHUNK_SERIES):
            hi = lo + AGGREGATE_CHUNK_SERIES
            out += await self._compute_sized(
                work, _build_results, sub, query, found, metric, timings, lo, hi
            )
        return out

    async def _global_annotations(self, query: TSQuery) -> list[dict[str, Any]]:
        """Annotation.getGlobalAnnotations: notes in the zero-metric rows of the window."""
        layout = self._layout
        start_s, end_s = query.start_ms // 1000, query.end_ms // 1000
        prefix = bytes(layout.salt_width + layout.metric_width)
        first = start_s - start_s % MAX_TIMESPAN
        last = end_s - end_s % MAX_TIMESPAN + MAX_TIMESPAN
        spec = ScanSpec(
            start=prefix + first.to_bytes(TIMESTAMP_BYTES, "big"),
            stop=prefix + last.to_bytes(TIMESTAMP_BYTES, "big"),
            families=(FAMILY,),
        )
        notes = []
        async with contextlib.aclosing(self._storage.scan(self._table, spec)) as rows:
            async for row in rows:
                for cell in row.cells:
                    q = cell.qualifier
                    if len(q) in (3, 5) and q[0] == 0x01:
                        note = parse_note(cell.value)
                        if note is None:
                            continue
                        begin, finish = note.get("startTime", 0), note.get("endTime", 0)
                        if begin < start_s or (finish or 0) > end_s:
                            continue
                        if in_range(note, query):
                            notes.append(note)
        notes.sort(key=lambda n: n.get("startTime", 0))
        return notes

    # -- /api/query/last ----------------------------------------------------------------------

    async def last(self, query: LastPointQuery) -> list[LastPoint]:
        """The last data point of each series the sub-queries name (see last.py)."""
        now_s = int(self._wall_clock())
        top = now_s - now_s % MAX_TIMESPAN
        hours = query.hours
        found: list[LastPoint] = []
        async with self._timeout():
            for sub in query.queries:
                if sub.tsuids:
                    tsuids = parse_tsuids(self._layout, list(sub.tsuids))
                    for tsuid in tsuids:
                        point = await self._last_of_series(tsuid, top, hours)
                        if point is not None:
                            found.append(point)
                elif query.exact_tags:
                    tsuid = await self._tsuid_of(sub)
                    point = await self._last_of_series(tsuid, top, hours)
                    if point is not None:
                        found.append(point)
                else:
                    found.extend(await self._last_of_metric(sub, top, hours))
        if query.resolve_names:
            found = [await self._with_names(p) for p in found]
        return found

    async def _tsuid_of(self, sub: LastPointSubQuery) -> bytes:
        if not sub.tags:
            raise BadRequestError("Tags cannot be null or empty when getting a TSUID")
        metric_uid = await self._uids.metrics.get_id(sub.metric)
        pairs = [
            (await self._uids.tagk.get_id(k), await self._uids.tagv.get_id(v))
            for k, v in sub.tags.items()
        ]
        return metric_uid + encode_tags(self._layout, pairs)

    async def _last_of_series(self, tsuid: bytes, top: int, hours: int) -> LastPoint | None:
        """GETs of the series' rows from the current hour back, newest first."""
        layout = self._layout
        metric_uid = tsuid[: layout.metric_width]
        tag_bytes = tsuid[layout.metric_width :]
        salt = b""
        if layout.salt_width:
            salt = salt_bytes(layout, salt_bucket(layout, metric_uid, tag_bytes))
        step = 24
        for first in range(0, hours + 1, step):
            bases = [top - MAX_TIMESPAN * h for h in range(first, min(hours + 1, first + step))]
            keys = [
                salt + metric_uid + (b & 0xFFFFFFFF).to_bytes(4, "big") + tag_bytes for b in bases
            ]
            head = self._head.snapshot_keys(keys) if self._head is not None else None
            rows = _with_head(await self._storage.get_many(self._table, keys, (FAMILY,)), head)
            for row in sorted(rows, key=lambda r: r.key, reverse=True):
                point = await self._last_in_rows([row])
                if point is not None:
                    return point
        return None

    async def _last_of_metric(
        self, sub: LastPointSubQuery, top: int, hours: int
    ) -> list[LastPoint]:
        """Every series of the metric carrying the given tags, each with its last point
        within the window (tsd's stand-in for OpenTSDB's meta-table lookup)."""
        layout = self._layout
        metric_uid = await self._uids.metrics.get_id(sub.metric)
        conditions = [
            TagCondition(await self._uids.tagk.get_id(k), (await self._uids.tagv.get_id(v),))
            for k, v in sorted(sub.tags.items())
        ]
        conditions.sort(key=lambda c: c.tagk_uid)
        regex = row_key_regex(layout, conditions, False) if conditions else None
        buckets: Sequence[int | None] = range(layout.salt_buckets) if layout.salt_width else (None,)
        newest: dict[bytes, Row] = {}
        first = max(0, top - MAX_TIMESPAN * hours)
        for bucket in buckets:
            prefix = (salt_bytes(layout, bucket) if bucket is not None else b"") + metric_uid
            spec = ScanSpec(
                start=prefix + first.to_bytes(4, "big"),
                stop=prefix + (top + MAX_TIMESPAN).to_bytes(4, "big"),
                families=(FAMILY,),
                row_filter=RowFilter(regex) if regex is not None else None,
                batch_rows=SCAN_BATCH_ROWS,
            )
            head = self._head.snapshot([spec]) if self._head is not None else None
            async with contextlib.aclosing(self._storage.scan(self._table, spec)) as rows:
                scanned = [row async for row in rows]
            # A series' rows come in time order (key order): the last one with data wins.
            for row in sorted(_with_head(scanned, head), key=lambda r: r.key):
                if has_data(row):
                    newest[series_key(layout, row.key)] = row
        out = []
        for key in sorted(newest):
            point = await self._last_in_rows([newest[key]])
            if point is not None:
                out.append(point)
        return out

    async def _last_in_rows(self, rows: list[Row]) -> LastPoint | None:
        points = await self._compute_off_loop(
            decode_rows, rows, self._layout, fix_duplicates=self._fix_duplicates
        )
        if not points.point_count:
            return None
        i = points.point_count - 1
        value: int | float = float(points.values[i])
        if points.is_int is not None and points.int_values is not None and points.is_int[i]:
            value = int(points.int_values[i])
        key = rows[-1].key
        tsuid = key[self._layout.salt_width :]
        tsuid = tsuid[: self._layout.metric_width] + tsuid[self._layout.metric_width + 4 :]
        return LastPoint(int(points.timestamps[i]), format_last_value(value), tsuid.hex().upper())

    async def _with_names(self, point: LastPoint) -> LastPoint:
        layout = self._layout
        raw = bytes.fromhex(point.tsuid)
        metric = await self._uids.metrics.get_name(raw[: layout.metric_width])
        tags = {}
        pair, kw = layout.tag_pair_width, layout.tagk_width
        for i in range(layout.metric_width, len(raw), pair):
            tagk = await self._uids.tagk.get_name(raw[i : i + kw])
            tags[tagk] = await self._uids.tagv.get_name(raw[i + kw : i + pair])
        return LastPoint(point.timestamp_ms, point.value, point.tsuid, metric, tags)


# --------------------------------------------------------------------------- helpers


def _build_results(
    sub: SubQuery,
    query: TSQuery,
    found: _Found,
    metric: str,
    timings: dict[str, Any],
    lo: int,
    hi: int,
) -> list[SeriesResult]:
    """The result series of groups ``lo:hi`` (in a worker thread: 200,000 groups of
    Python objects would hold the event loop for seconds)."""
    facts = found.facts
    out = []
    for members, dps in zip(found.groups[lo:hi], found.aggregated[lo:hi], strict=True):
        with_data = [i for i in members if facts.has_points[i]]
        notes = group_annotations(facts, members, query)
        if not with_data and notes is None:
            continue
        tags, aggregate_tags = group_tags([facts.tags[i] for i in with_data])
        stats = None
        if query.show_stats:
            stats = dict(timings, emittedDPs=len(dps), queryIndex=sub.index)
        out.append(
            SeriesResult(
                sub=sub,
                metric=metric if with_data else "",
                tags=tags,
                aggregate_tags=aggregate_tags,
                dps=dps,
                tsuids=[facts.tsuids[i] for i in with_data],
                annotations=notes,
                stats=stats,
                filter_tagks=found.filter_tagks,
            )
        )
    return out


def _tag_uids_and_sets(
    layout: KeyLayout, keys: Sequence[bytes]
) -> tuple[list[dict[bytes, bytes]], set[bytes], set[bytes]]:
    """Each series' tag UIDs, and the distinct tag keys and values (in a worker thread)."""
    tag_uids = series_tag_uids(layout, keys)
    tagks = {k for t in tag_uids for k in t}
    tagvs = {v for t in tag_uids for v in t.values()}
    return tag_uids, tagks, tagvs


def _points_in_range(batch: Any, keep: BoolArray, start_ms: int, end_ms: int) -> int:
    """Points of the kept series within [start, end]: the most a raw answer can hold."""
    ts = batch.timestamps
    inside = (ts >= start_ms) & (ts <= end_ms) & np.repeat(keep, batch.lengths)
    return int(np.count_nonzero(inside))


def _with_head(rows: Sequence[Row], head: HeadSnapshot | None) -> list[Row]:
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
    block: CellBlock, layout: KeyLayout, source: RollupRead
) -> tuple[list[bytes], RowPoints, float]:
    started = time.thread_time()
    keys, points = decode_rollup_rows(block, layout, source)
    return keys, points, time.thread_time() - started


def _decode_head(runs: HeadRuns, layout: KeyLayout, buckets: RowBuckets | None) -> RowPoints:
    """The head's rows decoded (each reduced to its buckets with ``buckets``)."""
    return decode_head_runs(runs, layout, buckets)


def _timed_decode(
    block: Block, layout: KeyLayout, fix_duplicates: bool, buckets: RowBuckets | None
) -> tuple[RowPoints, float]:
    """decode_block (decode_buckets with ``buckets``) and the CPU time it took (in the
    worker thread that runs it)."""
    started = time.thread_time()
    if buckets is None:
        points = decode_block(block, layout, fix_duplicates=fix_duplicates)
    else:
        points = decode_buckets(block, layout, buckets, fix_duplicates=fix_duplicates)
    return points, time.thread_time() - started
