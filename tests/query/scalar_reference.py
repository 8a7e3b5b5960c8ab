"""A slow, point-by-point model of OpenTSDB 2.4's query iterators, for differential tests.

It walks the data the way OpenTSDB's Java iterators do (src/core/AggregationIterator.java,
Downsampler.java, FillingDownsampler.java, RateSpan.java, Aggregators.java), one point
and one value at a time, with Java's long arithmetic emulated on Python ints. The numpy
kernels in tsd/query must give exactly the same answers.

A series is a list of ``(timestamp_ms, value)``; an ``int`` value is an integer point.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from tsd.query.calendar import add_interval, previous_interval
from tsd.query_spec import (
    AGGREGATOR_INTERPOLATION,
    PERCENTILE_AGGREGATORS,
    DownsampleSpec,
    FillPolicy,
    Interpolation,
    RateOptions,
)

Point = tuple[int, int | float]
Series = list[Point]
LONG_MAX = 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308


def wrap(v: int) -> int:
    """Java long overflow."""
    return (v + 2**63) % 2**64 - 2**63


def jdiv(a: int, b: int) -> int:
    """Java long division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return wrap(q if (a >= 0) == (b > 0) else -q)


def to_long(d: float) -> int:
    """Java (long) cast of a double."""
    if math.isnan(d):
        return 0
    if d >= 2.0**63:
        return LONG_MAX
    if d <= -(2.0**63):
        return -(2**63)
    return int(d)


# ------------------------------------------------------------------ aggregator functions


def percentile(values: Sequence[float], p: float, estimation: str) -> float:
    n = len(values)
    if n == 0:
        return math.nan
    if n == 1:
        return values[0]
    s = sorted(values)
    q = p / 100.0
    if estimation == "r3":
        pos = 0.0 if q <= 1.0 / 2 / n else float(round(n * q))  # round(): half to even
    elif estimation == "r7":
        pos = 1 + (n - 1) * q
    else:
        pos = q * (n + 1)
    if pos < 1:
        return s[0]
    if pos >= n:
        return s[n - 1]
    fpos = math.floor(pos)
    lower, upper = s[int(fpos) - 1], s[int(fpos)]
    return lower + (pos - fpos) * (upper - lower)


