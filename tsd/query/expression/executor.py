"""/api/query/exp: a validated request through the query engine, then the expressions.

The async edge of query/expression/ (OpenTSDB 2.4.1 src/tsd/QueryExecutor.java). Each
metric becomes a sub-query of one TSQuery (the time's aggregator unless the metric names
its own, the time's downsampler as ``<interval>-<aggregator>``, without its fill policy,
which OpenTSDB ignores, and the time's ``rate``); the engine runs them, keeping every
point of the scan window as OpenTSDB's DataPoints do; the tag names of the result series
are resolved back to UIDs (joins key and sort on them); then each output is evaluated
(:mod:`tsd.query.expression.exp`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tsd.errors import BadRequestError, TsdError
from tsd.query.engine import QueryEngine
from tsd.query.expression.exp import (
    ExpInputs,
    ExpressionSpec,
    ExpSeries,
    MetricInput,
    OutputSeries,
    evaluate_expression,
    metric_output,
)
from tsd.query.expression.graphite import GSeries, evaluate_call
from tsd.query.expression.javamap import java_hash_order
from tsd.query.expression.jexl import JexlError, parse_script
from tsd.query.output import SeriesResult
from tsd.query.series import AggregatedSeries
from tsd.query_spec import ExpQuery, GexpCall, GexpMetric, SubQuery, TSQuery
from tsd.uid.service import UidService

__all__ = [
    "ExpAnswer",
    "ExpOutputAnswer",
    "expression_variables",
    "run_exp_query",
    "run_gexp_query",
]


def expression_variables(expr: str) -> list[str]:
    """The JEXL parse of an ``expr`` (Expression.validate): its variables, or OpenTSDB's
    500 for a script JEXL cannot parse."""
    try:
        return parse_script(expr).variables
    except JexlError as exc:
        raise BadRequestError(
            f"net.opentsdb.query.pojo.Expression.validate@1:{exc.column} parsing error in '{expr}'",
            status=500,
        ) from None


@dataclass(slots=True)
class ExpOutputAnswer:
    """One output, ready to serialise."""

    id: str
    alias: str | None
    rows: list[tuple[int, list[float]]]
    series: list[OutputSeries]
    first_timestamp: int
    last_timestamp: int


@dataclass(slots=True)
class ExpAnswer:
    outputs: list[ExpOutputAnswer]
    #: UID -> name, per kind ("metric", "tagk", "tagv"), for every UID in the outputs
    names: dict[str, dict[bytes, str]]


async def run_exp_query(
    engine: QueryEngine,
    uids: UidService,
    query: ExpQuery,
    ts_query: TSQuery,
    position: Mapping[str, int],
) -> ExpAnswer:
    """Run a validated request (QueryExecutor): ``ts_query`` fetches the metrics,
    ``position`` gives each metric id's sub-query index."""
    assert query.metrics is not None
    specs: dict[str, ExpressionSpec] = {}
    for e in query.expressions or ():
        script = parse_script(e.expr or "")
        if not script.variables:
            raise BadRequestError("The expression didn't appear to have any variables", status=500)
        fill = e.fill.value if e.fill is not None else math.nan
        specs[e.id or ""] = ExpressionSpec(
            e.id or "",
            script,
            union=e.operator != "intersection",
            use_query_tags=e.use_query_tags,
            include_agg_tags=e.include_agg_tags,
            fill=fill,
        )
    metric_ids = java_hash_order([m.id or "" for m in query.metrics], len(query.metrics))
    by_id = {m.id: m for m in query.metrics}
    try:
        result = await engine.execute(ts_query)
        by_sub: dict[int, list[SeriesResult]] = {}
        for s in result.series:
            by_sub.setdefault(s.sub.index, []).append(s)
        names: dict[str, dict[bytes, str]] = {"metric": {}, "tagk": {}, "tagv": {}}
        metrics: dict[str, MetricInput] = {}
        for mid in metric_ids:
            found = by_sub.get(position[mid], [])
            series = [await _exp_series(uids, s, names) for s in found if s.metric]
            tagks = (
                found[0].filter_tagks
                if found
                else await _filter_tagks(uids, ts_query.queries[position[mid]])
            )
            m = by_id[mid]
            fill = m.fill.value if m.fill is not None else 0.0
            metrics[mid] = MetricInput(series, frozenset(tagks), fill)
        inputs = ExpInputs(specs, metrics, metric_ids, ts_query.start_ms, ts_query.end_ms)
        outputs = _outputs(query, inputs)
    except TsdError as exc:
        if exc.status == 400 and not isinstance(exc, BadRequestError):
            raise BadRequestError(exc.message, exc.message) from None
        if isinstance(exc, BadRequestError) and exc.status == 400 and not exc.details:
            raise BadRequestError(exc.message, exc.message) from None
        raise
    return ExpAnswer(outputs, names)


async def _filter_tagks(uids: UidService, sub: SubQuery) -> list[bytes]:
    out = []
    for f in sub.filters:
        try:
            out.append(await uids.tagk.get_id(f.tagk))
        except TsdError:
            continue
    return out


async def _exp_series(
    uids: UidService, s: SeriesResult, names: dict[str, dict[bytes, str]]
) -> ExpSeries:
    metric_uid = await uids.metrics.get_id(s.metric)
    names["metric"][metric_uid] = s.metric
    tag_uids: dict[bytes, bytes] = {}
    for k, v in s.tags.items():
        ku, vu = await uids.tagk.get_id(k), await uids.tagv.get_id(v)
        names["tagk"][ku], names["tagv"][vu] = k, v
        tag_uids[ku] = vu
    aggregated = []
    for k in s.aggregate_tags:
        ku = await uids.tagk.get_id(k)
        names["tagk"][ku] = k
        aggregated.append(ku)
    return ExpSeries(
        metric_uid,
        tag_uids,
        sorted(aggregated),
        s.dps.timestamps.tolist(),
        s.dps.values.tolist(),
    )


