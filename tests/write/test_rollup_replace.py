"""Rollup cells replacing stored ones (write/rollup.py): the stale cells found in columns
are the rule's (stale_cells_one_by_one), and on the embedded store a month row of hourly
cells (merged in columns, packed.merge) ends with exactly the cells the rule leaves."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.storage.base import Cell, CellBlock, FamilySpec, Row
from tsd.storage.embedded import EmbeddedStorage
from tsd.write.rollup import replace_rollup_cells, stale_cells, stale_cells_one_by_one

FAMILY = "t"
#: a few aggregator ids and offsets, every flags nibble: slots often shared
_QUALIFIER = st.builds(
    lambda agg, offset, flags: bytes([agg, offset >> 4, ((offset & 15) << 4) | flags]),
    st.integers(0, 2),
    st.integers(0, 40),
    st.sampled_from([0, 1, 3, 7, 0xB, 0xF]),
)


@st.composite
def _stored_and_new(draw: st.DrawFn) -> tuple[CellBlock, dict[bytes, dict[bytes, bytes]]]:
    keys = draw(st.lists(st.binary(min_size=4, max_size=6), min_size=1, max_size=5, unique=True))
    rows = []
    new: dict[bytes, dict[bytes, bytes]] = {}
    for key in keys:
        stored = sorted(draw(st.sets(_QUALIFIER, max_size=30)))
        if stored:
            rows.append(Row(key, tuple(Cell(FAMILY, q, b"\x01") for q in stored)))
        new[key] = {q: b"\x02" for q in draw(st.sets(_QUALIFIER, min_size=1, max_size=8))}
    return CellBlock.from_rows(rows), new


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_stored_and_new())
def test_columns_find_the_rule_s_stale_cells(
    case: tuple[CellBlock, dict[bytes, dict[bytes, bytes]]],
) -> None:
    block, new = case
    assert stale_cells(block, new) == stale_cells_one_by_one(block, new)


def test_qualifiers_of_other_lengths_follow_the_rule() -> None:
    block = CellBlock.from_rows(
        [
            Row(
                b"k",
                (Cell(FAMILY, b"sum:\x00\x00", b"\x01"), Cell(FAMILY, b"\x00\x00\x00", b"\x01")),
            )
        ]
    )
    new = {b"k": {b"\x00\x00\x07": b"\x00\x00\x00\x00\x00\x00\x00\x01"}}
    assert (
        stale_cells(block, new) == {b"k": [b"\x00\x00\x00"]} == stale_cells_one_by_one(block, new)
    )


def _hour(agg: int, hour: int, flags: int) -> bytes:
    return bytes([agg, hour >> 4, ((hour & 15) << 4) | flags])


async def test_a_month_row_keeps_one_cell_per_slot(tmp_path: Path) -> None:
    """720 hourly cells of a 1-byte integer; then some hours written again as 8-byte
    doubles (a late float point): the old cells of those hours go, the others stay."""
    storage = EmbeddedStorage(tmp_path)
    try:
        await storage.create_table("r", [FamilySpec(FAMILY, packed_rows=True)])
        key = b"\x00\x00\x01\x5f\x00\x00\x00\x00\x01\x00\x00\x01"
        first = [(key, _hour(1, h, 0), bytes([h % 100])) for h in range(720)]
        await replace_rollup_cells(storage, "r", first)
        again = [(key, _hour(1, h, 0xF), b"\x40\x00\x00\x00\x00\x00\x00\x00") for h in (0, 5, 719)]
        again.append((key, _hour(1, 6, 0), b"\x07"))  # same width: overwritten in place
        await replace_rollup_cells(storage, "r", again)
        row = await storage.get("r", key, (FAMILY,))
        assert row is not None
        cells = {c.qualifier: c.value for c in row.cells}
        expected = {q: v for _, q, v in first}
        for _, q, v in again:
            expected.pop(bytes([q[0], q[1], q[2] & 0xF0]), None)
            expected[q] = v
        assert cells == expected
        assert len(cells) == 720
        block = await storage.get_blocks("r", [key, b"absent"], (FAMILY,))
        assert list(block) == [row]
    finally:
        await storage.close()
