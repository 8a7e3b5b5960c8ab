"""tsd.protocol.ref_table: the compiled KeyTable behaves as PythonRefTable (its
specification) step for step, both bound their entries as RecentMap does, and the telnet
parsers find series in it as in a dict."""

from __future__ import annotations

import functools
import gc
import random
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd import native
from tsd.codec import KeyLayout, make_series_key
from tsd.codec.qualifier import encode_points_into
from tsd.protocol.ref_table import PythonRefTable
from tsd.protocol.telnet import take_known_puts, take_known_puts_into, take_new_plain

KeyTable: Any = native.attribute("tsd.protocol._parse", "KeyTable")
needs_c = pytest.mark.skipif(KeyTable is None, reason="the compiled helper is not built")

TABLES = [PythonRefTable] + ([KeyTable] if KeyTable is not None else [])


def state(table: Any) -> tuple[Any, ...]:
    return (
        list(table.items()),
        table.old_items(),
        len(table),
        table.entries(),
        table.evictions,
    )


# operations: (name, key number, value)
_ops = st.lists(
    st.tuples(
        st.sampled_from(["remember", "recall", "lookup", "get", "contains", "many", "clear"]),
        st.integers(0, 40),
        st.integers(1, 5),
    ),
    max_size=300,
)


def _key(n: int) -> bytes:
    # keys of several lengths, some past the parsers' stack buffer
    return b"m%d " % n + b"t" * (n * 17 % 600)


@pytest.mark.slow
@pytest.mark.fallbacks
@needs_c
@settings(max_examples=300, deadline=None)
@given(max_entries=st.integers(1, 12), ops=_ops)
def test_the_compiled_table_is_its_specification(max_entries: int, ops: list[Any]) -> None:
    spec, table = PythonRefTable(max_entries), KeyTable(max_entries)
    for name, n, value in ops:
        key = _key(n)
        got: tuple[Any, Any]
        if name == "remember":
            got = (spec.remember(key, value), table.remember(key, value))  # type: ignore[func-returns-value]
        elif name == "recall":
            got = (spec.recall(key), table.recall(key))
        elif name == "lookup":
            got = (spec.lookup(key), table.lookup(key))
        elif name == "get":
            got = (spec.get(key), table.get(key))
        elif name == "contains":
            got = (key in spec, key in table)
        elif name == "many":
            keys = [_key(n + i) for i in range(value)]
            got = (
                spec.remember_many(keys, [value] * value),  # type: ignore[func-returns-value]
                table.remember_many(keys, [value] * value),
            )
        else:
            got = (spec.clear(), table.clear())  # type: ignore[func-returns-value]
        assert got[0] == got[1], (name, n)
        assert state(spec) == state(table), (name, n)


