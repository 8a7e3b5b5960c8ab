"""The head: the embedded engine's open row-hours, in memory. Pure (numpy, no loop).

Theory of operation (architecture §1.2a; docs/write-path.md says when a row leaves):

* A row is one series over one hour (an OpenTSDB row key). The head keeps, per row, its
  points' qualifiers in one ``bytearray`` and their values in another, in the order they
  arrived: the body of an OpenTSDB compacted cell, built as the writer's batches come
  (:meth:`Head.add_runs`, straight from the write-ahead log record's runs of bytes, so a
  batch costs a few Python steps per row and none per point).
* A row is *clean* while every point it received came strictly after the previous one in
  time: its cells are then exactly the compacted cell's points, in order, and the cell is
  the runs joined (:func:`tsd.codec.join_compacted`). Clean-ness is checked per batch with
  numpy. Any other row (a point out of order, the same time again, seconds and
  milliseconds in one batch) is read as what the single cells would have been: one cell
  per qualifier, the last value written to it winning (a second put of a cell replaces
  it), in qualifier order, so OpenTSDB's compaction rules (:func:`tsd.codec.compact_row`)
  apply to it unchanged.
* Readers take a :class:`HeadSnapshot` of the rows a scan would read (before reading
  storage: a row leaving the head meanwhile is then read from one or the other, or both,
  and identical duplicates fold). A row that storage holds too (late points for an hour
  already written) is read as its stored cells followed by the head's, the newer ones,
  exactly as its merge will write it.
* Rows leave through :meth:`Head.take` / :meth:`Head.release`: the points taken are dropped
  once storage holds them; points that arrived meanwhile stay.
* Bytes are counted (qualifiers, values, and a fixed cost per row) against the writer's
  bound, ``tsd.storage.head.max_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, cast

import numpy as np
import numpy.typing as npt

import tsd.native as native
from tsd.codec import KeyLayout, join_compacted
from tsd.codec.const import FAMILY, MAX_TIMESPAN, MS_BYTE_FLAG, TIMESTAMP_BYTES
from tsd.storage.base import Cell, CellBlock, Row, ScanSpec

__all__ = ["Head", "HeadRow", "HeadRuns", "HeadSnapshot", "Taken"]

#: Bytes counted per row beyond its points: the key, the row object, two bytearrays and
#: the index entries (measured with sys.getsizeof, rounded up).
ROW_OVERHEAD_BYTES = 360

# the compiled helper (setup.py); python_run_bounds is its fallback and spec
_c_run_bounds: Any = native.attribute("tsd.codec._encode", "run_bounds")

#: a row key, its cell count, its qualifiers joined, its values joined
Run = tuple[bytes, int, bytes, bytes]


@dataclass(slots=True, eq=False)
class HeadRow:
    """One open row-hour: its points' qualifiers and values, in arrival order."""

    key: bytes
    base_time_s: int
    qualifiers: bytearray = field(default_factory=bytearray)
    values: bytearray = field(default_factory=bytearray)
    count: int = 0
    ms_count: int = 0
    #: every point strictly after the one before (see the module docstring)
    clean: bool = True
    last_offset_ms: int = -1
    #: wall clock (s) of the last point
    written_at: float = 0.0
    #: the oldest and newest writer batch whose points the row holds
    first_batch: int = 0
    last_batch: int = 0


def _cells_of(
    qualifiers: bytes, values: bytes, count: int, ms_count: int, clean: bool
) -> list[tuple[bytes, bytes]]:
    if not count:
        return []
    if clean:
        return [join_compacted(qualifiers, values, count, ms_count > 0, ms_count < count)]
    return sorted(_split(qualifiers, values).items())


def _split(qualifiers: bytes, values: bytes) -> dict[bytes, bytes]:
    """qualifier -> value of a run of points as the writer encodes them (2- or 4-byte
    qualifiers whose flags give the value's length); a later point replaces an earlier
    one of the same qualifier."""
    cells: dict[bytes, bytes] = {}
    q_at = v_at = 0
    end = len(qualifiers)
    while q_at < end:
        width = 4 if qualifiers[q_at] & MS_BYTE_FLAG == MS_BYTE_FLAG else 2
        qualifier = qualifiers[q_at : q_at + width]
        v_len = (qualifier[-1] & 0x7) + 1
        cells[qualifier] = values[v_at : v_at + v_len]
        q_at += width
        v_at += v_len
    return cells


