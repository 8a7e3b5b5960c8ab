"""The Graphite-style functions of /api/query/gexp (OpenTSDB 2.4.1
src/query/expression/ExpressionFactory.java and the classes it registers). Pure.

2.4.1 registers ``alias``, ``scale``, ``absolute``, ``movingAverage``, ``highestCurrent``,
``highestMax``, ``shift`` / ``timeShift``, ``divideSeries`` / ``divide``, ``sumSeries`` /
``sum``, ``diffSeries`` / ``difference``, ``multiplySeries`` / ``multiply``
(``firstDiff`` came later). Their 2.4.1 behaviour, quirks kept:

* ``alias(x, template...)``: the parameters joined by ``,`` name the series, ``@tagk`` is
  replaced by the series' tag value; tags and aggregated tags go; values become their
  absolute value.
* ``scale(x, factor)``: integers stay integers when the factor is a whole number.
* ``shift`` / ``timeShift(x, 'Nunit')`` reads its unit with the closing quote, so every
  unit is unknown ("unknown time unit=hr'").
* ``movingAverage(x, n | 'Nunit')``: over the points in [start, end], as doubles; 0 until
  the window is full; a time window skips the first point.
* ``highestCurrent`` / ``highestMax(x, n)``: the n series with the highest last / maximum
  value in [start, end].
* ``sumSeries`` etc.: 2 to 26 arguments joined by ``+ - * /`` as an /api/query/exp union
  (no aggregated tags in the key); each output series walks its inputs' points pairwise,
  so inputs of different lengths fail ("No more elements").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tsd.errors import BadRequestError
from tsd.query.expression.exp import ExpressionIterator, ExpressionSpec, ExpSeries, TimeSyncedSeries
from tsd.query.expression.jexl import parse_script

__all__ = ["FUNCTIONS", "GSeries", "evaluate_call"]

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class GSeries:
    """A DataPoints: identity plus points; ``ints[i]`` is the long value of an integer
    point, None for a double."""

    base: Any  #: the SeriesResult it derives from (sub-query, tsuids, annotations)
    metric: str
    tags: dict[str, str]
    aggregated: list[str]
    timestamps: list[int]
    values: list[float]
    ints: list[int | None]
    metric_uid: bytes = b""
    tag_uids: dict[bytes, bytes] = field(default_factory=dict)
    aggregated_uids: list[bytes] = field(default_factory=list)
    #: UID -> name of its tag keys and of its tag values
    tagk_names: dict[bytes, str] = field(default_factory=dict)
    tagv_names: dict[bytes, str] = field(default_factory=dict)
    #: a series computed from several (no tsuids, no annotations)
    synthetic: bool = False


def _with_points(s: GSeries, points: Sequence[tuple[int, float, int | None]]) -> GSeries:
    return replace(
        s,
        timestamps=[p[0] for p in points],
        values=[p[1] for p in points],
        ints=[p[2] for p in points],
    )


def _each(inputs: list[list[GSeries]], fn: Callable[[GSeries], GSeries]) -> list[GSeries]:
    return [fn(s) for group in inputs for s in group]


def _scale(
    inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
) -> list[GSeries]:
    if not params:
        raise BadRequestError("Missing scaling factor")
    text = params[0]
    if not text or any(c not in "-0123456789." for c in text):
        raise BadRequestError("Unparseable scale factor value: 0.0")
    try:
        factor = float(text)
    except ValueError:
        raise BadRequestError("Invalid parameter, must be an integer or floating point") from None
    whole = factor == math.floor(factor) and not math.isinf(factor)

    def scale(s: GSeries) -> GSeries:
        points: list[tuple[int, float, int | None]] = []
        for ts, v, i in zip(s.timestamps, s.values, s.ints, strict=True):
            if i is not None and whole:
                n = _wrap(int(factor) * i)
                points.append((ts, float(n), n))
            else:
                points.append((ts, factor * v, None))
        return _with_points(s, points)

    return _each(inputs, scale)


def _wrap(n: int) -> int:
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >= 1 << 63 else n


def _absolute(
    inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
) -> list[GSeries]:
    return _each(inputs, _abs)


def _abs(s: GSeries) -> GSeries:
    points = [
        (ts, abs(v), _wrap(abs(i)) if i is not None else None)
        for ts, v, i in zip(s.timestamps, s.values, s.ints, strict=True)
    ]
    return _with_points(s, points)


def _alias(
    inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
) -> list[GSeries]:
    if not params:
        raise BadRequestError("Missing the alias")
    template = ",".join(params)

    def alias(s: GSeries) -> GSeries:
        name = template
        if "@" in name and s.tag_uids:
            for k, v in s.tags.items():
                name = name.replace("@" + k, v)
        return replace(_abs(s), metric=name, tags={}, aggregated=[])

    return _each(inputs, alias)


def _time_shift(
    inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
) -> list[GSeries]:
    if not params:
        raise BadRequestError("Need amount of timeshift to perform timeshift")
    param = params[0].strip()
    if not (param.startswith("'") and param.endswith("'")):
        raise BadRequestError("Invalid timeshift parameter: eg '10min'")
    digits = _digits_after_quote(param)
    if digits == 0:
        raise BadRequestError(f"Invalid Parameter: {param}")
    unit = param[digits + 1 :].strip()  # the closing quote included, as in 2.4.1
    units = {"sec": 1000, "min": 60000, "hr": 3600000, "day": 86400000, "days": 86400000}
    units |= {"week": 604800000, "weeks": 604800000}
    if unit not in units:
        raise BadRequestError(f"unknown time unit={unit}")
    shift = int(param[1 : digits + 1]) * units[unit]  # never reached with 2.4.1's parse

    def move(s: GSeries) -> GSeries:
        if any(i is None for i in s.ints):
            raise BadRequestError("Not a long")
        return _with_points(
            s, [(ts + shift, v, i) for ts, v, i in zip(s.timestamps, s.values, s.ints, strict=True)]
        )

    return [move(s) for s in inputs[0]] if inputs else []


def _digits_after_quote(param: str) -> int:
    """How many digits follow the opening quote of a ``'<n><unit>'`` parameter."""
    digits = 0
    while 1 + digits < len(param) and param[1 + digits].isdigit():
        digits += 1
    return digits


def _window(param: str) -> tuple[int, bool]:
    """movingAverage's window: a count, or a quoted time (ms)."""
    if param.isdigit():
        return int(param), False
    if not (param.startswith("'") and param.endswith("'")):
        raise BadRequestError(f"Unparseable window size: {param}")
    digits = _digits_after_quote(param)
    if digits < 1:
        raise BadRequestError(f"Invalid moving window parameter: {param}")
    unit = param[digits + 1 : -1]
    units = {"day": 86400000, "d": 86400000, "hr": 3600000, "hour": 3600000, "h": 3600000}
    units |= {"min": 60000, "m": 60000, "sec": 1000, "s": 1000}
    if unit not in units:
        raise BadRequestError(f"Unknown time unit={unit} in window={param}")
    return int(param[1 : digits + 1]) * units[unit], True


