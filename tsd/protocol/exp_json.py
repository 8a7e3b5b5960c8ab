"""/api/query/exp request bodies (OpenTSDB 2.4.1 src/query/pojo/*): bind, validate, echo.

Pure. The body binds to :class:`ExpQuery` (Jackson's field binding: unknown fields are
ignored, ids are only checked by ``validate``), then :func:`validate_exp_query` applies
``Query.validate`` in OpenTSDB's order with its messages. OpenTSDB answers those
IllegalArgumentExceptions with a 500 (they escape QueryRpc), so do we.

The expression language belongs to ``query/``: the caller passes ``variables_of`` (the
JEXL parse), which answers an expression's variables or raises the parse error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from tsd.errors import BadRequestError, PastLimit
from tsd.java_text import jackson_double
from tsd.protocol.query_json import bind_filter, dedupe_subqueries, validate_query
from tsd.protocol.timespec import parse_datetime, parse_duration
from tsd.query_spec import (
    AGGREGATOR_NAMES,
    ExpDownsampler,
    ExpExpression,
    ExpFilter,
    ExpMetric,
    ExpOutput,
    ExpQuery,
    ExpTime,
    FillValue,
    Filter,
    SubQuery,
    TSQuery,
)

__all__ = [
    "echo_exp_query",
    "exp_ts_query",
    "parse_exp_json",
    "validate_exp_query",
]

_FILL_NAMES = ("none", "nan", "null", "zero", "scalar")


def invalid(message: str) -> BadRequestError:
    """An IllegalArgumentException that escapes QueryRpc: a 500 with the message."""
    return BadRequestError(message, status=500)


# -- binding ----------------------------------------------------------------------------------


class _Bind(Exception):
    pass


def parse_exp_json(body: bytes | str) -> ExpQuery:
    """Bind a body (JSON.parseToObject); the errors are OpenTSDB's 500s."""
    if not body or not body.strip():
        raise invalid("Incoming data was null or empty")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"com.fasterxml.jackson.core.JsonParseException: {exc}") from None
    try:
        return _query(document)
    except (_Bind, BadRequestError) as exc:
        message = exc.message if isinstance(exc, BadRequestError) else str(exc)
        raise invalid(f"com.fasterxml.jackson.databind.JsonMappingException: {message}") from None


