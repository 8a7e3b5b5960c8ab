"""A bounded, bidirectional name <-> UID cache for one kind (metrics, tagk or tagv). Pure, sync.

Memory is the design constraint: a TSD may cache millions of names, and the
goal is at most 250 bytes per 20-character name for both directions together
(``bench/uid_cache.py`` measures it: about 180 bytes over dicts on CPython 3.11, about 105
over the compiled tables below). So:

* each direction is a plain ``dict`` (about 40 bytes a slot), not an
  ``OrderedDict`` (its linked list adds about 50 more);
* the two directions share one ``str`` and one ``bytes`` object per mapping:
  ``put`` stores the same objects in both, so the payload is paid once;
* recency is tracked without touching anything on a hit: each direction is
  split into two generations, ``young`` and ``old``. A hit in ``young`` is a
  single ``dict.get``. A hit in ``old`` moves the entry to ``young``. When
  ``young`` holds half the budget, ``old`` is dropped wholesale and ``young``
  becomes ``old``. This approximates LRU: an entry used at least once during
  the last ``max_entries // 2`` insertions or promotions is never evicted, and
  no direction ever holds more than ``max_entries`` entries.

The two directions are bounded and evicted independently (as OpenTSDB's
``tsd.uid.lru.name.size`` and ``tsd.uid.lru.id.size`` caches are), so either
may miss while the other still hits.

Where the compiled helper ``tsd.uid._table`` is built, each generation of each direction
is its ``UidTable`` instead of a dict: the same logic below runs over either (a dict is
the table's specification and fallback, ``tests/uid/test_uid_table.py``), and a table
keeps a mapping as a 24-byte entry, the name's bytes and an index slot, no Python object:
about 80 bytes a name for the two directions instead of about 185, which at a tag value
per series is a third of a kilobyte per series less at millions of series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping, Sequence
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any, TypeVar, cast

import tsd.native as native

_K = TypeVar("_K")
_V = TypeVar("_V")

#: the compiled generation table, or None (dicts)
_UidTable = native.attribute("tsd.uid._table", "UidTable")

#: The smallest budget: one generation of one entry.
MIN_MAX_ENTRIES = 1


class UidCache:
    """name (str) -> uid (bytes) and uid -> name, each direction bounded by ``max_entries``."""

    __slots__ = (
        "max_entries",
        "_generation_max",
        "_ids",
        "_ids_old",
        "_names",
        "_names_old",
        "_new_ids",
        "_new_names",
        "evictions",
    )

    def __init__(self, max_entries: int, *, compiled: bool = True) -> None:
        """``compiled``: each generation a compiled ``UidTable`` where the helper is built
        (False: dicts, the specification, whatever is built)."""
        if max_entries < MIN_MAX_ENTRIES:
            raise ValueError(f"max_entries must be at least {MIN_MAX_ENTRIES}, not {max_entries}")
        self.max_entries = max_entries
        # With a budget of 1 there is room for one generation only (old stays empty).
        self._generation_max = max(1, max_entries // 2)
        self._new_ids, self._new_names = _table_factories(compiled)
        self._ids = self._new_ids()  # forward, young generation
        self._ids_old = self._new_ids()
        self._names = self._new_names()  # reverse, young generation
        self._names_old = self._new_names()
        #: entries dropped to stay within the budget, both directions
        self.evictions = 0

    # -- lookups (the hot path) ---------------------------------------------------------------

    def get_id(self, name: str) -> bytes | None:
        """The cached UID of ``name``, or None."""
        uid = self._ids.get(name)
        if uid is None:
            uid = self._ids_old.pop(name, None)
            if uid is not None:
                self._store_id(name, uid)
        return uid

    def get_ids(self, names: Sequence[str]) -> tuple[dict[str, bytes], list[str]]:
        """:meth:`get_id` of each of ``names`` (distinct): the UIDs cached, and the names
        not cached, each in ``names`` order. The young generation is read for them all at
        C speed (a burst of new series asks for thousands of names a batch, most of them
        missing); when an old generation exists, the names it missed are looked for there
        one by one."""
        uids = list(map(self._ids.get, names))
        missed = list(map(is_, uids, repeat(None)))
        if not any(missed):
            return dict(zip(names, cast(list[bytes], uids), strict=True)), []
        if self._ids_old:  # some may be in the old generation: name by name, in order
            found, misses = {}, []
            get_id = self.get_id
            for name, uid in zip(names, uids, strict=True):
                if uid is None:
                    uid = get_id(name)
                if uid is None:
                    misses.append(name)
                else:
                    found[name] = uid
            return found, misses
        hits = map(is_not, uids, repeat(None))
        found = dict(compress(zip(names, cast(list[bytes], uids), strict=True), hits))
        return found, list(compress(names, missed))

    def get_name(self, uid: bytes) -> str | None:
        """The cached name of ``uid``, or None."""
        name = self._names.get(uid)
        if name is None:
            name = self._names_old.pop(uid, None)
            if name is not None:
                self._store_name(uid, name)
        return name

    def get_names(self, uids: Iterable[bytes]) -> tuple[dict[bytes, str], list[bytes]]:
        """:meth:`get_name` of each of ``uids``: the names cached, and the uids not (the
        10,000 tag values of a group-by's answer in one call)."""
        young, get_name = self._names.get, self.get_name
        found: dict[bytes, str] = {}
        missing: list[bytes] = []
        for uid in uids:
            name = young(uid) or get_name(uid)
            if name is None:
                missing.append(uid)
            else:
                found[uid] = name
        return found, missing

    # -- updates ------------------------------------------------------------------------------

    def put(self, name: str, uid: bytes) -> None:
        """Cache the mapping in both directions, sharing the two objects between them."""
        self._ids_old.pop(name, None)
        self._store_id(name, uid)
        self._names_old.pop(uid, None)
        self._store_name(uid, name)

    def put_many(self, names: list[str], uids: list[bytes]) -> None:
        """:meth:`put` of each pair (``names[i]`` -> ``uids[i]``, all distinct), in a few
        dict operations when the young generations have room for them all (a batch of new
        names); one by one otherwise."""
        if (
            len(self._ids) + len(names) > self._generation_max
            or len(self._names) + len(uids) > self._generation_max
        ):
            for name, uid in zip(names, uids, strict=True):
                self.put(name, uid)
            return
        if self._ids_old:
            for name in names:
                self._ids_old.pop(name, None)
        if self._names_old:
            for uid in uids:
                self._names_old.pop(uid, None)
        self._ids.update(zip(names, uids, strict=True))
        self._names.update(zip(uids, names, strict=True))

    def put_id(self, name: str, uid: bytes) -> None:
        """Cache name -> uid only (an alias whose stored name is another string)."""
        self._ids_old.pop(name, None)
        self._store_id(name, uid)

    def discard_name(self, name: str) -> None:
        """Forget ``name`` -> uid (the reverse entry is left alone)."""
        self._ids.pop(name, None)
        self._ids_old.pop(name, None)

    def discard_id(self, uid: bytes) -> None:
        """Forget uid -> name (the forward entry is left alone)."""
        self._names.pop(uid, None)
        self._names_old.pop(uid, None)

    def clear(self) -> None:
        """Drop everything (``/api/dropcaches``). Eviction counts are kept."""
        self._ids = self._new_ids()
        self._ids_old = self._new_ids()
        self._names = self._new_names()
        self._names_old = self._new_names()

    # -- size accounting ----------------------------------------------------------------------

    @property
    def id_entries(self) -> int:
        """Forward (name -> uid) entries held."""
        return len(self._ids) + len(self._ids_old)

    @property
    def name_entries(self) -> int:
        """Reverse (uid -> name) entries held."""
        return len(self._names) + len(self._names_old)

    def __len__(self) -> int:
        """Entries in both directions, as OpenTSDB's ``uid.cache-size`` counts them."""
        return self.id_entries + self.name_entries

    def mapped_bytes(self) -> int:
        """The bytes of the compiled tables' arrays (mapped pages, not the Python heap:
        tracemalloc does not see them); 0 over dicts."""
        tables: tuple[Any, ...] = (self._ids, self._ids_old, self._names, self._names_old)
        return sum(table.nbytes() for table in tables if not isinstance(table, dict))

    # -- internals ----------------------------------------------------------------------------

    def _store_id(self, name: str, uid: bytes) -> None:
        if name not in self._ids and len(self._ids) >= self._generation_max:
            self._ids, self._ids_old = self._rotated(self._ids, self._ids_old, self._new_ids)
        self._ids[name] = uid

    def _store_name(self, uid: bytes, name: str) -> None:
        if uid not in self._names and len(self._names) >= self._generation_max:
            self._names, self._names_old = self._rotated(
                self._names, self._names_old, self._new_names
            )
        self._names[uid] = name

    def _rotated(
        self,
        young: MutableMapping[_K, _V],
        old: MutableMapping[_K, _V],
        new: Callable[[], MutableMapping[_K, _V]],
    ) -> tuple[MutableMapping[_K, _V], MutableMapping[_K, _V]]:
        """(new young, new old) once ``young`` is full: the old generation is dropped and
        the young one takes its place (dropped too when the budget is one entry)."""
        self.evictions += len(old)
        if self.max_entries > 1:
            return new(), young
        self.evictions += len(young)
        return new(), new()


def _table_factories(
    compiled: bool,
) -> tuple[Callable[[], MutableMapping[str, bytes]], Callable[[], MutableMapping[bytes, str]]]:
    """The constructors of a forward and a reverse generation: compiled tables, or dicts."""
    if compiled and _UidTable is not None:
        table = _UidTable
        return (lambda: cast(MutableMapping[str, bytes], table())), (
            lambda: cast(MutableMapping[bytes, str], table(reverse=True))
        )
    return dict, dict


def compiled_tables() -> bool:
    """Whether a cache's generations are compiled tables (the helper is built and shown)."""
    return _UidTable is not None