def _moving_average(
    inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
) -> list[GSeries]:
    if not params or not params[0]:
        raise BadRequestError("Missing moving average window size")
    condition, timed = _window(params[0].strip())
    if condition <= 0:
        raise BadRequestError("Moving average window must be an integer greater than zero")
    start, end = window

    def average(s: GSeries) -> GSeries:
        history: list[tuple[int, float]] = []  # newest first
        points: list[tuple[int, float, int | None]] = []
        started = False
        for ts, v in zip(s.timestamps, s.values, strict=True):
            if not start <= ts <= end:
                continue
            history.insert(0, (ts, v))
            if timed and not started:
                started = True
                points.append((ts, 0.0, None))
                continue
            total, count, met, span, last = 0.0, 0, False, 0, -1
            kept = 0
            for hts, hv in history:
                kept += 1
                if timed:
                    if last < 0:
                        last = hts
                    else:
                        span += last - hts
                        last = hts
                        if span >= condition:
                            met = True
                            break
                if not math.isnan(hv):
                    total += hv
                    count += 1
                if not timed and count >= condition:
                    met = True
                    break
            del history[kept:]
            points.append((ts, total / count if met and count else 0.0, None))
        return _with_points(s, points)

    return _each(inputs, average)


def _top(pick: Callable[[list[float]], float]) -> Callable[..., list[GSeries]]:
    def top(
        inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
    ) -> list[GSeries]:
        if not params:
            raise BadRequestError("Need aggregation window for moving average")
        text = params[0]
        if not text:
            raise BadRequestError("Missing top n value (number of series to return)")
        if not text.isdigit():
            raise BadRequestError(f"Unparseable top n value: {text}")
        n = int(text)
        if n < 1:
            raise BadRequestError(f"Top n value must be greater than zero: {n}")
        start, end = window
        ranked = []
        for s in (s for group in inputs for s in group if s.timestamps):
            in_range = [
                v for ts, v in zip(s.timestamps, s.values, strict=True) if start <= ts <= end
            ]
            ranked.append((pick(in_range) if in_range else -math.inf, s))
        ranked.sort(key=lambda r: -r[0])
        return [s for _, s in ranked[:n]]

    return top