@dataclass(frozen=True, slots=True)
class Taken:
    """Points of one row handed to storage: its cells, and how much of the row they are."""

    key: bytes
    cells: list[tuple[bytes, bytes]]
    #: the points as arrived: qualifiers joined, values joined
    qualifiers: bytes
    values: bytes
    qualifier_bytes: int
    value_bytes: int
    count: int
    ms_count: int
    last_batch: int

    def single_cells(self) -> list[tuple[bytes, bytes]]:
        """The points as single cells (the last value of a qualifier), in qualifier order."""
        return sorted(_split(self.qualifiers, self.values).items())


#: keys from which a row filter's pairs are checked over all keys at once (numpy)
_VECTOR_KEYS = 64


class Head:
    """The open row-hours of one data table."""

    def __init__(self, layout: KeyLayout) -> None:
        self._layout = layout
        self._prefix_end = layout.salt_width + layout.metric_width
        self._rows: dict[bytes, HeadRow] = {}
        #: (salt + metric, base time) -> its rows: what a scan of hours reads
        self._groups: dict[tuple[bytes, int], dict[bytes, HeadRow]] = {}
        #: groups of a closed hour with no idle row when last looked at: the oldest last
        #: write of their rows then (see :meth:`closed`)
        self._busy_since: dict[tuple[bytes, int], float] = {}
        self.bytes = 0
        self.points = 0
        #: counts the calls of :meth:`release` (the only way the oldest batch held grows)
        self.releases = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: bytes) -> bool:
        return key in self._rows

    def get(self, key: bytes) -> HeadRow | None:
        return self._rows.get(key)

    # -- adding -------------------------------------------------------------------------------

    def add_runs(self, runs: Sequence[Run], batch: int, now: float) -> int:
        """Add a writer batch's rows (``(row key, cells, qualifiers, values)``, as
        :func:`tsd.wal.record.decode_row_runs` gives them); the points added."""
        rows, groups = self._rows, self._groups
        added = grown = 0
        at = self._prefix_end
        # the group of the last new row: a batch's new rows mostly share a metric and hour
        last_head = b""
        base = 0
        members: dict[bytes, HeadRow] = {}
        for (key, count, qualifiers, values), (ok, first, last) in zip(
            runs, _offset_bounds(runs), strict=True
        ):
            if not count:
                continue
            q_size = len(qualifiers)
            row = rows.get(key)
            if row is None:  # a new row (every series, once an hour): built whole
                head = key[: at + TIMESTAMP_BYTES]  # prefix and base time: the row's group
                if head != last_head:
                    last_head = head
                    base = int.from_bytes(head[at:], "big")
                    group = (key[:at], base)
                    found = groups.get(group)
                    if found is None:
                        found = groups[group] = {}
                    members = found
                rows[key] = row = HeadRow(
                    key,
                    base,
                    bytearray(qualifiers),
                    bytearray(values),
                    count,
                    (q_size - 2 * count) // 2,
                    ok,
                    last,
                    now,
                    batch,
                    batch,
                )
                members[key] = row
                grown += ROW_OVERHEAD_BYTES + q_size + len(values)
                added += count
                continue
            if not row.count:
                row.first_batch = batch
            row.qualifiers += qualifiers
            row.values += values
            if row.clean:
                row.clean = ok and first > row.last_offset_ms
                row.last_offset_ms = last
            row.count += count
            if q_size != 2 * count:  # some in milliseconds (4-byte qualifiers)
                row.ms_count += (q_size - 2 * count) // 2
            row.written_at = now
            row.last_batch = batch
            grown += q_size + len(values)
            added += count
        self.bytes += grown
        self.points += added
        return added

    # -- reading ------------------------------------------------------------------------------

    def snapshot(self, specs: Iterable[ScanSpec]) -> HeadSnapshot:
        """The rows the scans ``specs`` would read (key range and row filter), copied."""
        found: dict[bytes, HeadRow] = {}
        for spec in specs:
            row_filter = spec.row_filter
            for members in self._members_in(spec):
                if row_filter is None:
                    found.update(members)
                    continue
                keys: Iterable[bytes] = members
                if row_filter.contains:
                    keys = self._carrying(list(members), row_filter.contains)
                found.update((k, members[k]) for k in keys if row_filter.matches(k))
        return HeadSnapshot(found.values())

    def _carrying(self, keys: list[bytes], contains: tuple[tuple[bytes, ...], ...]) -> list[bytes]:
        """The ``keys`` that hold, for every entry of ``contains``, one of its byte strings
        (a row filter's necessary condition): when those are tag pairs and the keys have
        one length, checked at the pair positions over all keys at once (a dashboard's
        ``host=a|b|c`` of 10,000 series: no regexp per row), else by ``in``."""
        pair = self._layout.tag_pair_width
        if (
            len(keys) < _VECTOR_KEYS
            or any(len(s) != pair for entry in contains for s in entry)
            or len({len(k) for k in keys}) != 1
        ):
            return [k for k in keys if all(any(s in k for s in e) for e in contains)]
        width = len(keys[0])
        start = self._layout.tags_start
        if (width - start) % pair:
            return [k for k in keys if all(any(s in k for s in e) for e in contains)]
        matrix = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), width)
        # each key's tag pairs as one integer per pair (pairs are at most 8 bytes here)
        if pair > 8:
            return [k for k in keys if all(any(s in k for s in e) for e in contains)]
        tags = matrix[:, start:].reshape(len(keys), -1, pair)
        weights = (256 ** np.arange(pair - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
        packed = (tags.astype(np.uint64) * weights).sum(axis=2, dtype=np.uint64)
        keep = np.ones(len(keys), dtype=np.bool_)
        for entry in contains:
            wanted = np.array([int.from_bytes(s, "big") for s in entry], dtype=np.uint64)
            keep &= np.isin(packed, wanted).any(axis=1)
        return [keys[i] for i in np.flatnonzero(keep).tolist()]

    def snapshot_keys(self, keys: Iterable[bytes]) -> HeadSnapshot:
        """The rows of the given keys that the head holds, copied."""
        rows = self._rows
        return HeadSnapshot(row for k in keys if (row := rows.get(k)) is not None)

    def _members_in(self, spec: ScanSpec) -> Iterator[Mapping[bytes, HeadRow]]:
        """The rows in the scan's key range, as mappings of key -> row (whole groups of
        an hour where the range is one metric's hours: no step per row)."""
        at = self._prefix_end
        start, stop = spec.start, spec.stop
        if len(start) == len(stop) == at + TIMESTAMP_BYTES and start[:at] == stop[:at]:
            # prefix + base time on both ends: the hours in between, group by group
            prefix = start[:at]
            first = int.from_bytes(start[at:], "big")
            last = int.from_bytes(stop[at:], "big")
            groups = self._groups
            if (last - first) // MAX_TIMESPAN > len(groups):
                hours: Iterable[int] = sorted(b for p, b in groups if p == prefix)
            else:
                hours = range(first - first % MAX_TIMESPAN, last, MAX_TIMESPAN)
            for base in hours:
                if first <= base < last and (members := groups.get((prefix, base))):
                    yield members
            return
        yield {
            key: row for key, row in self._rows.items() if start <= key and (not stop or key < stop)
        }

    # -- leaving ------------------------------------------------------------------------------

    def closed(self, now: float, grace_s: float, limit: int | None = None) -> list[bytes]:
        """Rows whose hour ended ``grace_s`` ago and that got no point for ``grace_s``
        (docs/write-path.md), in key order; at most ``limit``, the oldest hours' first.

        The search stops at ``limit``: an hour of a million series closes at once and is
        written out a few thousand rows a tick, so each tick looks at about as many rows
        as it takes, not at (and sorts) every row still waiting."""
        keys: list[bytes] = []
        room = len(self._rows) if limit is None else limit
        quiet = self._busy_since
        for group, members in sorted(self._groups.items(), key=_hour_of_group):
            if room <= 0:
                break
            if group[1] + MAX_TIMESPAN + grace_s > now:
                continue
            since = quiet.get(group)
            if since is not None and now - since < grace_s:
                continue  # no row of it can be idle yet: not looked at row by row
            idle = (k for k, row in members.items() if now - row.written_at >= grace_s)
            found = list(islice(idle, room))
            if found:
                quiet.pop(group, None)
            else:
                # Every row got a point within grace_s. A row's last write only moves
                # later and new rows come later still, so none is idle before the
                # oldest last write is grace_s old: a backfilled hour of a million
                # rows is not scanned every tick while it is written to.
                quiet[group] = min(row.written_at for row in members.values())
            keys += found
            room -= len(found)
        keys.sort()
        return keys

    def oldest(self, target_bytes: int) -> list[bytes]:
        """Rows, oldest hour first and then least recently written, whose points add up to
        at least ``target_bytes`` (the head is over its bound), in key order."""
        keys: list[bytes] = []
        freed = 0
        for group in sorted(self._groups, key=lambda g: g[1]):
            members = sorted(self._groups[group].values(), key=lambda r: r.written_at)
            for row in members:
                keys.append(row.key)
                freed += len(row.qualifiers) + len(row.values) + ROW_OVERHEAD_BYTES
                if freed >= target_bytes:
                    keys.sort()
                    return keys
        keys.sort()
        return keys

    def all_keys(self) -> list[bytes]:
        return sorted(self._rows)

    def take(self, key: bytes) -> Taken | None:
        """The row's points as cells for storage (None when it has none); the row keeps
        them until :meth:`release`."""
        row = self._rows.get(key)
        if row is None or not row.count:
            return None
        qualifiers, values = bytes(row.qualifiers), bytes(row.values)
        return Taken(
            key,
            _cells_of(qualifiers, values, row.count, row.ms_count, row.clean),
            qualifiers,
            values,
            len(row.qualifiers),
            len(row.values),
            row.count,
            row.ms_count,
            row.last_batch,
        )

    def release(self, taken: Taken) -> None:
        """Storage holds ``taken``: drop those points (points added since stay)."""
        self.releases += 1
        row = self._rows.get(taken.key)
        if row is None:
            return
        del row.qualifiers[: taken.qualifier_bytes]
        del row.values[: taken.value_bytes]
        row.count -= taken.count
        row.ms_count -= taken.ms_count
        self.bytes -= taken.qualifier_bytes + taken.value_bytes
        self.points -= taken.count
        if row.count:
            # Only later batches' points are left; their order is checked again.
            row.first_batch = taken.last_batch + 1
            row.clean = False
            return
        del self._rows[taken.key]
        group = (taken.key[: self._prefix_end], row.base_time_s)
        members = self._groups[group]
        del members[taken.key]
        if not members:
            del self._groups[group]
            self._busy_since.pop(group, None)
        self.bytes -= ROW_OVERHEAD_BYTES

    def discard(self, keys: Iterable[bytes]) -> None:
        """Drop the rows ``keys`` and their points (a query with ``delete``)."""
        for key in keys:
            row = self._rows.get(key)
            if row is not None and row.count:
                q_size, v_size, count = len(row.qualifiers), len(row.values), row.count
                self.release(
                    Taken(key, [], b"", b"", q_size, v_size, count, row.ms_count, row.last_batch)
                )

    def oldest_batch(self) -> int | None:
        """The oldest writer batch some row still holds points of (None: none)."""
        return min((row.first_batch for row in self._rows.values() if row.count), default=None)


#: a row's points at the time of a snapshot: qualifiers, values, count, ms count, clean
_Copy = tuple[bytes, bytes, int, int, bool]


@dataclass(frozen=True, slots=True)
class HeadRuns:
    """Clean rows of seconds points, end to end: per row its key and point count, all
    qualifiers joined (2 bytes each) and all values joined (lengths from the flags). The
    query layer decodes them straight to arrays (:mod:`tsd.query.head_rows`)."""

    keys: list[bytes]
    counts: npt.NDArray[np.int64]
    qualifiers: bytes
    values: bytes


class HeadSnapshot:
    """The head's rows for one read, copied at once: every row's qualifiers joined end to
    end, its values likewise, and per row its key, point count, byte lengths and flags
    (arrays; one concatenation, no bytes object per row). Taken on the event loop (the
    head's only writer), read afterwards from any thread. Rows a stored row of the same
    key holds too are merged into it (:meth:`merge_into`); the rest are read on their own
    (:meth:`remaining`): the clean rows of seconds points, usually all of them, as one
    :class:`HeadRuns` straight from the joined bytes."""

    def __init__(self, rows: Iterable[HeadRow]) -> None:
        found = [row for row in rows if row.count]
        n = len(found)
        self._keys = [row.key for row in found]
        qualifiers = [row.qualifiers for row in found]
        values = [row.values for row in found]
        self._qualifiers = b"".join(qualifiers)
        self._values = b"".join(values)
        self._q_ends = np.cumsum(np.fromiter(map(len, qualifiers), np.int64, n))
        self._v_ends = np.cumsum(np.fromiter(map(len, values), np.int64, n))
        self._counts = np.fromiter(map(_COUNT, found), np.int64, n)
        self._ms_counts = np.fromiter(map(_MS_COUNT, found), np.int64, n)
        self._clean = np.fromiter(map(_CLEAN, found), np.bool_, n)
        self._left = np.ones(n, np.bool_)  # not merged into a stored row
        self._index: dict[bytes, int] | None = None

    def __len__(self) -> int:
        return int(np.count_nonzero(self._left))

    def _where(self) -> dict[bytes, int]:
        if self._index is None:
            self._index = dict(zip(self._keys, range(len(self._keys)), strict=True))
        return self._index

    def _copy(self, i: int) -> _Copy:
        q_start = int(self._q_ends[i - 1]) if i else 0
        v_start = int(self._v_ends[i - 1]) if i else 0
        return (
            self._qualifiers[q_start : int(self._q_ends[i])],
            self._values[v_start : int(self._v_ends[i])],
            int(self._counts[i]),
            int(self._ms_counts[i]),
            bool(self._clean[i]),
        )

    def keys(self) -> list[bytes]:
        """The keys of the rows copied (not yet merged into a stored row)."""
        return [k for k, left in zip(self._keys, self._left.tolist(), strict=True) if left]

    def shares(self, keys: Iterable[bytes]) -> bool:
        """True when the head holds rows of some of ``keys`` not merged yet."""
        if not len(self):
            return False
        where, left = self._where(), self._left
        if where.keys().isdisjoint(keys):
            return False
        return any((i := where.get(k)) is not None and left[i] for k in keys)

    def merge_into(self, block: CellBlock) -> CellBlock:
        """``block`` with the head's cells after the stored ones of each row both hold
        (the head's are newer); those rows are then no longer :meth:`remaining`."""
        if not self.shares(block.keys):
            return block
        where, left = self._where(), self._left
        merged = []
        for stored in block:
            i = where.get(stored.key)
            if i is None or not left[i]:
                merged.append(stored)
                continue
            left[i] = False
            head = self._copy(i)
            # A stored single cell the head puts again is replaced by it, as the row's
            # write-out will replace it.
            replaced = _split(head[0], head[1])
            kept = tuple(
                c for c in stored.cells if c.family != FAMILY or c.qualifier not in replaced
            )
            extra = tuple(Cell(FAMILY, q, v) for q, v in _cells_of(*head))
            merged.append(Row(stored.key, kept + extra))
        return CellBlock.from_rows(merged, block.wire_bytes)

    def remaining(self) -> tuple[HeadRuns, CellBlock]:
        """The rows no stored row was merged with: clean rows of seconds points as
        :class:`HeadRuns`, the others as one block of cells. Once only."""
        left = self._left
        self._left = np.zeros(len(left), np.bool_)
        fast = left & self._clean & (self._ms_counts == 0)
        runs = self._runs(fast)
        slow = np.flatnonzero(left & ~fast).tolist()
        if not slow:
            return runs, CellBlock.empty()
        slow.sort(key=self._keys.__getitem__)
        keys = [self._keys[i] for i in slow]
        cells = [_cells_of(*self._copy(i)) for i in slow]
        flat = [c for row in cells for c in row]
        n = len(flat)
        return runs, CellBlock(
            keys,
            np.fromiter(map(len, cells), np.int64, len(cells)),
            [FAMILY],
            np.zeros(n, np.uint8),
            np.fromiter((len(q) for q, _ in flat), np.int64, n),
            np.fromiter((len(v) for _, v in flat), np.int64, n),
            b"".join(q for q, _ in flat),
            b"".join(v for _, v in flat),
        )

    def _runs(self, take: npt.NDArray[np.bool_]) -> HeadRuns:
        """The rows ``take`` as runs: the joined bytes as they are when every row is
        taken, else the taken rows' byte ranges gathered with one mask each."""
        rows = np.flatnonzero(take)
        counts = self._counts[rows]
        keys = [self._keys[i] for i in rows.tolist()]
        if len(rows) == len(take):
            return HeadRuns(keys, counts, self._qualifiers, self._values)
        return HeadRuns(
            keys,
            counts,
            _gather_bytes(self._qualifiers, self._q_ends, take),
            _gather_bytes(self._values, self._v_ends, take),
        )


def _gather_bytes(joined: bytes, ends: npt.NDArray[np.int64], take: npt.NDArray[np.bool_]) -> bytes:
    """The byte ranges of ``joined`` (row i ends at ``ends[i]``) of the rows ``take``."""
    lengths = np.diff(ends, prepend=0)
    mask = np.repeat(take, lengths)
    return np.frombuffer(joined, np.uint8)[mask].tobytes()


_COUNT = attrgetter("count")


def _hour_of_group(item: tuple[tuple[bytes, int], object]) -> int:
    return item[0][1]


_MS_COUNT = attrgetter("ms_count")
_CLEAN = attrgetter("clean")


def _offset_bounds(runs: Sequence[Run]) -> Iterable[tuple[bool, int, int]]:
    """Per run: (its offsets strictly increase, first offset ms, last offset ms); a run
    mixing seconds and milliseconds counts as not increasing (read as single cells).

    By the compiled helper (``run_bounds`` in ``tsd/codec/_encode.c``) when it is built:
    a burst of new series, or a million series at one point each, is a run of one point
    per row, and numpy's set-up per run (about 0.3 us) was most of the work.
    :func:`python_run_bounds` is the specification and the fallback."""
    if _c_run_bounds is not None:
        bounds = _c_run_bounds(runs)
        if bounds is not None:
            return cast(list[tuple[bool, int, int]], bounds)
    return python_run_bounds(runs)


def python_run_bounds(runs: Sequence[Run]) -> Iterator[tuple[bool, int, int]]:
    """:func:`_offset_bounds` with numpy: the runs of one qualifier width are checked all
    at once."""
    n = len(runs)
    counts = np.fromiter((r[1] for r in runs), np.int64, n)
    q_lens = np.fromiter((len(r[2]) for r in runs), np.int64, n)
    ok = np.zeros(n, np.bool_)
    first = np.zeros(n, np.int64)
    last = np.zeros(n, np.int64)
    for width, dtype in ((2, ">u2"), (4, ">u4")):
        idx = np.flatnonzero((q_lens == width * counts) & (counts > 0))
        if not len(idx):
            continue
        raw = np.frombuffer(b"".join([runs[i][2] for i in idx.tolist()]), dtype).astype(np.int64)
        offsets = (raw >> 4) * 1000 if width == 2 else (raw & 0x0FFFFFC0) >> 6
        c = counts[idx]
        ends = np.cumsum(c)
        starts = ends - c
        falls = np.flatnonzero(offsets[1:] <= offsets[:-1]) + 1
        run_of = np.searchsorted(ends, falls, side="right")
        bad = np.zeros(len(idx), np.bool_)
        bad[run_of[falls != starts[run_of]]] = True
        ok[idx] = ~bad
        first[idx] = offsets[starts]
        last[idx] = offsets[ends - 1]
    return zip(ok.tolist(), first.tolist(), last.tolist(), strict=True)
