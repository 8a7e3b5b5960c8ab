"""A map bounded by ``tsd.core.series_cache.size`` that evicts the entries used least
recently (approximately) and costs a hit nothing: the ingest service's series refs, the
protocols' ref caches, a telnet worker's refs and meta tracking's written TSUIDs. Pure.

Why not an exact LRU: a hit is the hot path of every known series' point, and the hot
loops look refs up at C speed in a plain dict (``map(refs.get, keys)`` over a telnet
read, the compiled ``take_known_puts_into``, /api/put's and remote write's parsers). An
LRU's move to the end on each hit (an ``OrderedDict.move_to_end``, or a dict pop and
insert) is a Python step per point, dearer than the rest of a known point's way in. So
recency is tracked as a second chance (CLOCK's reference bit, kept as membership):

* the map itself (a ``dict``) is the *young* generation, where hits land untouched;
* *old* holds earlier generations' entries not used since, oldest generation first. A
  lookup that misses the map (the slow path of a point, before its series is resolved
  again) calls :meth:`RecentMap.recall`, which moves the entry back into the map: once
  per series per generation, never per point;
* the map holds at most :func:`young_bound` (all but an eighth of ``max_entries``):
  full, it joins old whole (after the entries already there) and starts again empty.
  Young and old together hold at most ``max_entries``: a new entry past that evicts the
  first of old, the one least recently inserted or recalled.

Costs: a hit, nothing beyond ``dict.get``; an insertion or a recall O(1) amortised (a
generation's turn moves at most ``max_entries`` keys, once per :func:`young_bound`
insertions and recalls). An entry is evicted only once at least ``max_entries // 8``
others were inserted after its last use (as the UID caches', tsd/uid/cache.py, but old
is eaten from its oldest end rather than dropped whole); with more series in use than
the young generation holds, the least recently used go first, and each comes back by its
slow path (the UID caches, not storage: no new UID): a recall each per generation, not a
point each. Why seven eighths and not half (issue 26): series in use are the young
generation's, and every one beyond it costs its slow path once per turn; in a cycle (a
point per series per interval) that is every point of every interval. At half, the
default bound of 5,000,000 served 2.5 M series without that; 4 M series at 10 s took
35 s an interval, most of it in the slow path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")

_MISSING = object()


def young_bound(max_entries: int) -> int:
    """The most entries the young generation holds: all but an eighth of the bound, so
    that series in use up to seven eighths of ``tsd.core.series_cache.size`` are hits,
    while an entry is still evicted only after an eighth of the bound of others came in
    (at least 1; tsd/protocol/_keytable.h's kt_append has the same rule)."""
    return max(1, max_entries - max_entries // 8)


class RecentMap(dict[_K, _V]):
    """A dict (the young generation: read it with ``get`` at C speed) with an old
    generation behind it, bounded together by ``max_entries``."""

    __slots__ = ("_at", "_old", "_order", "evictions", "max_entries")

    def __init__(self, max_entries: int) -> None:
        super().__init__()
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._old: dict[_K, _V] = {}
        #: old's keys in the order they entered the map (None once gone), and the next
        self._order: list[_K | None] = []
        self._at = 0
        #: entries dropped to stay within max_entries
        self.evictions = 0

    def entries(self) -> int:
        """Entries held, both generations."""
        return len(self) + len(self._old)

    def remember(self, key: _K, value: _V) -> None:
        """Keep ``key`` (in the young generation), evicting the least recently used
        entry when the map is full."""
        if key not in self:
            old = self._old
            new = not old or old.pop(key, _MISSING) is _MISSING  # else moved from old
            if new and len(self) + len(old) >= self.max_entries:
                self._evict()
            self._add(key, value)
            return
        self[key] = value

    def remember_many(self, keys: Sequence[_K], values: Sequence[_V]) -> None:
        """:meth:`remember` of each pair (``keys[i]`` -> ``values[i]``): in one dict update
        when old holds nothing and they fit the young generation (a burst of new series),
        else one by one."""
        if not self._old and len(self) + len(keys) < young_bound(self.max_entries):
            self.update(zip(keys, values, strict=True))
            return
        for key, value in zip(keys, values, strict=True):
            self.remember(key, value)

    def recall(self, key: _K) -> _V | None:
        """The value of ``key`` after a miss of ``get``: moved back from the old
        generation into the map (None when it is not held)."""
        old = self._old
        if not old:
            return None
        value = old.pop(key, _MISSING)
        if value is _MISSING:
            return None
        self._add(key, value)  # type: ignore[arg-type]  # not _MISSING: a _V
        return value  # type: ignore[return-value]

    def lookup(self, key: _K) -> _V | None:
        """``get``, then :meth:`recall` on a miss."""
        value = self.get(key)
        return self.recall(key) if value is None else value

    def clear(self) -> None:
        super().clear()
        self._old = {}
        self._order = []
        self._at = 0

    def _add(self, key: _K, value: _V) -> None:
        """A key new to the map; the map joins old first when it holds its young_bound."""
        if len(self) >= young_bound(self.max_entries):
            self._turn()
        self[key] = value

    def _turn(self) -> None:
        """The map's entries join old, after those there, and the map starts empty."""
        old = self._old
        order = self._order[self._at :] if old else []
        order += self
        old.update(self)
        self._order, self._at = order, 0
        super().clear()

    def _evict(self) -> None:
        """Drop the first entry of old (the map holds at most young_bound, so old holds
        some, but with a bound under 8, where the map turns first)."""
        if not self._old:
            self._turn()
        old, order = self._old, self._order
        at = self._at
        while True:  # old's keys are all in order: one is found
            key = order[at]
            order[at] = None  # not kept alive by the list
            at += 1
            if key is not None and old.pop(key, _MISSING) is not _MISSING:
                break
        self.evictions += 1
        if old:
            self._at = at
        else:
            self._order = []
            self._at = 0