def run_double(name: str, values: Sequence[float]) -> float:
    """Aggregators.<X>.runDouble over the values in order."""
    vals = list(values)
    real = [v for v in vals if not math.isnan(v)]
    if name in ("sum", "zimsum", "pfsum"):
        total = 0.0
        for v in real:
            total += v
        return total if real else math.nan
    if name == "squareSum":
        total = 0.0
        for v in real:
            total += v * v
        return total if real else math.nan
    if name in ("min", "mimmin"):
        low = math.inf
        for v in real:
            if v < low:
                low = v
        return math.nan if low == math.inf else low
    if name in ("max", "mimmax"):
        high = -math.inf
        for v in real:
            if v > high:
                high = v
        return math.nan if high == -math.inf else high
    if name == "avg":
        total = 0.0
        for v in real:
            total += v
        return total / len(real) if real else math.nan
    if name == "count":
        return float(len(real))
    if name == "dev":
        if not real:
            return math.nan
        mean, m2, n = real[0], 0.0, 2
        for x in real[1:]:
            new_mean = mean + (x - mean) / n
            m2 += (x - mean) * (x - new_mean)
            mean = new_mean
            n += 1
        return 0.0 if n == 2 else math.sqrt(m2 / (n - 1))
    if name == "median":
        return sorted(real)[len(real) // 2] if real else math.nan
    if name == "mult":
        product = vals[0]
        for v in vals[1:]:
            product *= v
        return product
    if name == "first":
        return vals[0]
    if name == "last":
        return vals[-1]
    if name == "diff":
        i = 0
        while i < len(vals) and math.isnan(vals[i]):
            i += 1
        if i == len(vals):
            return math.nan
        if i == len(vals) - 1:
            return 0.0
        return vals[-1] - vals[i]
    if name == "none":
        if len(vals) > 1:
            raise ValueError("More than one value in aggregator")
        return vals[0]
    pct, _ = PERCENTILE_AGGREGATORS[name]
    return percentile(real, pct, "legacy")


def run_long(name: str, values: Sequence[int]) -> int:
    """Aggregators.<X>.runLong over the values in order."""
    vals = list(values)
    if name in ("sum", "zimsum", "pfsum"):
        return wrap(sum(vals))
    if name == "squareSum":
        return wrap(sum(wrap(v * v) for v in vals))
    if name in ("min", "mimmin"):
        return min(vals)
    if name in ("max", "mimmax"):
        return max(vals)
    if name == "avg":
        return jdiv(wrap(sum(vals)), len(vals))
    if name == "count":
        return len(vals)
    if name == "dev":
        if len(vals) == 1:
            return 0
        mean, m2, n = float(vals[0]), 0.0, 2
        for v in vals[1:]:
            x = float(v)
            new_mean = mean + (x - mean) / n
            m2 += (x - mean) * (x - new_mean)
            mean = new_mean
            n += 1
        return to_long(math.sqrt(m2 / (n - 1)))
    if name == "median":
        return sorted(vals)[len(vals) // 2]
    if name == "mult":
        product = 1
        for v in vals:
            product = wrap(product * v)
        return product
    if name == "first":
        return vals[0]
    if name == "last":
        return vals[-1]
    if name == "diff":
        return 0 if len(vals) == 1 else wrap(vals[-1] - vals[0])
    if name == "none":
        if len(vals) > 1:
            raise ValueError("More than one value in aggregator")
        return vals[0]
    pct, estimation = PERCENTILE_AGGREGATORS[name]
    return to_long(percentile([float(v) for v in vals], pct, estimation))


# ------------------------------------------------------------------ aggregation iterator


_END = (2**63 - 1, 0)


def aggregate(
    series: Sequence[Sequence[Point]], name: str, start: int, end: int, rate: bool = False
) -> list[tuple[int, int | float, bool]]:
    """AggregationIterator: ``(timestamp, value, is_integer)`` per emitted timestamp."""
    method = AGGREGATOR_INTERPOLATION[name]
    size = len(series)
    sources: list[Iterator[Point]] = [iter([p for p in s if p[0] >= start]) for s in series]
    cur: list[Point | None] = [None] * size
    nxt: list[Point] = [_END] * size
    for i in range(size):
        nxt[i] = next(sources[i], _END)
        if rate and nxt[i] is not _END:
            cur[i], nxt[i] = nxt[i], next(sources[i], _END)
            if nxt[i] is _END:  # a single rate point: ends at once, never current
                cur[i] = None
    out: list[tuple[int, int | float, bool]] = []
    current = 0
    while any(n is not _END and n[0] <= end for n in nxt):
        for i in range(current, size):
            if nxt[i] is _END:
                cur[i] = None
        x = min(n[0] for n in nxt if n is not _END and n[0] <= end)
        current = next(i for i in range(size) if nxt[i] is not _END and nxt[i][0] == x)
        for i in range(current, size):
            if nxt[i] is not _END and nxt[i][0] == x:
                cur[i], nxt[i] = nxt[i], next(sources[i], _END)
        held = [p for p in cur if p is not None] + [n for n in nxt if n is not _END]
        is_int = not rate and all(isinstance(p[1], int) for p in held)
        values = []
        for i in range(size):
            point = cur[i]
            if point is None:
                continue
            values.append(_value_at(point, nxt[i], x, i == current, method, rate, is_int))
        if is_int:
            out.append((x, run_long(name, values), True))  # type: ignore[arg-type]
        else:
            value = run_double(name, values)
            if math.isinf(value):
                raise ValueError("Got Infinity")
            out.append((x, value, False))
    return out


def _value_at(
    point: Point, after: Point, x: int, exact: bool, method: Interpolation, rate: bool,
    is_int: bool,
) -> int | float:  # fmt: skip
    x0, y0 = point
    if exact or rate or x == x0:
        return y0 if is_int else float(y0)
    x1, y1 = after
    if is_int:
        assert isinstance(y0, int)
        assert isinstance(y1, int)
        if method is Interpolation.LERP:
            return wrap(y0 + jdiv(wrap((x - x0) * (y1 - y0)), x1 - x0))
        return {Interpolation.ZIM: 0, Interpolation.MAX: LONG_MAX,
                Interpolation.MIN: -(2**63), Interpolation.PREV: y0}[method]  # fmt: skip
    f0, f1 = float(y0), float(y1)
    if method is Interpolation.LERP:
        return f0 + float(x - x0) * (f1 - f0) / float(x1 - x0)
    return {Interpolation.ZIM: 0.0, Interpolation.MAX: DOUBLE_MAX,
            Interpolation.MIN: -DOUBLE_MAX, Interpolation.PREV: f0}[method]  # fmt: skip


# ------------------------------------------------------------------ downsampling


def _next_boundary(spec: DownsampleSpec, ts: int) -> int:
    return add_interval(ts, spec.calendar_amount, spec.calendar_unit, spec.timezone)


def _bucket_of(spec: DownsampleSpec, ts: int, anchor: int | None) -> int:
    if not spec.use_calendar:
        return ts - ts % spec.interval_ms
    assert anchor is not None
    start = anchor
    while _next_boundary(spec, start) <= ts:
        start = _next_boundary(spec, start)
    return start


def downsample(
    series: Sequence[Point], spec: DownsampleSpec, start: int, end: int, qstart: int, qend: int
) -> list[tuple[int, float]]:
    """Downsampler / FillingDownsampler over one series."""
    if spec.run_all:
        inside = [float(v) for t, v in series if qstart <= t < qend]
        return [(qstart, run_double(spec.function, inside))] if inside else []
    unit, amount, tz = spec.calendar_unit, spec.calendar_amount, spec.timezone
    if spec.use_calendar:
        seek = previous_interval(start, amount, unit, tz)
        if start > seek:
            seek = _next_boundary(spec, seek)
    else:
        seek = (start + spec.interval_ms - 1) - (start + spec.interval_ms - 1) % spec.interval_ms
    points = [(t, v) for t, v in series if t >= seek]
    anchor = None
    if points and spec.use_calendar:
        anchor = previous_interval(points[0][0], amount, unit, tz)
    buckets: list[tuple[int, list[float]]] = []
    for t, v in points:
        b = _bucket_of(spec, t, anchor)
        if buckets and buckets[-1][0] == b:
            buckets[-1][1].append(float(v))
        else:
            buckets.append((b, [float(v)]))
    data = [(b, run_double(spec.function, vs)) for b, vs in buckets]
    if spec.fill_policy is FillPolicy.NONE:
        return data
    if spec.use_calendar:
        expected = previous_interval(start, amount, unit, tz)
        stop = previous_interval(end, amount, unit, tz)
        if stop == expected:
            stop = _next_boundary(spec, stop)
    else:
        expected = start - start % spec.interval_ms
        stop = end - end % spec.interval_ms
    filler = 0.0 if spec.fill_policy is FillPolicy.ZERO else math.nan
    out = []
    k = 0
    while expected < stop:
        while k < len(data) and data[k][0] < expected:
            k += 1
        if k < len(data) and data[k][0] == expected:
            out.append(data[k])
            k += 1
        else:
            out.append((expected, filler))
        expected = _next_boundary(spec, expected) if spec.use_calendar else (
            expected + spec.interval_ms
        )  # fmt: skip
    return out


# ------------------------------------------------------------------ rate


def rate(series: Sequence[Point], options: RateOptions) -> list[tuple[int, float]]:
    """RateSpan: the first point is taken against (0, 0)."""
    out = []
    prev: Point = (0, 0)
    for point in series:
        t0, v0 = prev
        t1, v1 = point
        prev = point
        seconds = float(t1 - t0) / 1000.0
        if isinstance(v0, int) and isinstance(v1, int):
            both_int, diff = True, float(wrap(v1 - v0))
        else:
            both_int, diff = False, float(v1) - float(v0)
        if options.counter and diff < 0:
            if options.drop_resets:
                continue
            if both_int:
                diff = float(wrap(options.counter_max - int(v0) + int(v1)))
            else:
                diff = float(options.counter_max) - float(v0) + float(v1)
            value = diff / seconds
            if options.reset_value > 0 and value > options.reset_value:
                value = 0.0
            out.append((t1, value))
        else:
            out.append((t1, diff / seconds))
    return out


def group(
    series: Sequence[Sequence[Point]],
    name: str,
    *,
    start: int,
    end: int,
    qstart: int,
    qend: int,
    spec: DownsampleSpec | None = None,
    rate_options: RateOptions | None = None,
) -> list[tuple[int, int | float, bool]]:
    """The whole per-group pipeline: downsample -> rate -> aggregate."""
    staged: list[Series] = []
    for s in series:
        points: Series = list(s)
        if spec is not None:
            points = list(downsample(points, spec, start, end, qstart, qend))
        else:
            points = [p for p in points if p[0] >= start]
        if rate_options is not None:
            points = list(rate(points, rate_options))
        staged.append(points)
    return aggregate(staged, name, start, end, rate=rate_options is not None)
