"""A grouped row's entry merged in columns (packed.merge) gives merge_one_by_one's bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.storage.embedded import packed

#: rollup-like qualifiers: 3 bytes (aggregator id, offset and flags)
_QUALIFIER = st.binary(min_size=3, max_size=3)
_VALUE = st.binary(min_size=0, max_size=9)


@st.composite
def _entry_and_changes(draw: st.DrawFn) -> tuple[bytes, list[packed.Change]]:
    stored = draw(
        st.dictionaries(_QUALIFIER, _VALUE, min_size=packed.MERGE_IN_COLUMNS, max_size=120)
    )
    known = list(stored)
    qualifier = st.one_of(st.sampled_from(known), _QUALIFIER)
    changes = draw(
        st.lists(st.tuples(qualifier, st.one_of(st.none(), _VALUE)), min_size=0, max_size=40)
    )
    return packed.pack_group(list(stored.items())), changes


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(_entry_and_changes())
def test_columns_give_the_cell_by_cell_bytes(case: tuple[bytes, list[packed.Change]]) -> None:
    stored, changes = case
    assert packed.merge(stored, changes, grouped=True) == packed.merge_one_by_one(
        stored, changes, grouped=True
    )


def test_the_columns_take_a_month_of_rollups() -> None:
    """The path is taken (not only its fallback): a merged entry of many cells is found by
    the columnar merge itself."""
    stored = packed.pack_group([(bytes([1, h >> 4, (h & 15) << 4]), b"\x05") for h in range(720)])
    changes: list[packed.Change] = [(bytes([1, 0, 0x10]), b"\x00\x07"), (bytes([1, 0, 0x20]), None)]
    merged = packed._merge_group_columns(stored, changes)
    assert merged is not None
    assert merged == packed.merge_one_by_one(stored, changes, grouped=True)
    cells = dict(packed.unpack(merged[1] or b""))
    assert cells[bytes([1, 0, 0x10])] == b"\x00\x07"
    assert bytes([1, 0, 0x20]) not in cells


def test_removing_every_cell_leaves_no_entry() -> None:
    cells = [(bytes([0, 0, i]), b"v") for i in range(packed.MERGE_IN_COLUMNS)]
    changed, entry = packed.merge(
        packed.pack_group(cells), [(q, None) for q, _ in cells], grouped=True
    )
    assert changed
    assert entry is None


def test_removing_absent_cells_changes_nothing() -> None:
    cells = [(bytes([0, 0, i]), b"v") for i in range(packed.MERGE_IN_COLUMNS)]
    assert packed.merge(packed.pack_group(cells), [(b"\x09\x09\x09", None)], grouped=True) == (
        False,
        None,
    )


def test_qualifiers_of_several_lengths_go_cell_by_cell() -> None:
    cells = [(bytes([0, 0, i]), b"v") for i in range(packed.MERGE_IN_COLUMNS)]
    stored = packed.pack_group(cells)
    changes: list[packed.Change] = [(b"\x00\x00\x00\x01", b"w")]
    assert packed._merge_group_columns(stored, changes) is None
    assert packed.merge(stored, changes, grouped=True) == packed.merge_one_by_one(
        stored, changes, grouped=True
    )


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.binary(min_size=0, max_size=5), st.binary(min_size=0, max_size=300), max_size=40
    )
)
def test_small_groups_are_laid_out_as_numpy_lays_them(cells: dict[bytes, bytes]) -> None:
    ordered = sorted(cells.items())
    columns = packed._group_form(  # noqa: SLF001 - the numpy layout, the reference here
        np.fromiter((len(q) for q, _ in ordered), np.uint16, len(ordered)),
        np.fromiter((len(v) for _, v in ordered), np.uint32, len(ordered)),
        b"".join(q for q, _ in ordered),
        b"".join(v for _, v in ordered),
    )
    assert packed._small_group_form(ordered) == columns  # noqa: SLF001
    assert packed.pack_group(ordered) == columns
