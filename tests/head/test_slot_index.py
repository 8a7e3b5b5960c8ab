"""The head's row key -> slot index: the compiled open-addressing table (tsd/head/_runs.c)
answers as its specification, tsd.head.index.DictSlotIndex (a dict), over random runs of
adds, lookups and removals (growth, removed marks and the rebuilds they cause included),
with keys that are equal bytes but other objects; and the head uses it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.head.index import DictSlotIndex, new_slot_index

C: Any = native.attribute("tsd.head._runs", "SlotIndex")

needs_c = pytest.mark.skipif(C is None, reason="tsd/head/_runs.c is not built")

#: add (a batch of new keys), get, remove: on a small key space, so keys come back
OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "get", "remove"]),
        st.lists(st.integers(0, 300), min_size=1, max_size=40),
    ),
    max_size=60,
)


def _key(n: int) -> bytes:
    # a new object each time: the index compares bytes, not identity
    return b"\x00\x00\x01" + n.to_bytes(6, "big")


class _Head:
    """The head's side of the contract: a list slot -> key, free slots reused."""

    def __init__(self, index_type: Any) -> None:
        self.keys: list[bytes | None] = []
        self.index = index_type(self.keys)
        self.free: list[int] = []

    def add(self, numbers: list[int]) -> list[int]:
        new = [_key(n) for n in dict.fromkeys(numbers) if _key(n) not in self.index]
        slots = []
        for key in new:
            if self.free:
                s = self.free.pop()
            else:
                s = len(self.keys)
                self.keys.append(None)
            self.keys[s] = key
            slots.append(s)
        self.index.add_many(new, slots)
        return slots

    def remove(self, numbers: list[int]) -> list[bool]:
        done = []
        for n in numbers:
            key = _key(n)
            s = self.index.get(key)
            done.append(self.index.remove(key))
            if s is not None:
                self.keys[s] = None
                self.free.append(s)
        return done


def _run(index_type: Any, ops: list[tuple[str, list[int]]]) -> list[Any]:
    head = _Head(index_type)
    out: list[Any] = []
    for op, numbers in ops:
        if op == "add":
            out.append(head.add(numbers))
        elif op == "get":
            out.append(head.index.get_many([_key(n) for n in numbers]))
            out.append([_key(n) in head.index for n in numbers])
        else:
            out.append(head.remove(numbers))
        out.append(len(head.index))
    return out


@pytest.mark.slow
@needs_c
@settings(max_examples=300, deadline=None)
@given(OPS)
def test_the_compiled_index_answers_as_the_dict(ops: list[tuple[str, list[int]]]) -> None:
    assert _run(C, ops) == _run(DictSlotIndex, ops)


@needs_c
def test_the_table_grows_and_shrinks_with_the_keys() -> None:
    head = _Head(C)
    head.add(list(range(100_000)))
    assert len(head.index) == 100_000
    # at most 3/4 full, at least 3/8 (a power of two)
    assert 100_000 * 4 <= head.index.table_size() * 3 <= 100_000 * 8
    assert head.index.get_many([_key(n) for n in (0, 99_999, 100_000)]) == [0, 99_999, None]
    head.remove(list(range(99_000)))
    assert len(head.index) == 1_000
    assert head.index.table_size() <= 4096  # rebuilt smaller once mostly removed
    assert head.index.get(_key(99_500)) == 99_500
    assert head.index.get(_key(5)) is None


@needs_c
def test_keys_must_be_bytes() -> None:
    index = C([])
    with pytest.raises(TypeError, match="bytes"):
        index.get("a str")
    with pytest.raises(ValueError, match="as many slots as keys"):
        index.add_many([b"a"], [])
    # a key that is not bytes in a later block (they go 16 at a time, the next one's
    # probes asked for ahead): the keys before it are in, as a dict update leaves them
    keys: list[bytes | str] = [b"k%d" % n for n in range(40)]
    keys[37] = "a str"
    index = C(keys)
    with pytest.raises(TypeError, match="bytes"):
        index.add_many(keys, range(40))
    assert len(index) == 37
    assert index.get_many(keys[:37]) == list(range(37))
    with pytest.raises(TypeError, match="bytes"):
        index.get_many(keys)


def test_the_head_takes_the_compiled_index_where_it_is_built() -> None:
    index = new_slot_index([])
    assert type(index) is (DictSlotIndex if C is None else C)