def _series_op(op: str, name: str) -> Callable[..., list[GSeries]]:
    def combine(
        inputs: list[list[GSeries]], params: list[str], window: tuple[int, int]
    ) -> list[GSeries]:
        if not inputs:
            return []
        if not 2 <= len(inputs) <= 26:
            raise BadRequestError(f"Must have 2 to 26 series, got {len(inputs)} instead")
        names = [chr(ord("a") + i) for i in range(len(inputs))]
        script = parse_script(f" {op} ".join(names))
        it = ExpressionIterator(ExpressionSpec(name, script, include_agg_tags=False), math.nan)
        for var, group in zip(names, inputs, strict=True):
            series = [
                ExpSeries(s.metric_uid, s.tag_uids, s.aggregated_uids, s.timestamps, s.values)
                for s in group
            ]
            it.results[var] = TimeSyncedSeries(var, series, frozenset(), 0.0)
        it.compile()
        out = []
        by_uid = {s.metric_uid: s.metric for group in inputs for s in group}
        tagk_names = {k: n for group in inputs for s in group for k, n in s.tagk_names.items()}
        tagv_names = {k: n for group in inputs for s in group for k, n in s.tagv_names.items()}
        base = next(s.base for group in inputs for s in group)
        for i, ident in enumerate(it.values()):
            assert ident is not None
            points = it.series_points(i)
            metric = by_uid[min(ident.ident.metric_uids)] if ident.ident.metric_uids else ""
            out.append(
                GSeries(
                    base,
                    metric,
                    {tagk_names[k]: tagv_names[v] for k, v in ident.ident.tag_uids.items()},
                    [tagk_names[k] for k in sorted(ident.ident.aggregated_uids)],
                    [ts for ts, _ in points],
                    [v for _, v in points],
                    [None] * len(points),
                    synthetic=True,
                )
            )
        return out

    return combine


Function = Callable[[list[list[GSeries]], list[str], tuple[int, int]], list[GSeries]]

FUNCTIONS: dict[str, Function] = {
    "alias": _alias,
    "scale": _scale,
    "absolute": _absolute,
    "movingAverage": _moving_average,
    "highestCurrent": _top(lambda values: values[-1]),
    "highestMax": _top(max),
    "shift": _time_shift,
    "timeShift": _time_shift,
    "divideSeries": _series_op("/", "divideSeries"),
    "divide": _series_op("/", "divideSeries"),
    "sumSeries": _series_op("+", "sumSeries"),
    "sum": _series_op("+", "sumSeries"),
    "diffSeries": _series_op("-", "diffSeries"),
    "difference": _series_op("-", "diffSeries"),
    "multiplySeries": _series_op("*", "multiplySeries"),
    "multiply": _series_op("*", "multiplySeries"),
}


def evaluate_call(
    name: str,
    inputs: list[list[GSeries]],
    params: list[str],
    window: tuple[int, int],
) -> list[GSeries]:
    """One function over its evaluated series arguments and its word arguments; an
    empty input list gives no series (as every 2.4.1 function does)."""
    fn = FUNCTIONS.get(name)
    if fn is None:
        raise BadRequestError(f"Function {name} has not been implemented", status=500)
    if not inputs:
        return []
    return fn(inputs, params, window)
