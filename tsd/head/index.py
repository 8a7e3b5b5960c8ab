"""The head's row key -> slot map: its specification and fallback, and the compiled one.

The compiled ``SlotIndex`` (``tsd/head/_runs.c``) keeps a row's slot as an int32 in an
open-addressing table, with the low 32 bits of its key's hash beside it, and compares keys
with the head's own list of slot -> row key (the keys are not copied): about 16 bytes a
row, where a dict took an entry and an int object per row (about 75 bytes;
bench/head_memory.py). The hash bits let the table grow without reading every key it
holds (issue 26: it grows at an hour's close, when the head adds a row per series).
:class:`DictSlotIndex` is the specification (a dict) and the fallback when the helper is
not built (tests/head/test_slot_index.py checks both answer alike).

The contract both keep: ``keys`` is the head's list, slot -> row key or None; a key's
slot is set in it before :meth:`~DictSlotIndex.add_many` and a key is removed before its
slot is cleared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import tsd.native as native

__all__ = ["DictSlotIndex", "SlotIndex", "new_slot_index"]


class SlotIndex(Protocol):
    """What the head asks of its index."""

    def get(self, key: bytes) -> int | None: ...

    def get_many(self, keys: Sequence[bytes]) -> list[int | None]: ...

    def add_many(self, keys: Sequence[bytes], slots: Sequence[int]) -> None: ...

    def remove(self, key: bytes) -> bool: ...

    def __len__(self) -> int: ...

    def __contains__(self, key: object) -> bool: ...


class DictSlotIndex:
    """The specification: a dict of row key -> slot."""

    __slots__ = ("_slots",)

    def __init__(self, keys: list[bytes | None]) -> None:
        del keys  # a dict holds its own references to the keys
        self._slots: dict[bytes, int] = {}

    def get(self, key: bytes) -> int | None:
        return self._slots.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[int | None]:
        return list(map(self._slots.get, keys))

    def add_many(self, keys: Sequence[bytes], slots: Sequence[int]) -> None:
        self._slots.update(zip(keys, slots, strict=True))

    def remove(self, key: bytes) -> bool:
        return self._slots.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots


_Compiled: Any = native.attribute("tsd.head._runs", "SlotIndex")


def new_slot_index(keys: list[bytes | None]) -> SlotIndex:
    """The compiled index over the head's ``keys`` where it is built, else the dict."""
    if _Compiled is not None:
        return _Compiled(keys)  # type: ignore[no-any-return]
    return DictSlotIndex(keys)
