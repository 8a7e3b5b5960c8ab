"""/api/query requests, POST JSON and GET query string, -> a validated TSQuery. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §1.2; OpenTSDB
src/tsd/QueryRpc.java ``parseQuery``, src/tsd/HttpJsonSerializer.java ``parseQueryV1``,
src/core/TSQuery.java and TSSubQuery.java ``validateAndSetQuery``):

* POST: the body is a JSON object bound like Jackson binds OpenTSDB's POJOs: unknown keys
  are ignored, ``null`` means "unset", booleans may be strings (``"true"``) or numbers,
  string fields accept numbers (``"start": 1700000000``), and a sub-query's ``tags`` and
  ``filters`` are applied in key order, so the later one wins. Binding errors answer
  400 "Unable to parse the given JSON" with the cause in ``details``.
* GET: ``start`` (required), ``end``, repeatable ``tsuid=`` then ``m=`` (see m_syntax),
  and presence-only flags. ``timezone`` and ``useCalendar`` cannot be set from a GET.
* Both: identical sub-queries are collapsed (first wins), then the query is validated
  in OpenTSDB's order and each sub-query gets its ``index``; validation errors answer
  400 with OpenTSDB's message.

tsd deviations: a malformed ``m=`` answers 400 (OpenTSDB: 500), and ``counterMax`` /
``resetValue`` beyond a Java long are clamped instead of failing the whole request
(Grafana sends 2^64 for 64-bit counters).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import orjson

from tsd.errors import BadRequestError, PastLimit
from tsd.java_text import jackson_text, java_float_to_string
from tsd.protocol.m_syntax import (
    add_group_by_filter,
    filter_from_tag_value,
    filter_identity,
    make_filter,
    parse_downsample,
    parse_m_subquery,
    parse_tsuid_subquery,
)
from tsd.protocol.timespec import is_known_timezone, now_ms, parse_datetime
from tsd.query_spec import (
    AGGREGATOR_INTERPOLATION,
    Filter,
    OutputOptions,
    RateOptions,
    SubQuery,
    TSQuery,
    parse_rollup_usage,
)

_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
_PARSE_ERROR = "Unable to parse the given JSON"

#: TSQuery JSON keys (Jackson property names) -> TSQuery boolean fields.
_QUERY_FLAGS = {
    "useCalendar": "use_calendar",
    "noAnnotations": "no_annotations",
    "globalAnnotations": "global_annotations",
    "showTSUIDs": "show_tsuids",
    "msResolution": "ms_resolution",
    "showQuery": "show_query",
    "showStats": "show_stats",
    "showSummary": "show_summary",
    "delete": "delete",
    "padding": "padding",
    "overrideByteLimit": "override_byte_limit",
    "overrideDataPointLimit": "override_data_point_limit",
}
#: GET flags (presence only) -> TSQuery boolean fields.
_PARAM_FLAGS = {
    "padding": "padding",
    "no_annotations": "no_annotations",
    "global_annotations": "global_annotations",
    "show_tsuids": "show_tsuids",
    "ms": "ms_resolution",
    "show_query": "show_query",
    "show_stats": "show_stats",
    "show_summary": "show_summary",
}


class _BindError(Exception):
    """A value of the wrong shape while binding JSON (Jackson's JsonMappingException)."""


# --------------------------------------------------------------------------- entry points


def parse_query_json(
    body: bytes | str,
    *,
    now: int | None = None,
    default_timezone: str = "UTC",
) -> TSQuery:
    """A POST /api/query body -> a validated TSQuery.

    ``default_timezone`` reads absolute dates when the body gives no ``timezone``
    (OpenTSDB: the JVM default); ``now`` defaults to the wall clock.
    """
    if not body or not body.strip():
        raise BadRequestError(
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(_PARSE_ERROR, str(exc)) from None
    try:
        fields, subs = _bind_query(document)
    except _BindError as exc:
        raise BadRequestError(_PARSE_ERROR, str(exc)) from None
    except PastLimit:
        raise  # tsd's own limit: its message, not the binding error's
    except BadRequestError as exc:
        raise BadRequestError(_PARSE_ERROR, exc.message) from None
    return validate_query(fields, subs, now=now, default_timezone=default_timezone)


def parse_query_params(
    params: Mapping[str, Sequence[str]] | _MultiMapping,
    *,
    now: int | None = None,
    default_timezone: str = "UTC",
) -> TSQuery:
    """GET /api/query parameters -> a validated TSQuery.

    ``params`` maps each name to *all* its values (``{"m": ["sum:a", "sum:b"]}``), or is
    a multidict with ``getall`` (aiohttp's ``request.query``), so repeated ``m=`` and
    ``tsuid=`` all count.
    """
    params = _as_lists(params)
    start = _last(params, "start")
    if not start:
        raise BadRequestError("Missing parameter <code>start</code>")
    fields: dict[str, Any] = {"start": start, "end": _last(params, "end")}
    for name, attr in _PARAM_FLAGS.items():
        if name in params:
            fields[attr] = True
    subs = [parse_tsuid_subquery(q) for q in params.get("tsuid", ())]
    subs += [_parsed_m(q) for q in params.get("m", ())]
    if not subs:
        raise BadRequestError("Missing sub queries")
    return validate_query(fields, subs, now=now, default_timezone=default_timezone)


#: ``m=`` texts up to this length are parsed once and kept (a dashboard asks the same few
#: again and again); a longer one (a filter of thousands of literals) is parsed each time,
#: so the cache holds at most ``PARSED_CACHE * PARSED_TEXT_MAX`` characters
PARSED_TEXT_MAX = 1024
PARSED_CACHE = 512


def _parsed_m(text: str) -> SubQuery:
    """:func:`parse_m_subquery`, from :func:`_cached_m` when ``text`` is short (a
    SubQuery is a frozen value: one object serves every request; errors are not cached)."""
    if len(text) > PARSED_TEXT_MAX:
        return parse_m_subquery(text)
    return _cached_m(text)


_cached_m = functools.lru_cache(maxsize=PARSED_CACHE)(parse_m_subquery)


def parse_output_options(
    params: Mapping[str, Sequence[str]] | _MultiMapping,
) -> OutputOptions:
    """``arrays`` (presence), read from the query string for both GET and POST."""
    return OutputOptions(arrays="arrays" in _as_lists(params))


class _MultiMapping(Protocol):
    """What tsd needs of a multidict (aiohttp's ``MultiDictProxy``)."""

    def keys(self) -> Iterable[str]: ...

    def getall(self, key: str) -> list[str]: ...


def _as_lists(
    params: Mapping[str, Sequence[str]] | _MultiMapping,
) -> Mapping[str, Sequence[str]]:
    getall = getattr(params, "getall", None)
    if getall is None:
        assert isinstance(params, Mapping)
        return params
    return {key: getall(key) for key in set(params.keys())}


def _last(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


# --------------------------------------------------------------------------- validation


def validate_query(
    fields: Mapping[str, Any],
    subs: Sequence[SubQuery],
    *,
    now: int | None = None,
    default_timezone: str = "UTC",
) -> TSQuery:
    """TSQuery.validateAndSetQuery over de-duplicated sub-queries.

    ``fields`` holds ``start``, ``end``, ``timezone`` and TSQuery's boolean attributes.
    """
    subs = dedupe_subqueries(subs)
    start: str | None = fields.get("start")
    end: str | None = fields.get("end")
    timezone: str | None = fields.get("timezone")
    try:
        if not start:
            raise BadRequestError("Missing start time")
        current = now_ms() if now is None else now
        start_ms = parse_datetime(start, timezone, now=current, default_timezone=default_timezone)
        end_ms = current
        if end:
            end_ms = parse_datetime(end, timezone, now=current, default_timezone=default_timezone)
        if end_ms <= start_ms:
            raise BadRequestError(
                f"End time [{end_ms}] must be greater than the start time [{start_ms}]"
            )
        if not subs:
            raise BadRequestError("Missing queries")
        use_calendar = bool(fields.get("use_calendar", False))
        validated = tuple(_validated(sub, i, timezone, use_calendar) for i, sub in enumerate(subs))
    except BadRequestError as exc:
        raise BadRequestError(exc.message, describe_query(start, end, subs)) from None
    flags = {k: v for k, v in fields.items() if k not in ("start", "end", "timezone")}
    return TSQuery(
        start=start,
        end=end,
        start_ms=start_ms,
        end_ms=end_ms,
        queries=validated,
        timezone=timezone,
        **flags,
    )


def _validated(sub: SubQuery, index: int, timezone: str | None, use_calendar: bool) -> SubQuery:
    """:func:`_validate_subquery`, kept for a sub-query of short filters (a frozen value,
    the answer the same for the same arguments; errors are not kept): the downsample is
    parsed once per dashboard query, not per request. A sub-query of long filters (a
    POST of thousands of literals) is validated each time, so the cache stays small."""
    size = sum(len(f.filter) for f in sub.filters) + sum(map(len, sub.tsuids))
    if size + len(sub.metric) > PARSED_TEXT_MAX:
        return _validate_subquery(sub, index, timezone, use_calendar)
    return _cached_validation(sub, index, timezone, use_calendar)


def _validate_subquery(
    sub: SubQuery, index: int, timezone: str | None, use_calendar: bool
) -> SubQuery:
    if not sub.aggregator:
        raise BadRequestError("Missing the aggregation function")
    if sub.aggregator not in AGGREGATOR_INTERPOLATION:
        raise BadRequestError(f"No such aggregation function: {sub.aggregator}")
    if not sub.tsuids and not sub.metric:
        raise BadRequestError("Missing the metric or tsuids, provide at least one")
    spec = parse_downsample(sub.downsample) if sub.downsample else None
    if spec is not None:
        if timezone:
            if not is_known_timezone(timezone):
                raise BadRequestError("The timezone specification could not be found")
            spec = dataclasses.replace(spec, timezone=timezone)
        if use_calendar:
            spec = dataclasses.replace(spec, use_calendar=True)
        if spec.use_calendar and not spec.run_all and not spec.calendar_unit:
            # OpenTSDB fails later with a NumberFormatException (a 500).
            raise BadRequestError(f"Invalid calendar downsampling interval: {spec.spec}")
    if sub.is_histogram_query:  # TSSubQuery.checkHistogramQuery
        if sub.aggregator not in ("none", "sum"):
            raise BadRequestError(
                "Only NONE or SUM aggregation function supported for histogram query"
            )
        if spec is not None and spec.spec.split("-")[1:2] != ["sum"]:
            raise BadRequestError("Only SUM downsampling aggregation supported for histogram query")
        for p in sub.percentiles:
            if not 0 <= p <= 100:
                raise BadRequestError(f"Invalid percentile parameters: {java_float_to_string(p)}")
    return dataclasses.replace(sub, downsample_spec=spec, index=index)


_cached_validation = functools.lru_cache(maxsize=PARSED_CACHE)(_validate_subquery)


def dedupe_subqueries(subs: Sequence[SubQuery]) -> list[SubQuery]:
    """Drop sub-queries equal (as TSSubQuery.equals sees it) to an earlier one."""
    seen: set[tuple[object, ...]] = set()
    unique: list[SubQuery] = []
    for sub in subs:
        key = (
            sub.aggregator,
            sub.metric,
            sub.tsuids,
            sub.downsample,
            sub.rate,
            sub.rate_options,
            tuple(filter_identity(f) for f in sub.filters),
            sub.explicit_tags,
        )
        if key not in seen:
            seen.add(key)
            unique.append(sub)
    return unique


def describe_query(start: str | None, end: str | None, subs: Sequence[SubQuery]) -> str:
    """A one-line description of the query for error ``details`` (OpenTSDB puts the
    query's toString there)."""
    parts = []
    for sub in subs:
        filters = ", ".join(
            f"filter_name={f.type}, tagk={f.tagk}, group_by={str(f.group_by).lower()}"
            for f in sub.filters
        )
        parts.append(
            f"TSSubQuery(metric={sub.metric}, filters=[{filters}], tsuids=[{', '.join(sub.tsuids)}]"
            f", agg={sub.aggregator}, downsample={sub.downsample}, rate={str(sub.rate).lower()})"
        )
    return f"TSQuery(start_time={start}, end_time={end}, subQueries[{', '.join(parts)}])"


# --------------------------------------------------------------------------- JSON binding


def _bind_query(document: object) -> tuple[dict[str, Any], list[SubQuery]]:
    obj = _as_object(document, "TSQuery")
    fields: dict[str, Any] = {}
    subs: list[SubQuery] = []
    for key, value in obj.items():
        if key in ("start", "end", "timezone"):
            fields[key] = _as_str(value, key)
        elif key in _QUERY_FLAGS:
            fields[_QUERY_FLAGS[key]] = _as_bool(value, key)
        elif key == "queries":
            subs = [_bind_subquery(item) for item in _as_list(value, key)]
    return fields, subs


def _bind_subquery(document: object) -> SubQuery:
    obj = _as_object(document, "TSSubQuery")
    values: dict[str, Any] = {}
    filters: list[Filter] = []
    for key, value in obj.items():
        binder = _SUBQUERY_BINDERS.get(key)
        if binder is not None:
            values[binder[0]] = binder[1](value, key)
        elif key == "filters":
            filters = [_bind_filter(item) for item in _as_list(value, key)]
        elif key == "tags":
            filters = _bind_tags(value)
    return SubQuery(
        aggregator=values.get("aggregator") or "",
        metric=values.get("metric") or "",
        tsuids=values.get("tsuids") or (),
        downsample=values.get("downsample"),
        rate=values.get("rate", False),
        rate_options=values.get("rate_options"),
        filters=tuple(filters),
        explicit_tags=values.get("explicit_tags", False),
        pre_aggregate=values.get("pre_aggregate", False),
        rollup_usage=values.get("rollup_usage"),
        percentiles=values.get("percentiles", ()),
        show_histogram_buckets=values.get("show_histogram_buckets", False),
    )


def _bind_filter(document: object) -> Filter:
    obj = _as_object(document, "TagVFilter")
    group_by = False
    for key in ("groupBy", "group_by"):
        if key in obj:
            group_by = _as_bool(obj[key], key)
    return make_filter(
        _as_str(obj.get("type"), "type") or "",
        _as_str(obj.get("tagk"), "tagk") or "",
        _as_str(obj.get("filter"), "filter") or "",
        group_by,
    )


#: One tag value filter object, as /api/query/exp's filters carry them too.
bind_filter = _bind_filter


def _bind_tags(value: object) -> list[Filter]:
    filters: list[Filter] = []
    if value is None:
        return filters
    for tagk, tagv in _as_object(value, "tags").items():
        add_group_by_filter(filters, filter_from_tag_value(tagk, _as_str(tagv, tagk) or "", True))
    return filters


def _bind_rate_options(value: object, name: str) -> RateOptions | None:
    if value is None:
        return None
    obj = _as_object(value, name)
    options = RateOptions()
    for key, item in obj.items():
        if key in ("counter", "isCounter"):
            options = dataclasses.replace(options, counter=_as_bool(item, key))
        elif key == "counterMax":
            options = dataclasses.replace(options, counter_max=_as_long(item, key))
        elif key == "resetValue":
            options = dataclasses.replace(options, reset_value=_as_long(item, key))
        elif key == "dropResets":
            options = dataclasses.replace(options, drop_resets=_as_bool(item, key))
    return options


def _as_object(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BindError(f"Cannot deserialize {name} from {_kind(value)}")
    return value


def _as_list(value: object, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _BindError(f"Cannot deserialize '{name}' from {_kind(value)}")
    return value


def _as_str(value: object, name: str) -> str | None:
    if value is None:
        return None
    try:
        return jackson_text(value)
    except TypeError:
        raise _BindError(f"Cannot deserialize '{name}' as a string from {_kind(value)}") from None


def _as_tsuids(value: object, name: str) -> tuple[str, ...]:
    return tuple(_as_str(v, name) or "" for v in _as_list(value, name))


def _as_bool(value: object, name: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false", "", "null"):
            return text == "true"
    raise _BindError(f"Cannot deserialize '{name}' as a boolean from {value!r}")


def _as_long(value: object, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise _BindError(f"Cannot deserialize '{name}' as a long from a boolean")
    if isinstance(value, float):
        if math.isnan(value):
            raise _BindError(f"Cannot deserialize '{name}' as a long from NaN")
        if math.isinf(value):
            return _LONG_MAX if value > 0 else _LONG_MIN
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value.strip() or "0")
        except ValueError:
            raise _BindError(f"Cannot deserialize '{name}' as a long from {value!r}") from None
    if not isinstance(value, int):
        raise _BindError(f"Cannot deserialize '{name}' as a long from {_kind(value)}")
    return max(_LONG_MIN, min(_LONG_MAX, value))


def _as_percentiles(value: object, name: str) -> tuple[float, ...]:
    """A List<Float> (numbers or numeric strings; null: none)."""
    if value is None:
        return ()
    out = []
    for item in _as_list(value, name):
        try:
            out.append(float(item))
        except (TypeError, ValueError):
            raise _BindError(f"Cannot deserialize '{name}' as a float from {_kind(item)}") from None
    return tuple(out)


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)


_Binder = tuple[str, Callable[[Any, str], Any]]
_SUBQUERY_BINDERS: dict[str, _Binder] = {
    "aggregator": ("aggregator", _as_str),
    "metric": ("metric", _as_str),
    "tsuids": ("tsuids", _as_tsuids),
    "downsample": ("downsample", _as_str),
    "rate": ("rate", _as_bool),
    "rateOptions": ("rate_options", _bind_rate_options),
    "explicitTags": ("explicit_tags", _as_bool),
    "preAggregate": ("pre_aggregate", _as_bool),
    "percentiles": ("percentiles", lambda value, key: _as_percentiles(value, key)),
    "showHistogramBuckets": ("show_histogram_buckets", _as_bool),
    "rollupUsage": ("rollup_usage", lambda value, key: parse_rollup_usage(_as_str(value, key))),
}
