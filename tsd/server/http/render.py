"""Query results rendered as OpenTSDB 2.4's JSON, byte for byte (orjson; run in a worker
thread by the handler, since a big answer is millions of values to format).

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §1.2 "Response" and §1.3;
OpenTSDB 2.4.1 src/tsd/HttpJsonSerializer.java formatQueryAsyncV1 /
formatLastPointQueryV1, src/core/TSSubQuery.java and TagVFilter.java for the ``query``
echo, src/core/IncomingDataPoint.java for last points):

* /api/query answers a JSON array with one object per result series: ``metric``,
  ``tags`` (always an object), ``aggregateTags`` (always an array), ``query`` with
  showQuery, ``tsuids`` (sorted) with showTSUIDs, ``annotations`` (when the group has any;
  notes outside [start, end] are left out, which can leave ``[]``), ``globalAnnotations``
  (when requested and some exist), ``dps`` and ``stats`` with showStats; a trailing
  ``{"statsSummary": ...}`` element with showSummary.
* ``dps`` is an object keyed by the timestamp as a string (seconds, or ms with
  msResolution), ascending; with ``arrays`` a list of ``[ts, value]``. Only points with
  ``start <= ts <= end`` are written. Integers are JSON integers, doubles JSON numbers,
  NaN the string ``"NaN"`` (Jackson quotes non-numeric numbers) or ``null`` under fill
  policy ``null``. Without msResolution several points in one second are written as
  duplicate keys, as OpenTSDB 2.4.1 does.
* Doubles are written by orjson (``1e+16`` where Java writes ``1.0E16``): the same number
  to any JSON reader.
* ``?jsonp=`` is applied by the response middleware, never here.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

import tsd.native as native
from tsd.query.output import LastPoint, QueryResult, SeriesColumns, SeriesParts, SeriesResult
from tsd.query.series import AggregatedSeries
from tsd.query_spec import FillPolicy, Filter, SubQuery, TSQuery

__all__ = [
    "dps_json_python",
    "query_echo",
    "render_last_points",
    "render_query_result",
    "render_series_range",
    "render_summary",
    "subquery_echo",
]

#: the compiled point writer (tsd/server/http/_render.c), None without it (tsd/native.py)
_C: Any = native.load("tsd.server.http._render")


# --------------------------------------------------------------------------- /api/query


def render_query_result(result: QueryResult, *, arrays: bool = False) -> bytes:
    """The /api/query response body."""
    parts = [render_series_range(result, 0, len(result.series), arrays)]
    summary = render_summary(result)
    if summary is not None:
        parts.append(summary)
    return b"[" + b",".join(p for p in parts if p) + b"]"


def render_series_range(result: QueryResult, lo: int, hi: int, arrays: bool = False) -> bytes:
    """The JSON of ``result.series[lo:hi]``, comma-separated, no brackets: with
    :func:`render_summary` an answer can be written piece by piece."""
    every = result.series
    if isinstance(every, SeriesParts):
        pieces = [_render_piece(p, result, arrays) for p in every.pieces(lo, hi)]
        return b",".join(p for p in pieces if p)
    return _render_piece(every[lo:hi], result, arrays)


def _render_piece(series: Sequence[SeriesResult], result: QueryResult, arrays: bool) -> bytes:
    """:func:`render_series_range` of some result series: columns written from their
    columns where :func:`_columns_json` can, else each series as an object."""
    if isinstance(series, SeriesColumns):
        body = _columns_json(series, result, arrays)
        if body is not None:
            return body
        series = list(series)
    dps = _dps_many(series, result.query.ms_resolution, arrays)
    # one orjson pass over every series' object, each with its dps already written
    objects = [_series_object(s, result, d) for s, d in zip(series, dps, strict=True)]
    return orjson.dumps(objects)[1:-1]


#: up to this many series, :func:`_columns_json` writes each tag text (a dashboard's
#: filter of a few series: two numpy calls per tag cost more than the texts)
_FEW_SERIES = 16


def _columns_json(columns: SeriesColumns, result: QueryResult, arrays: bool) -> bytes | None:
    """The objects of :class:`SeriesColumns` (each one series' points, no annotations),
    written as :func:`_series_object` and orjson write them, without an object per
    series: each tag column's ``"name":"value"`` texts written once per distinct value
    and picked per series, the points by the compiled helper in one call, and every
    piece laid side by side by list slices. None where the columns do not cover the
    answer (showQuery, showTSUIDs, showStats, global annotations, tags not by column, a
    fill policy of its own or no compiled helper): the caller then writes objects."""
    query = result.query
    n = len(columns)
    by_column = columns.columns
    if (
        not n
        or _C is None
        or by_column is None
        or query.show_query
        or query.show_tsuids
        or query.show_stats
        or (result.global_annotations and not query.no_annotations)
    ):
        return None
    offsets = columns.offsets
    lo, hi = int(offsets[0]), int(offsets[-1])
    points = columns.points
    part = AggregatedSeries(
        points.timestamps[lo:hi],
        points.values[lo:hi],
        None if points.int_values is None else points.int_values[lo:hi],
        None if points.is_int is None else points.is_int[lo:hi],
    )
    ts = part.timestamps if query.ms_resolution else part.timestamps // 1000
    texts = _value_texts(part, _fill_null_sub(columns.sub))
    counts = np.diff(offsets).astype(np.int64)
    dps = _C.dps_json_many(np.ascontiguousarray(ts, dtype=np.int64), texts, counts, arrays)
    if dps is None:
        return None
    members = columns.members
    tag_texts = []
    for name, (values, inverse) in by_column.items():  # in name order
        key = orjson.dumps(name) + b":"
        if n <= _FEW_SERIES:  # a few series: each text written, no distinct values found
            tag_texts.append([key + orjson.dumps(values[v]) for v in inverse[members].tolist()])
            continue
        used, picked = np.unique(inverse[members], return_inverse=True)
        texts_of = np.array([key + orjson.dumps(values[v]) for v in used.tolist()], dtype=object)
        tag_texts.append(texts_of[picked.reshape(-1)].tolist())
    head = b'{"metric":' + orjson.dumps(columns.metric) + b',"tags":{'
    # per series: head, the tag texts comma-separated, the rest of the object up to its
    # points, the points, its end
    stride = 2 * len(tag_texts) + 3 if tag_texts else 4
    out: list[bytes] = [b""] * (n * stride)
    out[0::stride] = [head] * n
    for k, texts_k in enumerate(tag_texts):
        out[1 + 2 * k :: stride] = texts_k
        if k:
            out[2 * k :: stride] = [b","] * n
    out[stride - 3 :: stride] = [b'},"aggregateTags":[],"dps":'] * n
    out[stride - 2 :: stride] = list(dps)
    out[stride - 1 :: stride] = [b"},"] * n
    return b"".join(out)[:-1]


def render_summary(result: QueryResult) -> bytes | None:
    """The trailing ``statsSummary`` element (None without showSummary)."""
    if not result.query.show_summary:
        return None
    return orjson.dumps({"statsSummary": result.summary or {}})


def _series_object(series: SeriesResult, result: QueryResult, dps: bytes) -> dict[str, Any]:
    """One result series as the object orjson writes, ``dps`` (its points' JSON,
    :func:`_dps_many`) in place."""
    query = result.query
    head: dict[str, Any] = {
        "metric": series.metric,
        "tags": series.tags,
        "aggregateTags": series.aggregate_tags,
    }
    if query.show_query:
        head["query"] = subquery_echo(series.sub, series.filter_tagks)
    if query.show_tsuids:
        head["tsuids"] = sorted(series.tsuids)
    if not query.no_annotations:
        if series.annotations is not None:
            head["annotations"] = series.annotations
        if result.global_annotations:
            head["globalAnnotations"] = result.global_annotations
    head["dps"] = orjson.Fragment(dps)
    if query.show_stats:
        head["stats"] = series.stats or {}
    return head


def _fill_null(series: SeriesResult) -> bool:
    return _fill_null_sub(series.sub)


def _fill_null_sub(sub: SubQuery) -> bool:
    spec = sub.downsample_spec
    return spec is not None and spec.fill_policy is FillPolicy.NULL


#: fewer series than this: each written alone (nothing to gain from joining them)
MANY_SERIES = 8


def _dps_many(series: Sequence[SeriesResult], ms_resolution: bool, arrays: bool) -> list[bytes]:
    """Each series' ``dps`` (:func:`_dps_json`'s bytes), by the compiled helper in one
    call for them all where it is built: a group-by over 10,000 series spent more in the
    orjson pass, NaN check and helper call of each series than in their points. The
    series' points are joined end to end, their value texts written in one orjson pass
    and parted again by the helper. Each series alone (:func:`_dps_json`) is the spec."""
    fills = {_fill_null(s) for s in {id(s.sub): s for s in series}.values()}
    if _C is None or len(series) < MANY_SERIES or len(fills) != 1:
        return [_dps_json(s.dps, ms_resolution, arrays, _fill_null(s)) for s in series]
    joined = _joined([s.dps for s in series])
    ts = joined.timestamps if ms_resolution else joined.timestamps // 1000
    counts = np.fromiter((len(s.dps.timestamps) for s in series), np.int64, len(series))
    values = _value_texts(joined, fills.pop())
    out = _C.dps_json_many(np.ascontiguousarray(ts, dtype=np.int64), values, counts, arrays)
    if out is None:
        return [_dps_json(s.dps, ms_resolution, arrays, _fill_null(s)) for s in series]
    return list(out)


def _joined(parts: Sequence[AggregatedSeries]) -> AggregatedSeries:
    """The points of ``parts`` end to end, as one series (integer points kept as such)."""
    timestamps = np.concatenate([p.timestamps for p in parts])
    values = np.concatenate([p.values for p in parts])
    if all(p.is_int is None or p.int_values is None for p in parts):
        return AggregatedSeries(timestamps, values)
    is_int = np.concatenate(
        [p.is_int if p.is_int is not None else np.zeros(len(p), np.bool_) for p in parts]
    )
    int_values = np.concatenate(
        [p.int_values if p.int_values is not None else np.zeros(len(p), np.int64) for p in parts]
    )
    return AggregatedSeries(timestamps, values, int_values, is_int)


def _dps_json(dps: AggregatedSeries, ms_resolution: bool, arrays: bool, fill_null: bool) -> bytes:
    """``dps`` as an object (or list of pairs); see the module docstring. The points are
    interleaved by the compiled helper (_render.c) where it is built, else by
    :func:`dps_json_python`, its spec."""
    n = len(dps)
    if n == 0:
        return b"[]" if arrays else b"{}"
    ts = dps.timestamps if ms_resolution else dps.timestamps // 1000
    values = _value_texts(dps, fill_null)
    if _C is not None:
        body = _C.dps_json(np.ascontiguousarray(ts, dtype=np.int64), values, arrays)
        if body is not None:
            return bytes(body)
    return dps_json_python(ts, values, arrays)


def dps_json_python(ts: Any, values: bytes, arrays: bool) -> bytes:
    """The ``dps`` of timestamps ``ts`` and their values' JSON texts, comma-separated."""
    texts = values.split(b",")
    stamps = ts.tolist()
    if arrays:
        return (
            b"[" + b",".join(b"[%d,%s]" % pair for pair in zip(stamps, texts, strict=True)) + b"]"
        )
    return b"{" + b",".join(b'"%d":%s' % pair for pair in zip(stamps, texts, strict=True)) + b"}"


