"""Per-series rate of change, with OpenTSDB's counter options. Pure (numpy).

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.4; OpenTSDB
src/core/RateSpan.java, RateOptions.java):

* Each point's rate is ``(v - v_prev) / ((t - t_prev) / 1000.0)``, per second, always a
  double. Two integer points subtract as Java longs (wrapping) before the division.
* The first point of a series is taken against ``(t=0, v=0)``. That rate is meaningless
  and OpenTSDB never emits it at its own timestamp: the aggregation step uses it only as
  the series' "previous rate" (aggregate.py, ``rate=True``). It is kept in the output so
  that the aggregation can do the same.
* With ``counter`` and a negative difference: ``drop_resets`` drops the point (the raw
  point still serves as the previous one for the next rate); otherwise the difference is
  ``counter_max - v_prev + v`` and a rate above a positive ``reset_value`` becomes 0.
  Negative rates of non-counters are emitted as they are.
* Timestamps must increase strictly within a series (OpenTSDB raises otherwise).
"""

from __future__ import annotations

import numpy as np

from tsd.errors import TsdError
from tsd.query.series import SeriesBatch
from tsd.query_spec import RateOptions


def rate(batch: SeriesBatch, options: RateOptions) -> SeriesBatch:
    """The rate series of every series of ``batch`` (a float-only batch)."""
    n = batch.point_count
    if n == 0:
        return SeriesBatch(batch.timestamps, batch.values, batch.offsets)
    ts = batch.timestamps
    first = np.zeros(n, dtype=np.bool_)
    first[batch.offsets[:-1][batch.lengths > 0]] = True
    prev_ts = np.where(first, 0, np.roll(ts, 1))
    if (ts <= prev_ts).any():
        bad = int(np.flatnonzero(ts <= prev_ts)[0])
        raise TsdError(
            f"Next timestamp ({int(ts[bad])}) is supposed to be strictly greater than the "
            f"previous one ({int(prev_ts[bad])}), but it's not."
        )
    with np.errstate(all="ignore"):
        seconds = (ts - prev_ts).astype(np.float64) / 1000.0
        prev_v = np.where(first, 0.0, np.roll(batch.values, 1))
        diff = batch.values - prev_v
        both_int = None
        prev_iv = np.zeros(n, dtype=np.int64)
        if batch.is_int is not None and batch.int_values is not None:
            prev_is_int = np.where(first, True, np.roll(batch.is_int, 1))
            both_int = batch.is_int & prev_is_int
            prev_iv = np.where(first, 0, np.roll(batch.int_values, 1))
            int_diff = (batch.int_values - prev_iv).astype(np.float64)
            diff = np.where(both_int, int_diff, diff)
        rates = diff / seconds
        keep = None
        if options.counter:
            reset = diff < 0
            if options.drop_resets:
                keep = ~reset
            else:
                wrapped = float(options.counter_max) - prev_v + batch.values
                if both_int is not None and batch.int_values is not None:  # long arithmetic
                    int_wrapped = np.int64(options.counter_max) - prev_iv + batch.int_values
                    wrapped = np.where(both_int, int_wrapped.astype(np.float64), wrapped)
                wrapped_rates = wrapped / seconds
                if options.reset_value > 0:
                    too_big = wrapped_rates > float(options.reset_value)
                    wrapped_rates = np.where(too_big, 0.0, wrapped_rates)
                rates = np.where(reset, wrapped_rates, rates)
    out = SeriesBatch(ts, rates, batch.offsets)
    return out if keep is None else out.select_points(keep)