@needs_c
def test_a_large_table_compacts_and_keeps_what_it_should() -> None:
    """Many more keys than the bound (evictions, compactions of the entries and the
    arena, index rebuilds), with some keys in use recalled as the hot loop would."""
    spec, table = PythonRefTable(5000), KeyTable(5000)
    for n in range(60_000):
        key = b"card.cpu host=h%d dc=lga" % n
        spec.remember(key, n)
        table.remember(key, n)
        if n % 7 == 0:
            hot = b"card.cpu host=h%d dc=lga" % (n // 3)
            assert spec.lookup(hot) == table.lookup(hot)
    assert state(spec) == state(table)
    assert table.entries() == 5000
    # about 30 bytes of key, 24 of entry and 4-8 of index per entry, arena slack aside
    assert table.nbytes() < 5000 * 200


@pytest.mark.parametrize("make", TABLES)
def test_bounded_and_least_recently_used_first(make: Any) -> None:
    refs = make(10)
    for n in range(10):
        refs.remember(b"%d" % n, n)  # 0-4 old, 5-9 young
    refs.remember(b"10", 10)  # 0 goes; 5-9 join old behind 1-4
    assert refs.lookup(b"0") is None
    assert refs.recall(b"2") == 2  # used again
    for n in range(11, 16):
        refs.remember(b"%d" % n, n)
    assert [n for n in range(10) if refs.lookup(b"%d" % n) is not None] == [2, 7, 8, 9]
    assert refs.entries() <= 10
    assert refs.evictions == 6


@pytest.mark.parametrize("make", TABLES)
def test_refuses_what_it_cannot_hold(make: Any) -> None:
    with pytest.raises(ValueError, match="max_entries must be at least 1, not 0"):
        make(0)
    refs = make(3)
    with pytest.raises(TypeError):
        refs.remember("text", 1)
    with pytest.raises(TypeError):
        refs.remember(b"k", None)
    assert refs.get("text") is None
    assert "text" not in refs
    assert refs.recall("text") is None


@needs_c
def test_values_are_released() -> None:
    """Evicted, replaced and cleared values lose the table's reference."""
    table = KeyTable(4)
    value = object()
    before = sys.getrefcount(value)
    for n in range(20):
        table.remember(b"%d" % n, value)
    assert sys.getrefcount(value) == before + 4
    table.remember(b"19", object())
    assert sys.getrefcount(value) == before + 3
    table.clear()
    gc.collect()
    assert sys.getrefcount(value) == before
    assert table.entries() == 0
    assert table.max_entries == 4


@pytest.mark.parametrize("make", TABLES)
def test_the_parsers_find_series_in_it(make: Any) -> None:
    refs = make(100)
    refs.remember(b"sys.cpu host=a", "A")
    long_tags = b"host=" + b"b" * 700  # past the compiled lookup's stack buffer
    refs.remember(b"sys.cpu " + long_tags, "B")
    lines: list[bytes | None] = [
        b"put sys.cpu 1700000000 1 host=a",
        b"put sys.cpu 1700000001 2.5 " + long_tags,
        b"put sys.cpu 1700000002 3 host=c",
    ]
    out: list[Any] = []
    assert take_known_puts(lines, 0, refs, out, 10) == 2
    assert out == [("A", 1700000000, 1), ("B", 1700000001, 2.5)]
    columns: list[list[Any]] = [[], [], [], [], []]
    assert take_new_plain(lines, 0, 10, refs, 8, *columns) == 0
    assert take_new_plain(lines, 2, 10, refs, 8, *columns) in (2, 3)


@needs_c
def test_encoded_lines_of_known_series_are_the_same_as_with_a_dict() -> None:
    layout = KeyLayout()
    key_a = make_series_key(layout, b"\0\0\1", [(b"\0\0\1", b"\0\0\2")])
    table, plain = KeyTable(10), {b"sys.cpu host=a": key_a}
    table.remember(b"sys.cpu host=a", key_a)
    lines: list[bytes | None] = [b"put sys.cpu 1700000000 %d host=a" % n for n in range(5)]
    rows_t: dict[bytes, dict[bytes, bytes]] = {}
    rows_d: dict[bytes, dict[bytes, bytes]] = {}
    assert take_known_puts_into(lines, 0, table, rows_t, 10) == take_known_puts_into(
        lines, 0, plain, rows_d, 10
    )
    assert rows_t == rows_d
    assert rows_t


#: a line's kind: mostly a put the parsers take, now and then one they do not
KINDS = [0] * 98 + [1, 2]


def _series_line(n: int, stamp: int, kind: int) -> bytes:
    """A put line of series ``n``, or (by ``kind``) one the parsers do not take."""
    tags = b"host=h%d" % n + (b" x=" + b"y" * 600 if n % 7 == 3 else b"")  # some too long
    if kind == 1:
        return b"putt m %d 1 " % stamp + tags
    if kind == 2:
        return b"put m %d 1.5x " % stamp + tags
    return b"put m %d %d " % (stamp, n) + tags


def _known_key(n: int) -> bytes:
    return b"m host=h%d" % n + (b" x=" + b"y" * 600 if n % 7 == 3 else b"")


@functools.cache
def _big_table(with_old: bool) -> Any:
    """A table past the size the compiled lookahead starts at (AHEAD_MIN_ENTRIES, 65,536
    young entries): series 0-45 young; ``with_old``: series 0-22 in the old generation."""
    layout = KeyLayout()
    table = KeyTable(140_000)  # young generation: up to 70,000 entries, then a turn

    def remember(numbers: range) -> None:
        uids = [(n + 1).to_bytes(3, "big") for n in numbers]
        refs = [make_series_key(layout, b"\0\0\1", [(b"\0\0\1", uid)]) for uid in uids]
        table.remember_many([_known_key(n) for n in numbers], refs)

    def fill(count: int, mark: bytes) -> None:
        table.remember_many([b"f%s %d" % (mark, i) for i in range(count)], [1] * count)

    if with_old:
        remember(range(23))
        fill(70_000 - 23, b"a")  # the turn: everything so far is old
        remember(range(23, 46))
        fill(66_000, b"b")
    else:
        remember(range(46))
        fill(66_000, b"b")
    return table


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(0, 150),
    st.integers(1, 150),
    st.booleans(),
)
def test_lines_looked_up_ahead_are_taken_as_one_by_one(
    seed: int, count: int, limit: int, with_old: bool
) -> None:
    """take_known_puts_into asks for a run's table probes ahead of its lines (a hint):
    the same lines taken and the same cells as the lookups one line at a time
    (take_known_puts, then encoded), with series in the old generation, unknown, with
    keys past the stack buffer and lines not taken among them (long runs of known lines:
    lines drawn from a seed)."""
    table = _big_table(with_old)
    rng = random.Random(seed)
    lines: list[bytes | None] = [
        _series_line(rng.randrange(48), 1_700_000_000 + rng.randrange(3 * 3600), rng.choice(KINDS))
        for _ in range(count)
    ]
    for start in (0, len(lines) // 3):
        rows: dict[bytes, dict[bytes, bytes]] = {}
        taken, added = take_known_puts_into(lines, start, table, rows, limit)
        points: list[Any] = []
        stop = take_known_puts(lines, start, table, points, limit)
        assert taken == stop - start == len(points)
        expected: dict[bytes, dict[bytes, bytes]] = {}
        assert added == encode_points_into(expected, points)
        assert rows == expected
