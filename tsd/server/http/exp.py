"""/api/query/exp (QueryRpc.handleExpressionQuery, QueryExecutor's serializer) and
/api/query/gexp (QueryRpc.handleQuery with expressions).

Any method: the body is bound and validated (tsd.protocol.exp_json), run
(tsd.query.expression.executor) and written as OpenTSDB 2.4.1 writes it: per output
``dps`` rows ``[ts, v1, v2...]`` (values as doubles, NaN quoted), ``dpsMeta`` and, when
it has series, ``meta`` (the first entry names the timestamp column; each series lists
the metrics of the first series, its tags in Java HashMap order and its aggregated tags),
then the request echoed as ``query``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

from tsd.errors import BadRequestError
from tsd.java_text import jackson_double
from tsd.protocol.exp_json import echo_exp_query, exp_ts_query, parse_exp_json, validate_exp_query
from tsd.protocol.gexp import parse_gexp
from tsd.protocol.query_json import parse_output_options, parse_query_json, parse_query_params
from tsd.query.engine import QueryEngine
from tsd.query.expression.executor import (
    ExpAnswer,
    ExpOutputAnswer,
    expression_variables,
    run_exp_query,
    run_gexp_query,
)
from tsd.query.expression.exp import OutputSeries
from tsd.query.expression.javamap import java_hash_order
from tsd.query.output import QueryResult
from tsd.query_spec import ExpQuery
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.render import render_query_result
from tsd.uid.service import UidService

__all__ = ["answer_gexp", "handle_exp", "handle_gexp", "render_exp_answer"]

LONG_MAX = 2**63 - 1


async def handle_exp(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    body = await request.read()
    # read in a worker thread: an expression of up to 10,000 characters takes tens of ms
    query = await asyncio.to_thread(_read_exp_query, body)
    timezone = services.config.core.timezone or "UTC"
    ts_query, positions = exp_ts_query(query, default_timezone=timezone)
    answer = await run_exp_query(services.engine, services.uids, query, ts_query, positions)
    return json_response(render_exp_answer(query, answer))


def _read_exp_query(body: bytes) -> ExpQuery:
    return validate_exp_query(parse_exp_json(body), expression_variables)


async def handle_gexp(request: web.Request) -> web.StreamResponse:
    """/api/query/gexp: a GET /api/query whose ``exp=`` expressions are the answer."""
    services = request.app[SERVICES]
    timezone = services.config.core.timezone or "UTC"
    if request.method == "POST":
        # QueryRpc runs a POST body's query without expressions, then iterates them (2.4.1).
        query = parse_query_json(await request.read(), default_timezone=timezone)
        await services.engine.execute(query)
        raise BadRequestError(_NULL_EXPRESSIONS, _NULL_EXPRESSIONS)
    params = {key: request.query.getall(key) for key in request.query}
    result = await answer_gexp(services.engine, services.uids, params, timezone)
    options = parse_output_options(request.query)
    return json_response(render_query_result(result, arrays=options.arrays))


async def answer_gexp(
    engine: QueryEngine,
    uids: UidService,
    params: Mapping[str, Sequence[str]],
    timezone: str = "UTC",
    *,
    now: int | None = None,
) -> QueryResult:
    """The result of a gexp query string: its ``exp=`` metric queries become ``m=``
    sub-queries after the given ones (QueryRpc.parseQuery)."""
    fields = {key: list(values) for key, values in params.items()}
    trees, metric_queries = parse_gexp(fields.pop("exp", []))
    fields["m"] = fields.get("m", []) + metric_queries
    query = parse_query_params(fields, default_timezone=timezone, now=now)
    return QueryResult(query, await run_gexp_query(engine, uids, query, trees))


_NULL_EXPRESSIONS = 'Cannot invoke "java.util.List.size()" because "this.val$expressions" is null'


def render_exp_answer(query: ExpQuery, answer: ExpAnswer) -> bytes:
    """The response body: the outputs, then the request echoed."""
    body = {"outputs": [_output(o, answer) for o in answer.outputs], "query": echo_exp_query(query)}
    return orjson.dumps(body)


def _output(out: ExpOutputAnswer, answer: ExpAnswer) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": out.id}
    if out.alias is not None:
        doc["alias"] = out.alias
    doc["dps"] = [[ts, *(jackson_double(v) for v in values)] for ts, values in out.rows]
    doc["dpsMeta"] = {
        "firstTimestamp": out.first_timestamp,
        "lastTimestamp": out.last_timestamp,
        "setCount": len(out.rows),
        "series": len(out.series),
    }
    if out.series:
        metrics = sorted(answer.names["metric"][u] for u in out.series[0].metric_uids)
        doc["meta"] = [{"index": 0, "metrics": ["timestamp"]}] + [
            _series_meta(i, s, metrics, answer) for i, s in enumerate(out.series)
        ]
    return doc


def _series_meta(
    index: int, series: OutputSeries, metrics: list[str], answer: ExpAnswer
) -> dict[str, Any]:
    tags = {answer.names["tagk"][k]: answer.names["tagv"][v] for k, v in series.tag_uids.items()}
    return {
        "index": index + 1,
        "metrics": metrics,
        "commonTags": {k: tags[k] for k in java_hash_order(sorted(tags))},
        "aggregatedTags": [answer.names["tagk"][k] for k in sorted(series.aggregated_uids)],
    }