def _value_texts(dps: AggregatedSeries, fill_null: bool) -> bytes:
    """Every value's JSON text, comma-separated: integers exact, doubles via orjson, NaN
    quoted or null. No JSON text of a number, null or "NaN" has a comma."""
    nan = np.isnan(dps.values)
    has_ints = dps.is_int is not None and dps.int_values is not None and dps.is_int.any()
    if not has_ints and not nan.any():
        # orjson writes a float64 array's numbers as it writes the same Python floats
        plain = np.ascontiguousarray(dps.values, dtype=np.float64)
        return orjson.dumps(plain, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
    values: list[Any] = dps.values.tolist()
    if nan.any():
        marker = None if fill_null else "NaN"
        for i in np.flatnonzero(nan).tolist():
            values[i] = marker
    if has_ints:
        assert dps.is_int is not None
        assert dps.int_values is not None
        ints = dps.int_values.tolist()
        for i in np.flatnonzero(dps.is_int).tolist():
            values[i] = ints[i]
    return orjson.dumps(values)[1:-1]


def query_echo(query: TSQuery) -> dict[str, Any]:
    """The TSQuery as Jackson writes it (``/api/stats/query``), its getters' order."""
    return {
        "start": query.start,
        "end": query.end,
        "timezone": query.timezone,
        "options": None,
        "padding": query.padding,
        "noAnnotations": query.no_annotations,
        "globalAnnotations": query.global_annotations,
        "showTSUIDs": query.show_tsuids,
        "queries": [subquery_echo(sub) for sub in query.queries],
        "msResolution": query.ms_resolution,
        "showQuery": query.show_query,
        "showStats": query.show_stats,
        "showSummary": query.show_summary,
        "delete": query.delete,
        "useCalendar": query.use_calendar,
    }


def subquery_echo(sub: SubQuery, filter_tagks: Sequence[bytes] = ()) -> dict[str, Any]:
    """The ``query`` object of showQuery: TSSubQuery as Jackson writes it, in its order.

    ``filter_tagks`` are the resolved tag key UIDs of the filters (``filterTagKs``, byte
    arrays written as base64 by Jackson; null without filters).
    """
    rate_options = None
    if sub.rate_options is not None:
        rate_options = {
            "counter": sub.rate_options.counter,
            "counterMax": sub.rate_options.counter_max,
            "resetValue": sub.rate_options.reset_value,
            "dropResets": sub.rate_options.drop_resets,
        }
    tagks = sorted(set(filter_tagks))
    return {
        "aggregator": sub.aggregator,
        "metric": sub.metric or None,
        "tsuids": list(sub.tsuids) or None,
        "downsample": sub.downsample,
        "rate": sub.rate,
        "filters": [_filter_echo(f) for f in sub.filters],
        "percentiles": list(sub.percentiles) or None,
        "index": sub.index,
        "rateOptions": rate_options,
        "filterTagKs": [base64.b64encode(t).decode() for t in tagks] if sub.filters else None,
        "explicitTags": sub.explicit_tags,
        "useFuzzyFilter": True,
        "preAggregate": sub.pre_aggregate,
        "rollupUsage": sub.rollup_usage,
        "rollupTable": sub.rollup_table,
        "showHistogramBuckets": sub.show_histogram_buckets,
        "useMultiGets": True,
        "tags": sub.tags,
        "histogramQuery": sub.is_histogram_query,
    }


def _filter_echo(f: Filter) -> dict[str, Any]:
    return {"tagk": f.tagk, "filter": f.filter, "group_by": f.group_by, "type": f.type}


# --------------------------------------------------------------------------- /api/query/last


def render_last_points(points: Sequence[LastPoint]) -> bytes:
    """The /api/query/last body: IncomingDataPoint objects, null fields left out."""
    items = []
    for p in points:
        item: dict[str, Any] = {}
        if p.metric is not None:
            item["metric"] = p.metric
        item["timestamp"] = p.timestamp_ms
        item["value"] = p.value
        if p.tags is not None:
            item["tags"] = p.tags
        item["tsuid"] = p.tsuid
        items.append(item)
    return orjson.dumps(items)
