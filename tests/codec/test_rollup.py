"""Rollup cell bytes (OpenTSDB 2.4.1 src/rollup/RollupUtils.java)."""

from __future__ import annotations

import calendar

import pytest

from tsd.codec.rollup import RollupSpan, rollup_base_time, rollup_offset_ms, rollup_qualifier
from tsd.errors import CodecError

HOURLY_1M = RollupSpan("h", 1, 60)  # interval 1m, rowSpan 1h: 60 intervals a row
DAILY_1H = RollupSpan("d", 1, 3600)  # interval 1h, rowSpan 1d
SIX_HOURS_10M = RollupSpan("h", 6, 600)
MONTHLY_1D = RollupSpan("n", 1, 86400)
YEARLY_1D = RollupSpan("y", 1, 86400)

T = calendar.timegm((2013, 1, 1, 0, 0, 0))  # 1356998400


@pytest.mark.parametrize(
    ("timestamp", "span", "base"),
    [
        (T + 150, HOURLY_1M, T),
        ((T + 150) * 1000 + 7, HOURLY_1M, T),  # milliseconds: seconds first
        (T + 7 * 3600 + 5, SIX_HOURS_10M, T + 6 * 3600),  # 6 h rows from the epoch
        (T + 13 * 3600, DAILY_1H, T),  # UTC midnight
        (
            calendar.timegm((2013, 2, 17, 5, 0, 0)),
            MONTHLY_1D,
            calendar.timegm((2013, 2, 1, 0, 0, 0)),
        ),
        (calendar.timegm((2013, 7, 4, 0, 0, 1)), YEARLY_1D, T),
    ],
)
def test_base_time_is_the_start_of_the_row_span(
    timestamp: int, span: RollupSpan, base: int
) -> None:
    assert rollup_base_time(timestamp, span) == base


def test_negative_timestamps_are_refused() -> None:
    with pytest.raises(CodecError, match="Not supporting negative timestamps"):
        rollup_base_time(-1, HOURLY_1M)


def test_qualifier_is_aggregator_id_then_offset_and_flags() -> None:
    # 2 minutes in: interval 2, shifted by the 4 flag bits, OR-ed with the flags of an
    # 8-byte integer (7): 0x0027.
    assert rollup_qualifier(T + 120, T, 0x7, 3, HOURLY_1M) == bytes([3, 0x00, 0x27])
    # a float on 4 bytes (flags 0xB) in the last interval of a daily 1h row: 23 << 4 | 0xB
    q = rollup_qualifier(T + 23 * 3600 + 59, T, 0xB, 0, DAILY_1H)
    assert q == bytes([0, 0x01, 0x7B])
    assert rollup_offset_ms(q, DAILY_1H) == 23 * 3600 * 1000


def test_an_offset_past_the_row_is_refused() -> None:
    with pytest.raises(
        CodecError, match="Offset of 60 was greater than the configured intervals 60"
    ):
        rollup_qualifier(T + 3600, T, 0, 0, HOURLY_1M)


def test_intervals_per_row() -> None:
    assert HOURLY_1M.intervals == 60
    assert SIX_HOURS_10M.intervals == 36
    assert MONTHLY_1D.intervals == 32  # a month row holds 32 days (OpenTSDB's maximum)
