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

import math
from collections.abc import Mapping
from dataclasses import dataclass

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
from tsd.query.expression.javamap import java_hash_order
from tsd.query.expression.jexl import JexlError, parse_script
from tsd.query.output import SeriesResult
from tsd.query_model import ExpQuery, SubQuery, TSQuery
from tsd.uid.service import UidService

__all__ = ["ExpAnswer", "ExpOutputAnswer", "expression_variables", "run_exp_query"]


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
