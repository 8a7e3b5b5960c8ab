"""The telnet ref cache as one compact table: :data:`RefTable` (pure, but its C type).

Telnet's :data:`~tsd.protocol.telnet.TELNET_REF_CACHE` maps each series' line key
(:func:`~tsd.protocol.telnet.put_line_key`, bytes) to its ref, for up to
``tsd.core.series_cache.size`` series: with a million series a ``dict`` of bytes keys cost
about 116 bytes a series (a bytes object of 33 bytes of header plus the key, and the
dict's entry and index), and its resizes left freed blocks of up to hundreds of MB in the
heap. The compiled ``KeyTable`` (``tsd/protocol/_keytable.h``, in ``tsd.protocol._parse``)
keeps every key's bytes in one arena and a 24-byte entry and a 4-byte index slot per key,
in mapped pages of its own; the telnet parsers look a line up in it without building the
key's bytes object.

:class:`PythonRefTable` is its specification and its fallback (a missing helper is
reported as every other: :mod:`tsd.native`). Its semantics are those of
:class:`~tsd.recent.RecentMap` (a young generation read at C speed by ``get``, an old one
entries are recalled from, bounded together by ``max_entries``, the least recently added
or recalled evicted first) with the old generation kept in exact recency order: an entry
recalled and aged again is evicted at its last place, not its first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import tsd.native as native
from tsd.recent import young_bound

__all__ = ["PythonRefTable", "RefTable"]


class PythonRefTable(dict[bytes, Any]):
    """bytes key -> ref: the young generation (this dict) and the old one, oldest first,
    at most ``max_entries`` together; young holds at most ``young_bound`` of them."""

    __slots__ = ("_old", "evictions", "max_entries")

    def __init__(self, max_entries: int) -> None:
        super().__init__()
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._old: OrderedDict[bytes, Any] = OrderedDict()
        #: entries dropped to stay within max_entries
        self.evictions = 0

    def entries(self) -> int:
        """Entries held, both generations."""
        return len(self) + len(self._old)

    def remember(self, key: bytes, value: Any) -> None:
        """Keep ``key`` in the young generation (moved there from old if it was there),
        evicting the oldest entry when the table is full and the key is new."""
        if type(key) is not bytes:
            raise TypeError("KeyTable keys are bytes")
        if value is None:
            raise TypeError("KeyTable values are not None")
        if key in self:
            self[key] = value
            return
        if self._old.pop(key, None) is None and self.entries() >= self.max_entries:
            self._evict()
        self._add(key, value)

    def remember_many(self, keys: Sequence[bytes], values: Sequence[Any]) -> None:
        """:meth:`remember` of each pair."""
        if len(keys) != len(values):
            raise ValueError("remember_many: as many values as keys")
        for key, value in zip(keys, values, strict=True):
            self.remember(key, value)

    def recall(self, key: bytes) -> Any:
        """An old entry's value, moved to the young generation (None: not in old)."""
        value = self._old.pop(key, None)
        if value is not None:
            self._add(key, value)
        return value

    def lookup(self, key: bytes) -> Any:
        """``get``, then :meth:`recall`."""
        value = self.get(key)
        return self.recall(key) if value is None else value

    def clear(self) -> None:
        super().clear()
        self._old.clear()

    def old_items(self) -> list[tuple[bytes, Any]]:
        """The old generation's pairs, oldest first."""
        return list(self._old.items())

    def _add(self, key: bytes, value: Any) -> None:
        if len(self) >= young_bound(self.max_entries):
            self._old.update(self)  # the turn: young joins old, after it
            super().clear()
        self[key] = value

    def _evict(self) -> None:
        if not self._old:
            self._old.update(self)
            super().clear()
        self._old.popitem(last=False)
        self.evictions += 1


#: The table telnet's ref cache is: the compiled one where built
RefTable: Any = native.attribute("tsd.protocol._parse", "KeyTable", PythonRefTable)
