"""plan_mutations: Thrift1 calls with the effect of applying mutations in order. Pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsd.storage.base import Delete, Put
from tsd.storage.hbase.batches import (
    MAX_STEP_CELLS,
    DeleteRow,
    MutateRows,
    Step,
    _plan_in_order,
    _plan_puts,
    plan_mutations,
)


def shape(steps: list[Step]) -> list[object]:
    """Steps as plain data: a DeleteRow's row, or a MutateRows' {row: {column: value}}."""
    return [step.row if isinstance(step, DeleteRow) else step.rows for step in steps]


PLANS = [
    pytest.param([], [], id="nothing"),
    pytest.param(
        [Put(b"r", "f", b"a", b"1"), Put(b"s", "g", b"", b"2")],
        [{b"r": {b"f:a": b"1"}, b"s": {b"g:": b"2"}}],
        id="puts_share_one_call",
    ),
    pytest.param(
        [Put(b"r", "f", b"a", b"1"), Delete(b"r", "f", b"a")],
        [{b"r": {b"f:a": None}}],
        id="put_then_delete_same_call",
    ),
    pytest.param(
        [Delete(b"r", "f", b"a"), Put(b"r", "f", b"a", b"2")],
        [{b"r": {b"f:a": None}}, {b"r": {b"f:a": b"2"}}],
        id="delete_then_put_splits",
    ),
    pytest.param(
        [Delete(b"r", "f"), Put(b"r", "f", b"z", b"2"), Put(b"r", "g", b"z", b"3")],
        [{b"r": {b"f": None}}, {b"r": {b"f:z": b"2", b"g:z": b"3"}}],
        id="family_delete_covers_its_family_only",
    ),
    pytest.param(
        [Delete(b"r", "f"), Put(b"r", "g", b"z", b"3"), Put(b"s", "f", b"z", b"4")],
        [{b"r": {b"f": None, b"g:z": b"3"}, b"s": {b"f:z": b"4"}}],
        id="uncovered_puts_stay",
    ),
    pytest.param(
        [Put(b"r", "f", b"a", b"1"), Put(b"r", "f", b"a", b"2")],
        [{b"r": {b"f:a": b"2"}}],
        id="last_write_of_a_cell_wins",
    ),
    pytest.param(
        [Put(b"r", "f", b"a", b"1"), Delete(b"r"), Put(b"r", "f", b"a", b"2")],
        [{b"r": {b"f:a": b"1"}}, b"r", {b"r": {b"f:a": b"2"}}],
        id="row_delete_is_its_own_call",
    ),
    pytest.param(
        [Put(b"r", "f", b"a:b", b"1")],
        [{b"r": {b"f:a:b": b"1"}}],
        id="colon_in_qualifier_kept",
    ),
]


@pytest.mark.parametrize(("mutations", "expected"), PLANS)
def test_plan_mutations(mutations, expected) -> None:
    assert shape(plan_mutations(mutations)) == expected


def test_steps_with_deletes_are_flagged() -> None:
    steps = plan_mutations([Put(b"r", "f", b"a", b"1"), Delete(b"s", "f", b"a")])
    assert [isinstance(s, MutateRows) and s.has_deletes for s in steps] == [True]
    steps = plan_mutations([Put(b"r", "f", b"a", b"1")])
    assert [isinstance(s, MutateRows) and s.has_deletes for s in steps] == [False]


def test_large_batches_are_cut_by_cells_and_bytes() -> None:
    puts = [Put(i.to_bytes(4, "big"), "f", b"q", b"v") for i in range(MAX_STEP_CELLS * 2 + 1)]
    steps = plan_mutations(puts)
    assert [
        sum(len(ops) for ops in s.rows.values()) for s in steps if isinstance(s, MutateRows)
    ] == [
        MAX_STEP_CELLS,
        MAX_STEP_CELLS,
        1,
    ]
    big = [Put(bytes([i]), "f", b"q", b"x" * 400_000) for i in range(5)]
    assert [len(s.rows) for s in plan_mutations(big) if isinstance(s, MutateRows)] == [2, 2, 1]


_PUTS = st.lists(
    st.builds(
        Put,
        st.sampled_from([b"r1", b"r2", b"r3"]),
        st.sampled_from(["t", "id"]),
        st.binary(max_size=3),
        st.binary(max_size=3),
    ),
    max_size=40,
)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@given(_PUTS)
def test_puts_alone_are_planned_as_the_general_planner_plans_them(puts: list[Put]) -> None:
    # plan_mutations takes a fast path for batches of puts alone (the write path's).
    assert _plan_puts(puts) == _plan_in_order(puts)


def test_puts_alone_are_cut_as_the_general_planner_cuts_them() -> None:
    puts = [Put(bytes([i % 7]), "t", i.to_bytes(3, "big"), b"v" * 150) for i in range(25_000)]
    assert _plan_puts(puts) == _plan_in_order(puts)
