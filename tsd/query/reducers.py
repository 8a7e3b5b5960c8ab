"""OpenTSDB's 35 aggregator functions as column reductions over a padded matrix. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.2; OpenTSDB
src/core/Aggregators.java ``runDouble`` / ``runLong`` of each aggregator): an aggregator
folds "the values" of one group, in order. Both places that aggregate present their
groups the same way, so one implementation serves both:

* downsampling: a group is the points of one series in one interval;
* cross-series aggregation: a group is one timestamp, and the values are the series'
  (possibly interpolated) values at it, in series order.

A block is ``x[L, G]`` (group ``g``'s values down column ``g``, in order) plus a mask
``m[L, G]`` of the entries that take part. The double path (``run_double``) mirrors
``runDouble``: most aggregators skip NaN (``sum`` of only NaN is NaN, ``count`` counts the
non-NaN), ``mult``, ``first`` and ``last`` do not, percentiles always use commons-math3's
default (legacy) estimation there — an OpenTSDB bug kept for compatibility. The long path
(``run_long``, used for all-integer timestamps of a raw cross-series aggregation) mirrors
``runLong``: Java long arithmetic that wraps, ``avg`` truncating toward zero, ``median``
the upper median, ``dev`` cast to long, percentiles with their R-3/R-7 estimation.

Float sums are folded sequentially in row order, exactly as the Java loops add, so
results match OpenTSDB bit for bit (numpy's pairwise summation would not). The one
exception: ``dev`` over groups longer than ``WELFORD_MAX_ROWS`` uses a two-pass formula.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tsd.errors import TsdError
from tsd.query_spec import (
    AGGREGATOR_INTERPOLATION,
    LONG_MAX,
    LONG_MIN,
    PERCENTILE_AGGREGATORS,
    Interpolation,
)

F2 = npt.NDArray[np.float64]
I2 = npt.NDArray[np.int64]
B2 = npt.NDArray[np.bool_]
F1 = npt.NDArray[np.float64]
I1 = npt.NDArray[np.int64]

#: Above this many rows ``dev`` stops running Welford's recurrence row by row.
WELFORD_MAX_ROWS = 16_384

_TWO_63 = 2.0**63


@dataclass(frozen=True, slots=True)
class Aggregator:
    """One aggregator: its interpolation and its double and long reductions."""

    name: str
    interpolation: Interpolation
    run_double: Callable[[F2, B2], F1]
    run_long: Callable[[I2, B2], I1]


class MoreThanOneValueError(TsdError):
    """The ``none`` aggregator met two values at one timestamp (IllegalDataException)."""


# --------------------------------------------------------------------------- helpers


def sequential_reduce(z: F2, ufunc: np.ufunc) -> F1:
    """Fold ``z`` down axis 0 strictly row after row (Java's loop order).

    numpy folds a 2-D C-contiguous array row by row when reducing axis 0, but uses
    pairwise summation for a single column, hence accumulate there.
    """
    if z.shape[0] == 0:
        return np.full(z.shape[1], ufunc.identity, dtype=z.dtype)
    if z.shape[1] >= 2 and z.flags.c_contiguous:
        return ufunc.reduce(z, axis=0)  # type: ignore[no-any-return]
    return ufunc.accumulate(z, axis=0)[-1]  # type: ignore[no-any-return]


def _first_index(m: B2) -> I1:
    return np.asarray(np.argmax(m, axis=0), dtype=np.int64)


def _last_index(m: B2) -> I1:
    return np.asarray(m.shape[0] - 1 - np.argmax(m[::-1], axis=0), dtype=np.int64)


def _pick(x: F2, rows: I1) -> F1:
    """Row ``rows[g]`` of every column ``g``."""
    return np.asarray(np.take_along_axis(x, rows[None, :], axis=0)[0], dtype=np.float64)


def _pick_long(x: I2, rows: I1) -> I1:
    return np.asarray(np.take_along_axis(x, rows[None, :], axis=0)[0], dtype=np.int64)


def java_double_to_long(x: F1) -> I1:
    """Java's ``(long) double``: truncate toward zero, NaN -> 0, saturate at the ends."""
    out = np.zeros(len(x), dtype=np.int64)
    finite = ~np.isnan(x)
    big = finite & (x >= _TWO_63)
    small = finite & (x <= -_TWO_63)
    mid = finite & ~big & ~small
    out[mid] = np.trunc(x[mid]).astype(np.int64)
    out[big] = LONG_MAX
    out[small] = LONG_MIN
    return out


def _java_long_div(a: I1, n: I1) -> I1:
    """Java ``long / int`` (truncation toward zero); ``n`` > 0."""
    q = a // n
    return np.asarray(q + ((a % n != 0) & (a < 0)), dtype=np.int64)


def _non_nan(x: F2, m: B2) -> B2:
    return m & ~np.isnan(x)


# --------------------------------------------------------------------------- doubles


def _sum_d(x: F2, m: B2) -> F1:
    # Java's runDouble sums from 0.0, so its sum is never -0.0; a fold from the first value
    # is the same sum but for that sign (adding 0.0 fixes it and changes nothing else).
    valid = _non_nan(x, m)
    if len(x) and valid.all():  # the usual block: no masking (same sums, no temporaries)
        return sequential_reduce(x, np.add) + 0.0
    total = sequential_reduce(np.where(valid, x, 0.0), np.add) + 0.0
    return np.where(valid.any(axis=0), total, np.nan)


def _square_sum_d(x: F2, m: B2) -> F1:
    valid = _non_nan(x, m)
    total = sequential_reduce(np.where(valid, x * x, 0.0), np.add)
    return np.where(valid.any(axis=0), total, np.nan)


def _min_d(x: F2, m: B2) -> F1:
    low = np.where(_non_nan(x, m), x, np.inf).min(axis=0, initial=np.inf)
    return np.where(low == np.inf, np.nan, low)


def _max_d(x: F2, m: B2) -> F1:
    high = np.where(_non_nan(x, m), x, -np.inf).max(axis=0, initial=-np.inf)
    return np.where(high == -np.inf, np.nan, high)


def _avg_d(x: F2, m: B2) -> F1:
    valid = _non_nan(x, m)
    total = sequential_reduce(np.where(valid, x, 0.0), np.add) + 0.0  # as _sum_d
    count = valid.sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _count_d(x: F2, m: B2) -> F1:
    return np.asarray(_non_nan(x, m).sum(axis=0), dtype=np.float64)


def _dev_d(x: F2, m: B2) -> F1:
    count, m2 = welford(x, _non_nan(x, m))
    return np.where(count == 0, np.nan, np.where(count == 1, 0.0, np.sqrt(m2 / count)))


def welford(x: F2, m: B2) -> tuple[I1, F1]:
    """Per column: the number of masked values and Welford's M2 over them, updated in
    row order as StdDev.runDouble does (the first value seeds the mean)."""
    rows, cols = x.shape
    if rows > WELFORD_MAX_ROWS:
        count = m.sum(axis=0)
        mean = np.where(m, x, 0.0).sum(axis=0) / np.maximum(count, 1)
        return count, np.where(m, (x - mean) ** 2, 0.0).sum(axis=0)
    count = np.zeros(cols, dtype=np.int64)
    mean = np.zeros(cols)
    m2 = np.zeros(cols)
    for j in range(rows):
        row = m[j]
        xj = x[j]
        k = (count + 1).astype(np.float64)
        delta = xj - mean
        new_mean = mean + delta / k
        later = row & (count > 0)
        m2 = np.where(later, m2 + delta * (xj - new_mean), m2)
        mean = np.where(later, new_mean, np.where(row, xj, mean))
        count += row
    return count, m2


def _sorted_valid(x: F2, valid: B2) -> tuple[F2, I1]:
    return np.sort(np.where(valid, x, np.inf), axis=0), valid.sum(axis=0)


def _median_d(x: F2, m: B2) -> F1:
    ordered, count = _sorted_valid(x, _non_nan(x, m))
    picked = _pick(ordered, np.minimum(count // 2, max(x.shape[0] - 1, 0)))
    return np.where(count > 0, picked, np.nan).astype(np.float64)


def percentile_of_sorted(ordered: F2, count: I1, percentile: float, estimation: str) -> F1:
    """commons-math3 ``Percentile.evaluate`` over each column's first ``count`` sorted
    values: ``legacy`` (the default), ``r3`` or ``r7`` estimation."""
    n = count.astype(np.float64)
    q = percentile / 100.0
    if estimation == "r3":
        with np.errstate(divide="ignore"):
            pos = np.where(q <= 1.0 / 2 / n, 0.0, np.rint(n * q))
    elif estimation == "r7":
        pos = 1 + (n - 1) * q
    else:
        pos = q * (n + 1)
    last_row = max(ordered.shape[0] - 1, 0)
    floor = np.floor(pos)
    whole = floor.astype(np.int64)
    lower = _pick(ordered, np.clip(whole - 1, 0, last_row))
    upper = _pick(ordered, np.clip(whole, 0, last_row))
    first = _pick(ordered, np.zeros(len(count), dtype=np.int64))
    last = _pick(ordered, np.clip(count - 1, 0, last_row))
    result = lower + (pos - floor) * (upper - lower)
    result = np.where(pos < 1, first, np.where(pos >= n, last, result))
    result = np.where(count == 1, first, result)
    return np.where(count == 0, np.nan, result)


def _percentile_d(percentile: float) -> Callable[[F2, B2], F1]:
    def run(x: F2, m: B2) -> F1:
        ordered, count = _sorted_valid(x, _non_nan(x, m))
        return percentile_of_sorted(ordered, count, percentile, "legacy")

    return run


def _mult_d(x: F2, m: B2) -> F1:
    return sequential_reduce(np.where(m, x, 1.0), np.multiply)


def _first_d(x: F2, m: B2) -> F1:
    return _pick(x, _first_index(m))


def _last_d(x: F2, m: B2) -> F1:
    return _pick(x, _last_index(m))


def _diff_d(x: F2, m: B2) -> F1:
    valid = _non_nan(x, m)
    first_row = _first_index(valid)
    last_row = _last_index(m)
    first = _pick(x, first_row)
    last = _pick(x, last_row)
    result = np.where(last_row > first_row, last - first, 0.0)
    return np.where(valid.any(axis=0), result, np.nan).astype(np.float64)


def _none_d(x: F2, m: B2) -> F1:
    if x.shape[0] == 1:  # one series (a raw query's): its row, nothing to check or pick
        return np.array(x[0], dtype=np.float64)
    _check_single(m)
    return _first_d(x, m)


def _check_single(m: B2) -> None:
    if (m.sum(axis=0) > 1).any():
        raise MoreThanOneValueError("More than one value in aggregator")


# --------------------------------------------------------------------------- longs


def _sum_l(x: I2, m: B2) -> I1:
    return np.asarray(np.where(m, x, 0).sum(axis=0, dtype=np.int64), dtype=np.int64)


def _square_sum_l(x: I2, m: B2) -> I1:
    return np.asarray(np.where(m, x * x, 0).sum(axis=0, dtype=np.int64), dtype=np.int64)


def _min_l(x: I2, m: B2) -> I1:
    return np.asarray(np.where(m, x, LONG_MAX).min(axis=0), dtype=np.int64)


def _max_l(x: I2, m: B2) -> I1:
    return np.asarray(np.where(m, x, LONG_MIN).max(axis=0), dtype=np.int64)


def _avg_l(x: I2, m: B2) -> I1:
    return _java_long_div(_sum_l(x, m), np.maximum(m.sum(axis=0), 1))


def _median_l(x: I2, m: B2) -> I1:
    ordered = np.sort(np.where(m, x, LONG_MAX), axis=0)
    return _pick_long(ordered, m.sum(axis=0) // 2)


def _mult_l(x: I2, m: B2) -> I1:
    return np.asarray(np.where(m, x, 1).prod(axis=0, dtype=np.int64), dtype=np.int64)


def _dev_l(x: I2, m: B2) -> I1:
    count, m2 = welford(x.astype(np.float64), m)
    return np.where(count <= 1, 0, java_double_to_long(np.sqrt(m2 / np.maximum(count, 1))))


def _diff_l(x: I2, m: B2) -> I1:
    return _pick_long(x, _last_index(m)) - _pick_long(x, _first_index(m))


def _count_l(x: I2, m: B2) -> I1:
    return np.asarray(m.sum(axis=0), dtype=np.int64)


def _first_l(x: I2, m: B2) -> I1:
    return _pick_long(x, _first_index(m))


def _last_l(x: I2, m: B2) -> I1:
    return _pick_long(x, _last_index(m))


def _none_l(x: I2, m: B2) -> I1:
    if x.shape[0] == 1:  # as _none_d
        return np.array(x[0], dtype=np.int64)
    _check_single(m)
    return _first_l(x, m)


def _percentile_l(percentile: float, estimation: str) -> Callable[[I2, B2], I1]:
    def run(x: I2, m: B2) -> I1:
        ordered = np.sort(np.where(m, x.astype(np.float64), np.inf), axis=0)
        value = percentile_of_sorted(ordered, m.sum(axis=0), percentile, estimation)
        return java_double_to_long(value)

    return run


# --------------------------------------------------------------------------- registry

_FUNCTIONS: dict[str, tuple[Callable[[F2, B2], F1], Callable[[I2, B2], I1]]] = {
    "sum": (_sum_d, _sum_l),
    "zimsum": (_sum_d, _sum_l),
    "pfsum": (_sum_d, _sum_l),
    "min": (_min_d, _min_l),
    "mimmin": (_min_d, _min_l),
    "max": (_max_d, _max_l),
    "mimmax": (_max_d, _max_l),
    "avg": (_avg_d, _avg_l),
    "median": (_median_d, _median_l),
    "none": (_none_d, _none_l),
    "mult": (_mult_d, _mult_l),
    "dev": (_dev_d, _dev_l),
    "diff": (_diff_d, _diff_l),
    "count": (_count_d, _count_l),
    "first": (_first_d, _first_l),
    "last": (_last_d, _last_l),
    "squareSum": (_square_sum_d, _square_sum_l),
}
for _name, (_pct, _estimation) in PERCENTILE_AGGREGATORS.items():
    _FUNCTIONS[_name] = (_percentile_d(_pct), _percentile_l(_pct, _estimation))

#: Every aggregator by its registered name.
AGGREGATORS: dict[str, Aggregator] = {
    name: Aggregator(name, AGGREGATOR_INTERPOLATION[name], *_FUNCTIONS[name])
    for name in AGGREGATOR_INTERPOLATION
}


def run_double(name: str, x: F2, m: B2) -> F1:
    """Apply aggregator ``name``'s double path to every column of the block."""
    with np.errstate(all="ignore"):
        return AGGREGATORS[name].run_double(x, m)


def run_long(name: str, x: I2, m: B2) -> I1:
    """Apply aggregator ``name``'s long path to every column of the block."""
    with np.errstate(all="ignore"):
        return AGGREGATORS[name].run_long(x, m)
