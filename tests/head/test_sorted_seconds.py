"""A head row of seconds points that came out of order, read as a clean row: its cells as
storage would hold them (``sorted(_split(...).items())``: qualifier order, the last point
of a qualifier winning) when their times strictly increase, else left to the cells."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.query.test_head_rows import BASE, VALUES
from tsd.codec import encode_point
from tsd.head.head import _split, sorted_seconds


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), VALUES), min_size=1, max_size=60))
def test_out_of_order_rows_read_as_their_cells(points: list[tuple[int, int | float]]) -> None:
    encoded = [encode_point(BASE + off, value)[1:] for off, value in points]
    qualifiers = b"".join(q for q, _ in encoded)
    values = b"".join(v for _, v in encoded)
    cells = sorted(_split(qualifiers, values).items())
    found = sorted_seconds(qualifiers, values)
    seconds = [int.from_bytes(q, "big") >> 4 for q, _ in cells]
    if len(set(seconds)) < len(seconds):  # one second with two flags: cells, as they are
        assert found is None
        return
    assert found == (b"".join(q for q, _ in cells), b"".join(v for _, v in cells), len(cells))


def test_rows_not_of_whole_seconds_points_are_left_to_the_cells() -> None:
    q, v = encode_point(BASE + 5, 1.5)[1:]
    assert sorted_seconds(q, v[:-1]) is None  # values cut short
    assert sorted_seconds(q[:1], v) is None  # half a qualifier
    assert sorted_seconds(b"", b"") is None
    wide = encode_point(BASE * 1000 + 5, 7)[1:]  # a millisecond point: 4-byte qualifier
    assert len(wide[0]) == 4
    assert sorted_seconds(*wide) is None
