"""tsd.uid._table's UidTable against its specification, the dict it replaces in a
UidCache generation (tsd/uid/cache.py): the same operations on both, with hypothesis,
answer the same and leave the same entries in the same order; and a UidCache over the
tables against one over dicts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.uid.cache import UidCache, compiled_tables

_table = native.load("tsd.uid._table")
pytestmark = pytest.mark.skipif(
    _table is None, reason="tsd.uid._table is not built (or hidden by TSD_DISABLE_NATIVE)"
)

#: names: ASCII, Latin-1, beyond the BMP, lone surrogates (a str may hold them), empty
names = st.one_of(
    st.sampled_from(["", "a", "b", "host", "web01", "é", "日本", "\ud800", "x\udfffy"]),
    st.text(max_size=12),
    st.from_regex(r"[a-z]{1,3}[0-9]{0,3}", fullmatch=True),
)
#: UIDs of OpenTSDB's widths, 1 to 8 bytes, a few values each so keys repeat
uids = st.builds(
    lambda width, value: (value % (1 << (8 * width))).to_bytes(width, "big"),
    st.integers(1, 8),
    st.integers(0, 40),
)


def table_ops(keys: st.SearchStrategy[Any], values: st.SearchStrategy[Any]) -> Any:
    key_value = st.tuples(keys, values)
    return st.lists(
        st.one_of(
            st.tuples(st.just("set"), key_value),
            st.tuples(st.just("get"), keys),
            st.tuples(st.just("pop"), keys),
            st.tuples(st.just("del"), keys),
            st.tuples(st.just("in"), keys),
            st.tuples(st.just("item"), keys),
            st.tuples(st.just("update"), st.lists(key_value, max_size=30)),
            st.tuples(st.just("clear"), st.none()),
        ),
        max_size=120,
    )


def apply(table: Any, op: str, arg: Any) -> Any:
    """One operation's outcome: its answer, or the exception's type."""
    try:
        if op == "set":
            table[arg[0]] = arg[1]
            return None
        if op == "get":
            return table.get(arg), table.get(arg, "fallback")
        if op == "pop":
            return table.pop(arg, "fallback")
        if op == "del":
            del table[arg]
            return None
        if op == "in":
            return arg in table
        if op == "item":
            return table[arg]
        if op == "update":
            table.update(arg)
            return None
        table.clear()
        return None
    except KeyError:
        return KeyError


def check_same(ops: list[tuple[str, Any]], reverse: bool) -> None:
    spec: dict[Any, Any] = {}
    table = _table.UidTable(reverse=reverse)
    assert table.reverse is reverse
    for op, arg in ops:
        assert apply(table, op, arg) == apply(spec, op, arg), (op, arg)
        assert len(table) == len(spec)
        assert bool(table) == bool(spec)
    assert table.items() == list(spec.items())


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(table_ops(names, uids))
def test_a_forward_table_behaves_as_a_dict(ops: list[tuple[str, Any]]) -> None:
    check_same(ops, reverse=False)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(table_ops(uids, names))
def test_a_reverse_table_behaves_as_a_dict(ops: list[tuple[str, Any]]) -> None:
    check_same(ops, reverse=True)


def test_many_entries_removed_and_added_keep_their_order_and_bytes() -> None:
    """Past the compaction of dead entries (a quarter of the array) and of their names'
    bytes (half of the arena), the rebuilt index and arena still answer as the dict."""
    spec: dict[str, bytes] = {}
    table = _table.UidTable()
    for round_ in range(6):
        for i in range(20_000):
            name, uid = f"name-{round_}-{i}-" + "x" * (i % 50), (i + round_).to_bytes(4, "big")
            table[name] = uid
            spec[name] = uid
        for name in list(spec)[::3] + list(spec)[1::7]:
            if name in spec:
                assert table.pop(name) == spec.pop(name)
    assert table.items() == list(spec.items())
    assert all(table.get(name) == uid for name, uid in spec.items())


def test_a_uid_outside_one_to_eight_bytes_is_never_present_and_refused_as_a_value() -> None:
    forward, reverse = _table.UidTable(), _table.UidTable(reverse=True)
    for bad in (b"", b"123456789"):
        with pytest.raises(ValueError, match="1 to 8 bytes"):
            forward["name"] = bad
        with pytest.raises(ValueError, match="1 to 8 bytes"):
            reverse[bad] = "name"
        assert reverse.get(bad) is None
        assert bad not in reverse
    assert len(forward) == len(reverse) == 0


def test_keys_and_values_of_the_wrong_type_are_refused() -> None:
    forward, reverse = _table.UidTable(), _table.UidTable(reverse=True)
    with pytest.raises(TypeError):
        forward[b"name"] = b"\x01"
    with pytest.raises(TypeError):
        forward["name"] = "uid"
    with pytest.raises(TypeError):
        reverse[b"\x01"] = b"name"
    with pytest.raises(TypeError):
        reverse.get("uid")


cache_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.tuples(names, uids)),
        st.tuples(st.just("put_many"), st.dictionaries(names, uids, max_size=12)),
        st.tuples(st.just("put_id"), st.tuples(names, uids)),
        st.tuples(st.just("get_id"), names),
        st.tuples(st.just("get_ids"), st.lists(names, max_size=12, unique=True)),
        st.tuples(st.just("get_name"), uids),
        st.tuples(st.just("get_names"), st.lists(uids, max_size=12)),
        st.tuples(st.just("discard_name"), names),
        st.tuples(st.just("discard_id"), uids),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=80,
)


def call(cache: UidCache, op: str, arg: Any) -> Any:
    if op == "put":
        return cache.put(*arg)
    if op == "put_id":
        return cache.put_id(*arg)
    if op == "put_many":
        return cache.put_many(list(arg), list(arg.values()))
    if op == "get_ids":
        found, misses = cache.get_ids(arg)
        return list(found.items()), misses
    if op == "get_names":
        found_names, missing = cache.get_names(arg)
        return list(found_names.items()), missing
    if op == "clear":
        return cache.clear()
    return getattr(cache, op)(arg)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), cache_ops)
def test_a_cache_over_tables_behaves_as_one_over_dicts(
    max_entries: int, ops: list[tuple[str, Any]]
) -> None:
    assert compiled_tables()
    spec, compiled = UidCache(max_entries, compiled=False), UidCache(max_entries)
    for op, arg in ops:
        assert call(compiled, op, arg) == call(spec, op, arg), (op, arg)
        assert (compiled.id_entries, compiled.name_entries, compiled.evictions) == (
            spec.id_entries,
            spec.name_entries,
            spec.evictions,
        )


def test_a_uid_renamed_over_and_over_keeps_its_table_bounded() -> None:
    """A reverse entry's new name is appended and the old one's bytes are dead: the arena
    is repacked once they outweigh the live ones (and the same name again adds nothing)."""
    table = _table.UidTable(reverse=True)
    table[b"\x00\x00\x01"] = "kept"
    for i in range(200_000):
        table[b"\x00\x00\x02"] = f"name-{i % 7}-" + "x" * 40
        table[b"\x00\x00\x03"] = "same"
    assert table.nbytes() < 1 << 20
    assert table.items() == [
        (b"\x00\x00\x01", "kept"),
        (b"\x00\x00\x02", f"name-{199_999 % 7}-" + "x" * 40),
        (b"\x00\x00\x03", "same"),
    ]