def _outputs(query: ExpQuery, inputs: ExpInputs) -> list[ExpOutputAnswer]:
    if query.outputs:
        wanted = [(o.id or "", o.alias) for o in query.outputs]
    elif query.expressions:
        wanted = [(e.id or "", None) for e in query.expressions]
    else:
        wanted = [(m.id or "", None) for m in query.metrics or ()]
    out = []
    for oid, alias in wanted:
        if oid in inputs.specs:
            table = evaluate_expression(oid, inputs)
            stamps = [ts for ts, _ in table.rows]
            first = stamps[0] if stamps else 0
            last = stamps[-1] if len(stamps) > 1 else 0
            out.append(ExpOutputAnswer(oid, alias, table.rows, table.series, first, last))
        elif oid in inputs.metrics:
            table, first = metric_output(inputs.metrics[oid].series)
            last = table.rows[-1][0] if table.rows else 0
            out.append(ExpOutputAnswer(oid, alias, table.rows, table.series, first, last))
    return out


# -- /api/query/gexp ------------------------------------------------------------------------


async def run_gexp_query(
    engine: QueryEngine, uids: UidService, ts_query: TSQuery, trees: Sequence[GexpCall]
) -> list[SeriesResult]:
    """The series of every ``exp=`` tree, in order (QueryRpc with expressions).

    A metric query parameter numbered ``i`` reads the results of the ``i``-th sub-query
    of the de-duplicated TSQuery, ``m=`` sub-queries first, as OpenTSDB 2.4.1 does (so
    ``m=`` next to ``exp=`` shifts what the expressions read). Functions see every point
    of the scan window; the answer is trimmed to [start, end].
    """
    if not trees:
        return []
    result = await engine.execute(dataclasses.replace(ts_query, trim_to_range=False))
    per_sub: list[list[GSeries]] = [[] for _ in ts_query.queries]
    for s in result.series:
        if s.metric:
            per_sub[s.sub.index].append(await _gseries(uids, s))
    window = (ts_query.start_ms, ts_query.end_ms)
    out = []
    for tree in trees:
        for g in _evaluate(tree, per_sub, window):
            out.append(_series_result(g, ts_query))
    return out


def _evaluate(
    call: GexpCall, per_sub: list[list[GSeries]], window: tuple[int, int]
) -> list[GSeries]:
    inputs: list[list[GSeries]] = []
    words: list[str] = []
    for p in call.params:
        if isinstance(p, GexpCall):
            inputs.append(_evaluate(p, per_sub, window))
        elif isinstance(p, GexpMetric):
            if p.index >= len(per_sub):
                raise BadRequestError(
                    f"Index {p.index} out of bounds for length {len(per_sub)}",
                    f"Index {p.index} out of bounds for length {len(per_sub)}",
                )
            inputs.append(per_sub[p.index])
        else:
            words.append(p)
    try:
        return evaluate_call(call.name, inputs, words, window)
    except BadRequestError as exc:
        if exc.status == 400 and not exc.details:
            raise BadRequestError(exc.message, exc.message) from None
        raise


async def _gseries(uids: UidService, s: SeriesResult) -> GSeries:
    names: dict[str, dict[bytes, str]] = {"metric": {}, "tagk": {}, "tagv": {}}
    e = await _exp_series(uids, s, names)
    dps = s.dps
    ints: list[int | None] = [None] * len(dps)
    if dps.is_int is not None and dps.int_values is not None:
        ints = [
            int(v) if flag else None
            for v, flag in zip(dps.int_values.tolist(), dps.is_int.tolist(), strict=True)
        ]
    return GSeries(
        base=s,
        metric=s.metric,
        tags=dict(s.tags),
        aggregated=list(s.aggregate_tags),
        timestamps=list(e.timestamps),
        values=list(e.values),
        ints=ints,
        metric_uid=e.metric_uid,
        tag_uids=dict(e.tag_uids),
        aggregated_uids=list(e.aggregated_uids),
        tagk_names=names["tagk"],
        tagv_names=names["tagv"],
    )


def _series_result(g: GSeries, ts_query: TSQuery) -> SeriesResult:
    keep = [ts_query.start_ms <= ts <= ts_query.end_ms for ts in g.timestamps]
    stamps = np.array([t for t, k in zip(g.timestamps, keep, strict=True) if k], dtype=np.int64)
    values = np.array([v for v, k in zip(g.values, keep, strict=True) if k], dtype=np.float64)
    ints = [i for i, k in zip(g.ints, keep, strict=True) if k]
    is_int = np.array([i is not None for i in ints], dtype=np.bool_)
    int_values = np.array([i if i is not None else 0 for i in ints], dtype=np.int64)
    dps = AggregatedSeries(
        stamps,
        values,
        int_values if is_int.any() else None,
        is_int if is_int.any() else None,
    )
    base: SeriesResult = g.base
    sub = ts_query.queries[0] if g.synthetic else base.sub
    return dataclasses.replace(
        base,
        sub=sub,
        metric=g.metric,
        tags=g.tags,
        aggregate_tags=g.aggregated,
        dps=dps,
        tsuids=[] if g.synthetic else base.tsuids,
        annotations=None if g.synthetic else base.annotations,
    )
