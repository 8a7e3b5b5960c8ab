"""The C helper's walk over rollup cells (tsd/query/_decode.c rollup_cells) takes exactly the
cells, rows, intervals and values the numpy path takes, on random rows: 3-byte qualifiers
of the columns read and of others, value lengths right and wrong for their flags, integers
of every width, 4- and 8-byte floats, other qualifier lengths beside them."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.protocol.rollup_config import default_rollup_config
from tsd.query.rollup import ReadSource, _cells_read, _cells_read_numpy
from tsd.storage.base import Cell, CellBlock, Row

pytestmark = pytest.mark.skipif(
    not hasattr(__import__("tsd.query.decode", fromlist=["_C"])._C, "rollup_cells"),
    reason="the C helper is not built",
)

_VALUES = {
    0x0: b"\x05", 0x1: b"\x01\x00", 0x3: b"\xff\xff\xff\xfe", 0x7: struct.pack(">q", -(2**40)),
    0xB: struct.pack(">f", 1.5), 0xF: struct.pack(">d", 0.1),
}  # fmt: skip


@st.composite
def _cell(draw: st.DrawFn) -> Cell:
    if draw(st.integers(0, 9)) == 0:  # another kind of qualifier
        return Cell("t", draw(st.binary(min_size=1, max_size=6)), draw(st.binary(max_size=9)))
    flags = draw(st.sampled_from(sorted(_VALUES)))
    value = _VALUES[flags]
    if draw(st.integers(0, 9)) == 0:  # a value of another length than its flags say
        value = draw(st.binary(max_size=9))
    interval = draw(st.integers(0, 767))
    agg = draw(st.integers(0, 4))
    return Cell("t", bytes([agg]) + ((interval << 4) | flags).to_bytes(2, "big"), value)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(_cell(), max_size=12), max_size=6),
    aggregator=st.sampled_from(["avg", "sum", "count", "max"]),
)
def test_the_c_walk_takes_what_numpy_takes(rows: list[list[Cell]], aggregator: str) -> None:
    config = default_rollup_config("tsdb")
    interval = config.find("1h")
    agg_id = config.id_for("sum" if aggregator == "avg" else aggregator)
    count_id = config.id_for("count") if aggregator == "avg" else -1
    read = ReadSource("tsdb-rollup-1h", interval, aggregator, agg_id, count_id, 3600_000)
    block = CellBlock.from_rows(
        [Row(i.to_bytes(3, "big") + bytes(7), tuple(cells)) for i, cells in enumerate(rows)]
    )
    base_ms = np.arange(len(rows), dtype=np.int64) * 86_400_000
    c_path = _cells_read(block, read, base_ms, 3600_000)
    numpy_path = _cells_read_numpy(block, read, base_ms, 3600_000)
    for field in dataclasses.fields(c_path):
        found, expected = getattr(c_path, field.name), getattr(numpy_path, field.name)
        if isinstance(expected, np.ndarray):
            assert np.array_equal(found, expected, equal_nan=True), field.name
        else:
            assert found == expected, field.name
