"""QueryEngine: /api/query and /api/query/last over the storage. The async edge of query/.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.1; OpenTSDB 2.4.1
src/tsd/QueryRpc.java, src/core/TsdbQuery.java, SaltScanner.java, SpanGroup.java): per
sub-query, in OpenTSDB's order,

1. resolve the metric, the filters' tag keys and literal tag values (plan.py says which);
2. scan every salt bucket concurrently, with the head's rows (reader.py); rows are decoded
   batch by batch in a worker thread while the next batch is read (decode.py), counting
   points and bytes against ``tsd.query.limits.*`` (413 past them);
3. assemble the rows into series, resolve their tag names, apply the filters;
4. group (``none``: one group per series), and per group downsample -> rate -> aggregate
   with interpolation over the scan window, then trim to [start, end] (the kernels);
5. build the result series (metric, tags, aggregateTags, tsuids, annotations).

Everything numeric runs in worker threads, at most ``compute_slots`` at a time (one less
than the CPUs by default; compute.py), in chunks, so one big query neither blocks the event loop
(ingest keeps flowing) nor takes every core. Each query has a
:class:`~tsd.query.limits.QueryControl`: its limits are checked at planning time and
before each phase allocates (limits.py), and its cancel flag, set when the client goes
away (the handler task is cancelled), at ``tsd.query.timeout`` (ms; dead in OpenTSDB
2.4.1, 60 s by default in tsd) or when the daemon stops (:meth:`QueryEngine.cancel_all`),
stops the worker threads at their next chunk.

tsd deviations: the data point limit counts decoded points (OpenTSDB counts cells, so a
compacted row of 360 points counted as one); /api/query/last needs no meta table (its
read is last.py's); rows are never written back compacted by a query (OpenTSDB's read-triggered
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

from tsd.codec import KeyLayout
from tsd.codec.const import FAMILY, MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.config import Config
from tsd.errors import BadRequestError, NoSuchUniqueName, TsdError
from tsd.head import Head
from tsd.query.compute import ComputeSlots
from tsd.query.decode import series_key
from tsd.query.downsample import RowBuckets, RowsOutOfHour, row_buckets
from tsd.query.filters import SeriesFilter
from tsd.query.group import group_key_bytes, group_series, group_tags
from tsd.query.head_buckets import rollup_buckets
from tsd.query.histogram import histogram_series
from tsd.query.last import LastPointQuery, LastPointReader
from tsd.query.limits import (
    BYTES_PER_CELL,
    BYTES_PER_OUTPUT_POINT,
    BYTES_PER_SERIES,
    MemoryPool,
    QueryCancelled,
    QueryControl,
    QueryLimits,
    buckets_per_series,
    fills,
)
from tsd.query.output import (
    LastPoint,
    QueryResult,
    SeriesColumns,
    SeriesParts,
    SeriesResult,
    emitted_points,
)
from tsd.query.plan import (
    ResolvedFilter,
    ScanPlan,
    group_key,
    literal_names,
    parse_tsuids,
    plan_metric_scan,
    plan_tsuid_scan,
    scan_window_s,
    tag_conditions,
)
from tsd.query.read_path import (
    ReadRequest,
    choose_path,
    read_stats_json,
    request_for_filters,
    request_for_tsuids,
    sum_reads,
)
from tsd.query.reader import Part, RowReader, ScanTally
from tsd.query.results import (
    LazyRows,
    SeriesFacts,
    aggregate_groups,
    column_facts,
    column_group_tags,
    group_annotations,
    in_range,
    parse_note,
    series_facts,
    series_tag_uids,
    tag_columns,
)
from tsd.query.rollup import ReadSource, RollupConfigLike, plan_reads
from tsd.query.rollup_compute import ComputedRollups
from tsd.query.series import AggregatedSeries, BoolArray, JoinedSeries
from tsd.query.spans import Spans, assemble_spans
from tsd.query.tasks import all_or_none as _all_or_none
from tsd.query_spec import SubQuery, TSQuery
from tsd.storage.base import Delete, ReadStats, ScanSpec, Storage
from tsd.uid.service import UidService

__all__ = ["QueryEngine"]

T = TypeVar("T")

#: Rows deleted per storage call when a query deletes what it read.
DELETE_BATCH_ROWS = 1024
#: Series aggregated per worker-thread call (between two cancel checks and slot turns).
AGGREGATE_CHUNK_SERIES = 8192
#: A group's tags are found by column (results.column_group_tags) from this many series
#: with data: below, a dict per series costs less than numpy's calls (2 series: 2.5 against
#: 4.9 us; 16: 12.5 against 5.2; 1,000: 730 against 24).
COLUMN_GROUP_MIN = 8
#: Cached names looked up on the event loop at once (a dict lookup each) before it is
#: given back.
NAMES_CHUNK = 4096


@dataclass(slots=True)
class QueryStats:
    """What the engine counts (``query.*`` in /api/stats)."""

    started: int = 0
    refused: int = 0
    cancelled: int = 0
    timed_out: int = 0
    scans: int = 0


@dataclass(slots=True)
class _Found:
    """What a sub-query found: its spans, their facts, groups and aggregated series."""

    spans: Spans
    facts: SeriesFacts
    groups: list[list[int]]
    aggregated: list[AggregatedSeries] | JoinedSeries
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
        self._cfg = cfg = config.query
        if compute_slots is None:
            compute_slots = cfg.compute_slots or (os.cpu_count() or 2) - 1
        self.compute_slots = max(1, compute_slots)
        self._compute = ComputeSlots(self.compute_slots)
        #: filtering by regexps has its own threads, as many: a regexp that backtracks for
        #: its whole budget holds one of them, not a compute slot that every other query
        #: needs (the regex package releases the GIL meanwhile); wildcards (``host=*``, a
        #: dashboard's group-by) cannot backtrack and keep to the compute slots
        self._regexps = asyncio.Semaphore(self.compute_slots)
        self._reader = RowReader(
            storage, head, self._layout, self._table, self._fix_duplicates, self._compute
        )
        self._last = LastPointReader(
            storage,
            head,
            uids,
            self._layout,
            self._table,
            self._fix_duplicates,
            self._compute,
            wall_clock,
        )
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
        return self._compute.busy

    @property
    def computed(self) -> ComputedRollups | None:
        """The rollups tsd computes itself (tsd.rollups.compute; set by the daemon)."""
        return self._reader.computed

    @computed.setter
    def computed(self, computed: ComputedRollups | None) -> None:
        self._reader.computed = computed

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
            # asyncio.timeout itself, not _timeout: one context manager less per query
            try:
                async with asyncio.timeout(self._timeout_s()):
                    global_notes: list[dict[str, Any]] = []
                    if query.global_annotations and not query.no_annotations:
                        global_notes = await self._global_annotations(query)
                    per_sub: list[Sequence[SeriesResult]]
                    if len(query.queries) == 1:  # a dashboard's usual query: no gate
                        control.check()
                        per_sub = [await self._run_sub(query, query.queries[0], control, reads)]
                    else:
                        per_sub = await self._gated(query, control, reads)
            except TimeoutError:
                raise self._timed_out(control) from None
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
        series: Sequence[SeriesResult]
        if any(isinstance(results, SeriesColumns) for results in per_sub):
            series = SeriesParts(per_sub)
        else:
            series = [s for results in per_sub for s in results]
        summary = None
        if query.show_summary:
            summary = {
                "processingPreWriteTime": (time.perf_counter() - started) * 1000,
                "queryIdx_count": len(query.queries),
                "emittedDPs": emitted_points(series),
                **read_stats_json(sum_reads(reads)),
            }
        return QueryResult(query, series, global_notes, summary)

    async def _gated(
        self, query: TSQuery, control: QueryControl, reads: list[ReadStats]
    ) -> list[Sequence[SeriesResult]]:
        """Every sub-query, a few at a time: a thousand of them scanning at once would each
        hold a batch of rows waiting for a compute slot, uncounted."""
        gate = asyncio.Semaphore(self.compute_slots + 1)

        async def gated(sub: SubQuery) -> Sequence[SeriesResult]:
            async with gate:
                control.check()
                return await self._run_sub(query, sub, control, reads)

        return await _all_or_none([gated(sub) for sub in query.queries])

    def _timeout_s(self) -> float | None:
        timeout_ms = self._cfg.timeout_ms
        return timeout_ms / 1000 if timeout_ms > 0 else None

    def _timed_out(self, control: QueryControl | None) -> BadRequestError:
        """``tsd.query.timeout`` reached: the worker threads stop at their next chunk."""
        if control is not None:
            control.cancel("timeout")
        return BadRequestError(
            f"Query timed out after {self._cfg.timeout_ms} ms (tsd.query.timeout)", status=408
        )

    async def compute(
        self, fn: Callable[..., T], *args: Any, work: int | None = None, **kwargs: Any
    ) -> T:
        """Run ``fn`` in a worker thread within the engine's compute slots (the server
        renders a big answer, millions of values to format, this way); on the event loop
        when ``work`` (points it handles) is known and small."""
        return await self._compute.sized(work, fn, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def _timeout(self, control: QueryControl | None = None) -> Any:
        try:
            async with asyncio.timeout(self._timeout_s()):
                yield
        except TimeoutError:
            raise self._timed_out(control) from None

    async def _run_sub(
        self,
        query: TSQuery,
        sub: SubQuery,
        control: QueryControl,
        reads: list[ReadStats] | None = None,
    ) -> Sequence[SeriesResult]:
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
        source: ReadSource,
    ) -> Sequence[SeriesResult] | None:
        """One read of the sub-query; None when it found no series."""
        timings: dict[str, Any] = {}
        t0 = time.perf_counter()
        spec = sub.downsample_spec
        sub, start_s, end_s = _read_window(query, sub, source)
        # Planning time: one series' worth of buckets over the limit is refused unread.
        per_series = buckets_per_series(spec, start_s * 1000, end_s * 1000)
        filled = fills(spec)
        control.check_buckets(per_series, 1, filled)
        plan, filter_tagks, request = await self._plan_read(sub, start_s, end_s)
        timings["stringToUidTime"] = (time.perf_counter() - t0) * 1000
        if plan.is_empty:
            return None
        t1 = time.perf_counter()
        # Raw data reduced to buckets row by row as decoded, when the spec allows
        # (tsd/query/downsample.py): the series then never hold their points.
        buckets = None
        if not source.is_rollup and source.histograms is None:
            buckets = row_buckets(spec, start_s * 1000)
        elif self._reader.own_rollups(source):  # the head's rows: to the rollups' buckets
            buckets = rollup_buckets(source, start_s * 1000)
        self.stats.scans += 1
        parts, tally, read, buckets = await self._read_rows(
            plan, request, control, source, buckets, query.delete
        )
        if reads is not None:
            reads.append(read)
        spans = await self._compute.sized(
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
        keep, groups = await self._filter(sub, plan, facts, control, work, spans.keys)
        kept_points = await self._charge_answer(
            query, spans, keep, len(groups), per_series, filled, control, work
        )
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

    async def _plan_read(
        self, sub: SubQuery, start_s: int, end_s: int
    ) -> tuple[ScanPlan, tuple[bytes, ...], ReadRequest]:
        """The scan plan, the filters' tag key UIDs and what the read path needs, by
        TSUIDs or by metric and filters."""
        if sub.tsuids:
            plan = plan_tsuid_scan(self._layout, sub, start_s=start_s, end_s=end_s)
            request = request_for_tsuids(self._layout, parse_tsuids(self._layout, sub.tsuids))
            return plan, (), request
        return await self._plan_metric(sub, start_s, end_s)

    async def _read_rows(
        self,
        plan: ScanPlan,
        request: ReadRequest,
        control: QueryControl,
        source: ReadSource,
        buckets: RowBuckets | None,
        every_row: bool = False,
    ) -> tuple[list[Part], ScanTally, ReadStats, RowBuckets | None]:
        """The plan's rows, decoded and counted (reader.py), along the read path chosen
        for them; read again with the points kept when rows cannot be reduced to their
        buckets as decoded (then the buckets answered are None)."""
        while True:
            tally = ScanTally(
                self._cfg.limits_data_points_default, self._cfg.limits_bytes_default, control
            )
            read = ReadStats()
            path = read.path = choose_path(plan, request)
            try:
                parts = await self._reader.read(
                    plan, path, request, tally, read, source, buckets, every_row
                )
            except RowsOutOfHour:
                buckets = None  # read again, points kept (the first read's charge stays)
                continue
            return parts, tally, read, buckets

    async def _filter(
        self,
        sub: SubQuery,
        plan: ScanPlan,
        facts: SeriesFacts,
        control: QueryControl,
        work: int,
        keys: Sequence[bytes],
    ) -> tuple[BoolArray, list[list[int]]]:
        """:meth:`_filter_and_group` in the threads its filters need."""
        # Filters and grouping run per series; a regexp (or wildcard) can take long on one
        # value whatever the size (tsd.query.filter.regexp_budget): always off the loop.
        patterned = any("regexp" in f.type or "wildcard" in f.type for f in sub.filters)
        if any(f.type == "regexp" for f in sub.filters):
            return await self._compute.off_loop(
                self._filter_and_group, sub, plan, facts, control, keys, slots=self._regexps
            )
        return await self._compute.sized(
            None if patterned else work, self._filter_and_group, sub, plan, facts, control, keys
        )

    async def _charge_answer(
        self,
        query: TSQuery,
        spans: Spans,
        keep: BoolArray,
        group_count: int,
        per_series: int,
        filled: bool,
        control: QueryControl,
        work: int,
    ) -> int:
        """Before any kernel allocates: the buckets, the answer's size and their memory
        checked against the limits and charged. Answers the points the kept series hold."""
        kept_points = int(spans.point_lengths[keep].sum())
        kept_series = int(keep.sum())
        in_range_points = 0
        if not per_series:  # raw points: the answer holds those within [start, end]
            in_range_points = await self._compute.sized(
                work, _points_in_range, spans.batch, keep, query.start_ms, query.end_ms
            )
        control.check_buckets(per_series, kept_series, filled)
        if filled:
            output = group_count * per_series
        elif per_series:
            output = min(group_count * per_series, kept_points)
        else:
            output = in_range_points
        control.check_output(output)
        cells = kept_series * per_series if filled else 0
        control.charge(cells * BYTES_PER_CELL + output * BYTES_PER_OUTPUT_POINT)
        return kept_points

    async def _histogram_results(
        self,
        sub: SubQuery,
        query: TSQuery,
        spans: Spans,
        facts: SeriesFacts,
        groups: list[list[int]],
        source: ReadSource,
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
        # the cache first: a filter's few values cost no task each (the usual case)
        ordered = sorted(names)
        uids = [self._uids.tagv.cached_id(n) for n in ordered]
        if None in uids:  # the others looked up at once
            missing = [n for n, uid in zip(ordered, uids, strict=True) if uid is None]
            looked_up = iter(await _all_or_none([self._tagv_uid(n) for n in missing]))
            uids = [uid if uid is not None else next(looked_up) for uid in uids]
        return ResolvedFilter(f, tagk_uid, tuple(u for u in uids if u is not None))

    async def _tagv_uid(self, name: str) -> bytes | None:
        try:
            return await self._uids.tagv.get_id(name)
        except NoSuchUniqueName:
            if self._cfg.skip_unresolved_tagvs:
                return None
            raise

    async def _aggregate(
        self,
        spans: Spans,
        groups: list[list[int]],
        sub: SubQuery,
        query: TSQuery,
        window: tuple[int, int],
        control: QueryControl,
        work: int,
    ) -> list[AggregatedSeries] | JoinedSeries:
        """The kernels over every group, in chunks of about ``AGGREGATE_CHUNK_SERIES``
        series per worker-thread call: the slot is given back between chunks (other
        queries take turns) and the cancel flag is checked in between. Groups of one
        series each come back joined (:class:`JoinedSeries`) when every chunk's do."""
        out: list[list[AggregatedSeries] | JoinedSeries] = []
        chunk: list[list[int]] = []
        size = 0
        for members in groups:
            chunk.append(members)
            size += len(members)
            if size >= AGGREGATE_CHUNK_SERIES:
                control.check()
                out.append(
                    await self._compute.sized(
                        work, aggregate_groups, spans.batch, chunk, sub, query, window, control
                    )
                )
                chunk, size = [], 0
        if chunk:
            control.check()
            out.append(
                await self._compute.sized(
                    work, aggregate_groups, spans.batch, chunk, sub, query, window, control
                )
            )
        joined = [part for part in out if isinstance(part, JoinedSeries)]
        if out and len(joined) == len(out):
            return JoinedSeries.concat(joined)
        return [
            s for part in out for s in (part.split() if isinstance(part, JoinedSeries) else part)
        ]

    async def _delete_rows(self, parts: Sequence[Part], spans: Spans, keep: Any) -> None:
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
        """Each series' tags, TSUID and notes: by column where the keys allow
        (:func:`tag_columns`: no step per series), else series by series."""
        columns = await self._compute.sized(work, tag_columns, self._layout, spans.keys)
        if columns is not None:
            tagk_names = await self._names(self._uids.tagk, set(columns.tagks))
            tagv_names = await self._names(self._uids.tagv, columns.tagvs())
            return column_facts(self._layout, spans, columns, tagk_names, tagv_names)
        tag_uids, tagks, tagvs = await self._compute.sized(
            work, _tag_uids_and_sets, self._layout, spans.keys
        )
        tagk_names = await self._names(self._uids.tagk, tagks)
        tagv_names = await self._names(self._uids.tagv, tagvs)
        return await self._compute.sized(
            work, series_facts, self._layout, spans, tag_uids, tagk_names, tagv_names
        )

    @staticmethod
    async def _names(uids: Any, wanted: set[bytes]) -> dict[bytes, str]:
        names: dict[bytes, str] = {}
        missing: list[bytes] = []
        listed = list(wanted)
        for lo in range(0, len(listed), NAMES_CHUNK):
            if lo:
                await asyncio.sleep(0)  # 200,000 tag values: let the loop serve others
            found, unknown = uids.cached_names(listed[lo : lo + NAMES_CHUNK])
            names.update(found)
            missing += unknown
        if len(missing) == 1:  # the common case: one name, through the shared lookup
            names[missing[0]] = await uids.get_name(missing[0])
        elif missing:
            names.update(await uids.get_names(missing))
        return names

    def _filter_and_group(
        self,
        sub: SubQuery,
        plan: ScanPlan,
        facts: SeriesFacts,
        control: QueryControl,
        series_keys: Sequence[bytes],
    ) -> tuple[BoolArray, list[list[int]]]:
        """The series passing the filters, and their groups in OpenTSDB's group order
        (without a group-by, one group of them all; a group-by's keys from the series
        keys' bytes at once where they allow, :func:`group_key_bytes`; else one key per
        series)."""
        series_filter = SeriesFilter(sub.filters, sub.explicit_tags, control)
        if facts.columns is not None:
            keep = series_filter.mask_columns(facts.columns, len(facts.tags))
        else:
            keep = series_filter.mask(facts.tags)
        kept = np.flatnonzero(keep)
        if sub.aggregator == "none":
            return keep, [[i] for i in kept.tolist()]
        if not plan.group_by:  # one group of every series kept (group_key's b"" for each)
            return keep, [kept.tolist()] if len(kept) else []
        layout = self._layout
        start = layout.salt_width + layout.metric_width
        groups = group_key_bytes(
            series_keys, start, layout.tagk_width, layout.tagv_width, plan.group_by, kept
        )
        if groups is not None:
            return keep, groups
        keys: list[bytes | None] = [None] * len(facts.tags)
        for i in kept.tolist():
            keys[i] = group_key(layout, facts.tag_uids[i], plan.group_by)
        return keep, [members for _, members in group_series(keys)]

    async def _results(
        self, sub: SubQuery, query: TSQuery, found: _Found, timings: dict[str, Any], work: int
    ) -> Sequence[SeriesResult]:
        metric_uid = found.spans.keys[0][self._layout.salt_width :][: self._layout.metric_width]
        metric = sub.metric or await self._uids.metrics.get_name(metric_uid)
        columns = _result_columns(sub, query, found, metric, timings)
        if columns is not None:
            return columns
        if isinstance(found.aggregated, JoinedSeries):
            found.aggregated = await self._compute.sized(work, found.aggregated.split)
        out: list[SeriesResult] = []
        for lo in range(0, len(found.groups), AGGREGATE_CHUNK_SERIES):
            hi = lo + AGGREGATE_CHUNK_SERIES
            out += await self._compute.sized(
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
        async with self._timeout():
            found = await self._last.find(query)
        if query.resolve_names:
            found = [await self._last.with_names(p) for p in found]
        return found


# --------------------------------------------------------------------------- helpers


def _result_columns(
    sub: SubQuery, query: TSQuery, found: _Found, metric: str, timings: dict[str, Any]
) -> SeriesColumns | None:
    """The result series as :class:`SeriesColumns` when the groups are of one series
    each, aggregated together (:class:`JoinedSeries`), every one with points and none
    with notes (a dashboard's group-by); else None (:func:`_build_results`)."""
    joined, facts = found.aggregated, found.facts
    if not isinstance(joined, JoinedSeries):
        return None
    members = np.fromiter((m[0] for m in found.groups), np.int64, len(found.groups))
    if not np.asarray(facts.has_points, np.bool_)[members].all():
        return None
    notes = facts.notes
    if any(notes) and any(notes[i] for i in members.tolist()):
        return None
    stats = dict(timings) if query.show_stats else None
    return SeriesColumns(
        sub,
        metric,
        members,
        joined,
        facts.tags,
        facts.tsuids,
        facts.columns,
        stats,
        found.filter_tagks,
    )


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
    facts, aggregated = found.facts, found.aggregated
    assert not isinstance(aggregated, JoinedSeries)  # split by _results
    out = []
    has_points, notes_of = facts.has_points, facts.notes
    for members, dps in zip(found.groups[lo:hi], aggregated[lo:hi], strict=True):
        if len(members) == 1:  # a group of one series (a group-by's usual group)
            with_data = members if has_points[members[0]] else []
            notes = group_annotations(facts, members, query) if notes_of[members[0]] else None
        else:
            with_data = [i for i in members if has_points[i]]
            notes = group_annotations(facts, members, query)
        if not with_data and notes is None:
            continue
        aggregate_tags: list[str] = []
        if len(with_data) == 1:  # its tags (in name order already), none aggregated
            tags = dict(facts.tags[with_data[0]])
        elif facts.columns is not None and len(with_data) >= COLUMN_GROUP_MIN:
            tags, aggregate_tags = column_group_tags(facts.columns, with_data)  # 1,000 summed
        else:
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
                tsuids=LazyRows(len(with_data), _picked(facts.tsuids, with_data)),
                annotations=notes,
                stats=stats,
                filter_tagks=found.filter_tagks,
            )
        )
    return out


def _picked(rows: Sequence[T], picked: list[int]) -> Callable[[int], T]:
    """``rows[picked[r]]`` as a function of ``r`` (a group's TSUIDs built when asked:
    only showTSUIDs writes them)."""
    return lambda r: rows[picked[r]]


def _read_window(query: TSQuery, sub: SubQuery, source: ReadSource) -> tuple[SubQuery, int, int]:
    """The sub-query as ``source`` reads it (a rollup read downsamples the stored rollups
    and reads their table) and its scan window in seconds."""
    spec = sub.downsample_spec
    if source.is_rollup:
        assert spec is not None
        start_s, end_s = source.scan_window_s(query.start_ms, query.end_ms, sub.rate)
        sub = dataclasses.replace(
            sub, downsample_spec=source.engine_spec(spec), rollup_table=source.name
        )
        return sub, start_s, end_s
    start_s, end_s = scan_window_s(query.start_ms, query.end_ms, spec)
    return sub, start_s, end_s


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