def _obj(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bind(f"Cannot deserialize instance of {what} out of {_kind(value)}")
    return value


def _kind(value: object) -> str:
    return "START_ARRAY token" if isinstance(value, list) else "VALUE token"


def _opt_obj(value: object, what: str) -> dict[str, Any] | None:
    return None if value is None else _obj(value, what)


def _list(value: object, what: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Bind(f"Cannot deserialize instance of java.util.List out of {_kind(value)}")
    return value


def _str(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    raise _Bind("Cannot deserialize instance of java.lang.String out of START_OBJECT token")


def _bool(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int):
        return value != 0
    raise _Bind(f"Cannot deserialize value of type boolean from {value!r}")


def _fill(value: object) -> FillValue | None:
    obj = _opt_obj(value, "net.opentsdb.query.expression.NumericFillPolicy")
    if obj is None:
        return None
    raw_policy = obj.get("policy")
    policy = None
    if raw_policy is not None:
        text = _str(raw_policy) or ""
        if text.lower() not in _FILL_NAMES:
            raise _Bind(f"Unrecognized fill policy: {text}")
        policy = text.lower()
    raw_value = obj.get("value", 0.0)
    try:
        number = float(raw_value) if raw_value is not None else 0.0
    except (TypeError, ValueError):
        raise _Bind(f"Cannot deserialize value of type double from {raw_value!r}") from None
    return fill_value(policy, number)


def fill_value(policy: str | None, value: float) -> FillValue:
    """NumericFillPolicy.validate(): the policy implied by a bare value, or the value
    implied by the policy (IllegalArgumentException on a contradiction)."""
    if policy is None:
        if value == 0:
            return FillValue("zero", 0.0)
        if math.isnan(value):
            return FillValue("nan", math.nan)
        return FillValue("scalar", value)
    if policy in ("none", "nan"):
        if value != 0 and not math.isnan(value):
            raise BadRequestError("The value for NONE and NAN must be NaN")
        return FillValue(policy, math.nan)
    if policy == "zero":
        if value != 0:
            raise BadRequestError("The value for ZERO must be 0")
        return FillValue(policy, 0.0)
    if policy == "null":
        if value != 0 and not math.isnan(value):
            raise BadRequestError("The value for NULL must be 0")
        return FillValue(policy, math.nan)
    return FillValue(policy, value)


def _query(document: object) -> ExpQuery:
    obj = _obj(document, "net.opentsdb.query.pojo.Query")
    time = _opt_obj(obj.get("time"), "net.opentsdb.query.pojo.Timespan")
    filters = _list(obj.get("filters"), "filters")
    metrics = _list(obj.get("metrics"), "metrics")
    expressions = _list(obj.get("expressions"), "expressions")
    outputs = _list(obj.get("outputs"), "outputs")
    return ExpQuery(
        name=_str(obj.get("name")),
        time=_time(time) if time is not None else None,
        filters=None if filters is None else tuple(_filter(f) for f in filters),
        metrics=None if metrics is None else tuple(_metric(m) for m in metrics),
        expressions=None if expressions is None else tuple(_expression(e) for e in expressions),
        outputs=None if outputs is None else tuple(_output(o) for o in outputs),
    )


def _time(obj: dict[str, Any]) -> ExpTime:
    ds = _opt_obj(obj.get("downsampler"), "net.opentsdb.query.pojo.Downsampler")
    return ExpTime(
        start=_str(obj.get("start")),
        end=_str(obj.get("end")),
        timezone=_str(obj.get("timezone")),
        downsampler=None
        if ds is None
        else ExpDownsampler(
            _str(ds.get("interval")), _str(ds.get("aggregator")), _fill(ds.get("fillPolicy"))
        ),
        aggregator=_str(obj.get("aggregator")),
        rate=_bool(obj.get("rate")),
    )


def _filter(value: object) -> ExpFilter:
    obj = _obj(value, "net.opentsdb.query.pojo.Filter")
    tags = _list(obj.get("tags"), "tags")
    return ExpFilter(
        id=_str(obj.get("id")),
        tags=None if tags is None else tuple(bind_filter(t) for t in tags),
        explicit_tags=_bool(obj.get("explicitTags")),
    )


def _metric(value: object) -> ExpMetric:
    obj = _obj(value, "net.opentsdb.query.pojo.Metric")
    return ExpMetric(
        metric=_str(obj.get("metric")),
        id=_str(obj.get("id")),
        filter=_str(obj.get("filter")),
        aggregator=_str(obj.get("aggregator")),
        time_offset=_str(obj.get("timeOffset")),
        fill=_fill(obj.get("fillPolicy")),
    )


def _expression(value: object) -> ExpExpression:
    obj = _obj(value, "net.opentsdb.query.pojo.Expression")
    join = _opt_obj(obj.get("join"), "net.opentsdb.query.pojo.Join")
    operator = "union"
    if join is not None:
        text = _str(join.get("operator"))
        if text is None:
            operator = ""
        elif text.lower() in ("union", "intersection"):
            operator = text.lower()
        else:
            raise _Bind(f"Unrecognized set operator: {text}")
    return ExpExpression(
        id=_str(obj.get("id")),
        expr=_str(obj.get("expr")),
        operator=operator,
        use_query_tags=_bool(join.get("useQueryTags")) if join else False,
        include_agg_tags=_bool(join.get("includeAggTags", True)) if join else True,
        has_join=join is not None,
        fill=_fill(obj.get("fillPolicy")),
    )


def _output(value: object) -> ExpOutput:
    obj = _obj(value, "net.opentsdb.query.pojo.Output")
    return ExpOutput(id=_str(obj.get("id")), alias=_str(obj.get("alias")))


# -- validation (Query.validate and friends) -------------------------------------------------


def validate_id(value: str | None) -> None:
    """Query.validateId: letters and digits only, not a single digit."""
    if not value:
        raise BadRequestError("The ID cannot be null or empty")
    for ch in value:
        if not ch.isalnum():
            raise BadRequestError(f'Invalid id ("{value}"): illegal character: {ch}')
    if len(value) == 1 and value.isdigit():
        raise BadRequestError("The ID cannot be an integer")


def _check_aggregator(name: str | None, required: bool) -> None:
    if not name:
        if required:
            raise BadRequestError("Missing or empty aggregator")
        return
    if name.lower() not in AGGREGATOR_NAMES:
        raise BadRequestError("Invalid aggregator")


def _validate_time(t: ExpTime) -> None:
    if not t.start:
        raise BadRequestError("missing or empty start")
    parse_datetime(t.start, t.timezone)
    if t.end:
        parse_datetime(t.end, t.timezone)
    if t.downsampler is not None:
        if not t.downsampler.interval:
            raise BadRequestError("Missing or empty interval")
        parse_duration(t.downsampler.interval)
        _check_aggregator(t.downsampler.aggregator, required=True)
    _check_aggregator(t.aggregator, required=True)


def _validate_metric(m: ExpMetric) -> None:
    if not m.metric:
        raise BadRequestError("missing or empty metric")
    if not m.id:
        raise BadRequestError("missing or empty id")
    validate_id(m.id)
    if m.time_offset is not None:
        parse_datetime(m.time_offset, None)
    _check_aggregator(m.aggregator, required=False)


def _validate_filter(f: ExpFilter) -> None:
    if not f.id:
        raise BadRequestError("Missing or empty id")
    validate_id(f.id)


def _validate_expression(
    e: ExpExpression, variables_of: Callable[[str], Sequence[str]]
) -> ExpExpression:
    if not e.id:
        raise BadRequestError("missing or empty id")
    validate_id(e.id)
    if not e.expr:
        raise BadRequestError("missing or empty expr")
    variables = tuple(variables_of(e.expr))  # a parse error escapes as it is
    if e.has_join and not e.operator:
        raise BadRequestError("Missing join operator")
    return ExpExpression(
        e.id,
        e.expr,
        e.operator or "union",
        e.use_query_tags,
        e.include_agg_tags,
        True,
        e.fill,
        variables,
    )


def _each(items: Sequence[Any], name: str, check: Callable[[Any], Any]) -> list[Any]:
    """Validatable.validateCollection: "Invalid <name> at index <i>"."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(check(item))
        except BadRequestError as exc:
            if exc.status != 400 or isinstance(exc, PastLimit):
                raise
            raise invalid(f"Invalid {name} at index {i}") from exc
    return out


def validate_exp_query(query: ExpQuery, variables_of: Callable[[str], Sequence[str]]) -> ExpQuery:
    """Query.validate, in its order; the expressions come back with their variables."""
    if query.time is None:
        raise invalid("missing time")
    try:
        _validate_time(query.time)
    except BadRequestError as exc:
        if exc.status != 400:
            raise
        raise invalid("Invalid time") from exc
    if not query.metrics:
        raise invalid("missing or empty metrics")
    ids: set[str] = set()
    for m in query.metrics:
        if m.id in ids:
            raise invalid(f"duplicated metric id: {m.id}")
        ids.add(m.id or "")
    filter_ids: set[str] = set()
    for f in query.filters or ():
        if f.id in filter_ids:
            raise invalid(f"duplicated filter id: {f.id}")
        filter_ids.add(f.id or "")
    for e in query.expressions or ():
        if e.id in ids:
            raise invalid(f"Duplicated variable or expression id: {e.id}")
        ids.add(e.id or "")
    _each(query.metrics, "metric", _validate_metric)
    _each(query.filters or (), "filter", _validate_filter)
    expressions = None
    if query.expressions is not None:
        expressions = tuple(
            _each(query.expressions, "expression", lambda e: _validate_expression(e, variables_of))
        )
    if query.filters is not None:
        for m in query.metrics:
            if m.filter and m.filter not in filter_ids:
                raise invalid(f"unrecognized filter id {m.filter} in metric {m.id}")
    for e in expressions or ():
        for var in e.variables:
            if var not in ids:
                raise invalid(f"Expression [{e.expr}] was missing input {var}")
    return ExpQuery(
        query.name,
        query.time,
        query.filters,
        query.metrics,
        expressions,
        query.outputs,
        frozenset(ids),
    )


# -- the "query" echo (Jackson over the POJOs, nulls included) ------------------------------


def _fill_echo(fill: FillValue | None) -> dict[str, Any] | None:
    if fill is None:
        return None
    return {"policy": fill.policy, "value": jackson_double(fill.value)}


def echo_exp_query(query: ExpQuery) -> dict[str, Any]:
    """The response's ``query`` member."""
    t = query.time
    assert t is not None
    ds = t.downsampler
    return {
        "name": query.name,
        "time": {
            "start": t.start,
            "end": t.end,
            "timezone": t.timezone,
            "downsampler": None
            if ds is None
            else {
                "interval": ds.interval,
                "aggregator": ds.aggregator,
                "fillPolicy": _fill_echo(ds.fill),
            },
            "aggregator": t.aggregator,
            "rate": t.rate,
        },
        "filters": None
        if query.filters is None
        else [
            {
                "id": f.id,
                "tags": None
                if f.tags is None
                else [
                    {"tagk": x.tagk, "filter": x.filter, "group_by": x.group_by, "type": x.type}
                    for x in f.tags
                ],
                "explicitTags": f.explicit_tags,
            }
            for f in query.filters
        ],
        "metrics": [
            {
                "metric": m.metric,
                "id": m.id,
                "filter": m.filter,
                "aggregator": m.aggregator,
                "timeOffset": m.time_offset,
                "fillPolicy": _fill_echo(m.fill),
            }
            for m in query.metrics or ()
        ],
        "expressions": None
        if query.expressions is None
        else [
            {
                "id": e.id,
                "expr": e.expr,
                "join": {
                    "operator": e.operator,
                    "useQueryTags": e.use_query_tags,
                    "includeAggTags": e.include_agg_tags,
                },
                "fillPolicy": _fill_echo(e.fill),
            }
            for e in query.expressions
        ],
        "outputs": None
        if query.outputs is None
        else [{"id": o.id, "alias": o.alias} for o in query.outputs],
    }


# -- the TSQuery that fetches the metrics (QueryExecutor's constructor) ---------------------


def exp_ts_query(
    query: ExpQuery, *, default_timezone: str = "UTC"
) -> tuple[TSQuery, dict[str, int]]:
    """The data query of a validated request, and each metric id's sub-query index.

    A metric's sub-query uses the time's aggregator unless it names its own, the time's
    downsampler as ``<interval>-<aggregator>`` (its fill policy is ignored, as OpenTSDB
    ignores it), the time's ``rate`` and its filter's tags. Equal sub-queries are run
    once and their results handed to every metric id that asked (OpenTSDB matches them
    by equality). The whole TSQuery keeps every point of its scan window, as OpenTSDB's
    DataPoints do.
    """
    time = query.time
    assert time is not None
    filters = {f.id: f for f in query.filters or ()}
    subs: dict[str, SubQuery] = {}
    for m in query.metrics or ():
        tags: tuple[Filter, ...] = ()
        explicit = False
        if m.filter:
            if query.filters is None:
                raise invalid(f"No filter defined: {m.filter}")
            f = filters.get(m.filter)
            if f is not None:
                tags, explicit = f.tags or (), f.explicit_tags
        downsample = None
        if time.downsampler is not None:
            downsample = f"{time.downsampler.interval}-{time.downsampler.aggregator}"
        subs[m.id or ""] = SubQuery(
            aggregator=m.aggregator or time.aggregator or "",
            metric=m.metric or "",
            downsample=downsample,
            rate=time.rate,
            filters=tags,
            explicit_tags=explicit,
        )
    try:
        ts_query = validate_query(
            {"start": time.start, "end": time.end, "timezone": time.timezone},
            list(subs.values()),
            default_timezone=default_timezone,
        )
    except BadRequestError as exc:  # TSQuery.validateAndSetQuery, in the constructor
        raise invalid(exc.message) from None
    positions = {mid: _position(ts_query.queries, sub) for mid, sub in subs.items()}
    return dataclasses.replace(ts_query, trim_to_range=False), positions


def _position(queries: Sequence[SubQuery], sub: SubQuery) -> int:
    for q in queries:
        bare = dataclasses.replace(q, downsample_spec=None, index=0)
        if len(dedupe_subqueries([bare, sub])) == 1:
            return q.index
    return -1
