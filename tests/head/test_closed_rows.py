"""Which rows of a closed hour the head hands out (Head.closed): the idle ones only, also
after a look that found none (the hour is then not scanned row by row until one can be)."""

from __future__ import annotations

from tsd.codec import KeyLayout, encode_point
from tsd.config import StorageConfig
from tsd.head.head import Head
from tsd.write.head_flush import HeadSink

BASE = 1356998400
GRACE = 60.0
#: a time long after the hour of BASE closed
LATER = BASE + 10_000.0


def _key(series: int) -> bytes:
    return b"\x00\x00\x01" + BASE.to_bytes(4, "big") + series.to_bytes(6, "big")


def _write(head: Head, series: list[int], now: float, offset: int) -> None:
    rows = {_key(s): dict([encode_point(BASE + offset, s)[1:]]) for s in series}
    _, runs = HeadSink.encode(rows)
    head.add_runs(runs, 0, now)


def test_rows_of_a_closed_hour_leave_once_idle_for_the_grace() -> None:
    head = Head(KeyLayout.from_storage_config(StorageConfig()))
    _write(head, [1, 2], LATER, 0)
    assert head.closed(LATER + 30, GRACE) == []  # every row written 30 s ago
    _write(head, [1], LATER + 40, 1)  # row 1 written again
    _write(head, [3], LATER + 50, 0)  # a new row of the same hour
    assert head.closed(LATER + 61, GRACE) == [_key(2)]
    assert head.closed(LATER + 101, GRACE) == [_key(1), _key(2)]
    assert head.closed(LATER + 111, GRACE) == [_key(1), _key(2), _key(3)]
    assert head.closed(LATER + 111, GRACE, limit=1) == [_key(1)]
    assert head.closed(LATER + 51, 0.0) == [_key(1), _key(2), _key(3)]  # no grace: all
