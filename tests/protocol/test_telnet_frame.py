"""TelnetFramer and LineBuffer slicing: what a connection's loop relies on to frame a
flood of lines a slice at a time without leaving any behind."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tsd.codec import KeyLayout, make_series_key
from tsd.protocol.names import NameRules
from tsd.protocol.telnet import LineBuffer, put_line_key
from tsd.protocol.telnet_frame import CommandLine, TelnetFramer

LINE = b"put sys.cpu %d %d host=a\n"


def test_take_lines_in_slices_gives_the_same_lines_in_order() -> None:
    data = b"".join(b"line %d\r\n" % i for i in range(5000)) + b"x" * 30 + b"\nrest"
    whole = LineBuffer(1024)
    whole.feed(data)
    expected = whole.take_lines()
    sliced = LineBuffer(1024)
    sliced.feed(data)
    got: list[bytes | None] = []
    while lines := sliced.take_lines(1000):
        got += lines
    assert got == expected
    assert len(sliced) == len(b"rest")  # the unfinished line stays buffered


def test_take_lines_in_slices_reports_an_over_long_line_once() -> None:
    buffer = LineBuffer(100)
    buffer.feed(b"short\n" + b"y" * 500 + b"\nafter\n")
    got: list[bytes | None] = []
    while lines := buffer.take_lines(64):
        got += lines
    assert got == [b"short", None, b"after"]


def _framer(part_points: int) -> tuple[TelnetFramer[Any], list[tuple[Any, int]]]:
    key = make_series_key(KeyLayout(), b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x02")])
    refs: dict[Hashable, Any] = {put_line_key((LINE % (0, 0)).rstrip()): key}
    sealed: list[tuple[Any, int]] = []

    def seal(rows: Any, points: int) -> tuple[Any, int]:
        sealed.append((rows, points))
        return (rows, points)

    framer: TelnetFramer[Any] = TelnetFramer(
        rules=NameRules(),
        commands=("put", "version"),
        max_line_bytes=1024,
        refs=refs,
        seal=seal,
        part_points=part_points,
    )
    return framer, sealed


def test_take_items_counts_lines_encoded_ahead_without_items() -> None:
    """Puts of known series below a part's size make no item: the count tells the loop
    that more lines may be waiting (else they would wait for the next read)."""
    framer, sealed = _framer(part_points=10_000)
    framer.feed(b"".join(LINE % (1_700_000_000 + i, i) for i in range(3000)) + b"version\n")
    seen: list[tuple[int, list[Any]]] = []
    while (taken := framer.take_items(1000))[0]:
        seen.append(taken)
    assert [count for count, _ in seen] == [1000, 1000, 1000, 1]
    assert [items for _, items in seen[:3]] == [[], [], []]
    # the command comes after every put before it: the part is sealed first
    assert seen[3][1][1] == CommandLine(b"version")
    assert [points for _, points in sealed] == [3000]
    assert framer.encoded == 0
