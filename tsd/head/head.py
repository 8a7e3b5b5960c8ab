"""The head: the embedded engine's open row-hours, in memory. Pure (numpy, no loop).

Theory of operation (architecture §1.2a; docs/write-path.md says when a row leaves):

* A row is one series over one hour (an OpenTSDB row key). The head keeps, per row, its
  points' qualifiers and then their values in one ``bytes`` (a new one, of the exact
  size, when points are added: :func:`append_rows`), in the order they
  arrived: the body of an OpenTSDB compacted cell, built as the writer's batches come
  (:meth:`Head.add_runs`, straight from the write-ahead log record's runs of bytes, so a
  batch costs a Python step per row and none per point). Every 16-32 points a row's
  points so far are packed (tsd/head/pack.py: a lossless codec of the cells, about half
  a byte a point for a steady series against 3-4) at the front of its bytes, and points
  are appended after them: readers get the plain bytes back (:meth:`Head._plain`,
  :func:`tsd.head.pack.full_rows`), byte for byte.
* Rows are slots: the row key's slot in an index (int32 entries of an open-addressing
  table that compares keys with the list of slot -> key: tsd/head/index.py), and per
  slot its numbers (point count, lengths, clean-ness, last offset, last write, batches)
  in numpy arrays, set a column at a time per batch; no Python object per row beyond its
  key and its bytes (bench/head_memory.py measures a row of two points: 171 bytes, where
  a bytearray per row and a dict as the index took 260 and a row object with two
  bytearrays and its entries in two dicts 404).
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
* Every change of a row's points (points added to a row held, points released) stamps its
  slot with a new *version* from one counter, and so does a slot's row leaving: a slot's
  (slot, version) names one state of one row's points, and a snapshot hands both over
  (:class:`HeadRuns`) so that a reader can keep what it computed of a row until the row
  changes (tsd/query/head_buckets.py ``BucketMemo``).
* Bytes are counted (qualifiers, values, and a fixed cost per row, as measured) against
  the writer's bound, ``tsd.storage.head.max_bytes`` (:meth:`tsd.write.head_flush.HeadSink.room`).
"""

from __future__ import annotations

import mmap
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import filterfalse
from operator import add, itemgetter
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

import tsd.head.pack as row_pack
import tsd.native as native
from tsd.codec import KeyLayout, join_compacted
from tsd.codec.const import FAMILY, MAX_TIMESPAN, MS_BYTE_FLAG, TIMESTAMP_BYTES
from tsd.codec.row_runs import python_join_repeated_rows
from tsd.head.index import new_slot_index
from tsd.head.pack import full_row, full_rows, pack_rows
from tsd.storage.base import Cell, CellBlock, Row, RowFilter, ScanSpec

__all__ = ["Head", "HeadRow", "HeadRuns", "HeadSnapshot", "Taken"]

#: Bytes counted per row beyond its points and its key's length: the key object, its entry
#: in the slot index (tsd/head/index.py) and in the list of keys, the row's bytes object
#: (exact size: appending makes a new one), its numbers in the columns and its place in
#: its group's list; and the points' bytes plus 1/2**DATA_SLACK_SHIFT of them (the
#: allocator's rounding). Measured with tracemalloc by bench/head_memory.py: 200,000 rows
#: of 2 points 171 bytes a row, 30,000 rows of 360 points 1,354 (13-byte keys; this counts
#: 193 and 1,395). A bytearray per row with a dict as the index took 260 and 1,597. The
#: slot's version (8 bytes, for readers' memos) came later: 200,000 rows of 2 points
#: 178.9 bytes a row against 170.8 without it (bench/head_memory.py --rows 200000), this
#: counting 179.2 there.
ROW_OVERHEAD_BYTES = 160
DATA_SLACK_SHIFT = 5

_FIRST, _SECOND, _THIRD, _FOURTH = (itemgetter(i) for i in range(4))

# the compiled helpers (setup.py); python_run_columns is its fallback and spec
_c_run_columns: Any = native.attribute("tsd.head._runs", "run_columns")
# python_prefix_groups is its fallback and spec
_c_prefix_groups: Any = native.attribute("tsd.head._runs", "prefix_groups")
_c_join_repeated_rows: Any = native.attribute("tsd.head._runs", "join_repeated_rows")
# python_join_parts is its fallback and spec
_c_join_parts: Any = native.attribute("tsd.head._runs", "join_parts")
_c_picked: Any = native.attribute("tsd.head._runs", "picked")
# python_append_rows is its fallback and spec
_c_append_rows: Any = native.attribute("tsd.head._runs", "append_rows")

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


def sorted_seconds(qualifiers: bytes, values: bytes) -> tuple[bytes, bytes, int] | None:
    """The points of a row of 2-byte (seconds) qualifiers that came out of order, as the
    single cells storage would hold read them (``sorted(_split(...).items())``: in
    qualifier order, the last point of a qualifier winning), as a clean row's bytes:
    (qualifiers, values, points) when their times strictly increase; None otherwise (two
    points of one second with other flags: read as cells, as OpenTSDB reads them). A
    query then reads it with the clean rows (a burst of new series can put a row's first
    points after later ones; reading each of those rows point by point in Python was a
    visible part of a fresh query)."""
    units = np.frombuffer(qualifiers, ">u2") if len(qualifiers) % 2 == 0 else None
    if units is None or not len(units) or int(units.max()) >= 0xF000:
        return None
    lengths = (units & 0x7).astype(np.int64) + 1
    ends = np.cumsum(lengths)
    if int(ends[-1]) != len(values):
        return None
    order = np.argsort(units, kind="stable")
    ordered = units[order]
    last = np.ones(len(order), np.bool_)
    last[:-1] = ordered[1:] != ordered[:-1]
    keep = order[last]
    kept = units[keep]
    seconds = kept >> 4
    if not (seconds[1:] > seconds[:-1]).all():
        return None
    widths = lengths[keep]
    firsts = np.cumsum(widths) - widths
    at = np.repeat(ends[keep] - widths - firsts, widths) + np.arange(int(widths.sum()))
    picked = np.frombuffer(values, np.uint8)[at].tobytes()
    return kept.astype(">u2").tobytes(), picked, len(keep)


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


@dataclass(slots=True, eq=False)
class _Group:
    """The rows of one metric prefix and hour: their slots, in the order they came. A
    slot its row left stays listed (its group number then -1) until the list is tidied,
    and only then is it free for another row: a slot is never listed twice."""

    key: tuple[bytes, int]
    slots: npt.NDArray[np.int64]
    listed: int = 0
    rows: int = 0
    #: slots left since the list was last tidied (free once it is)
    left: array[int] = field(default_factory=lambda: array("q"))
    #: times the list was tidied (a tidy rewrites it; rows joining only append to it)
    tidied: int = 0
    #: the listed rows' tag pairs, for a row filter's pairs (:meth:`Head._group_pairs`)
    pairs: _GroupPairs | None = None
    #: per row filter regexp, which listed rows it matches (:meth:`Head._group_matches`)
    matches: dict[bytes, _GroupMatches] | None = None


@dataclass(slots=True)
class _GroupMatches:
    """Which of a group's first ``listed`` slots (as of its ``tidied``) a row filter's
    regexp matches: a dashboard's ``host=*`` over an hour of 10,000 series asks the same
    regexp of the same keys at every refresh; only the rows joined since are matched."""

    tidied: int
    listed: int
    hits: npt.NDArray[np.bool_]


#: regexps whose matches a group keeps (the oldest dropped beyond)
_GROUP_REGEXPS = 8
#: a row filter's rows up to this many are collected as Python ints (:class:`_GroupPairs`)
_FEW_HITS = 64


@dataclass(slots=True)
class _GroupPairs:
    """A group's listed rows' tag pairs as integers (:func:`_packed_pairs`), as of the
    group's ``tidied`` and its first ``listed`` slots (``packed`` None: keys of several
    lengths), and, once asked, every pair in order with its row: a pair's rows are found
    by bisection, not by a pass over every row."""

    tidied: int
    listed: int
    packed: npt.NDArray[np.uint64] | None
    #: the pairs sorted, and each one's row
    ordered: npt.NDArray[np.uint64] | None = None
    rows: npt.NDArray[np.int64] | None = None
    #: per row filter, the listed slots it keeps (:meth:`slots_kept`)
    kept: dict[RowFilter, npt.NDArray[np.int64]] | None = None

    def slots_kept(
        self, row_filter: RowFilter, slots: npt.NDArray[np.int64], key_of: list[bytes | None]
    ) -> npt.NDArray[np.int64]:
        """The listed ``slots`` (this object's, in order) whose keys ``row_filter`` matches,
        remembered per row filter while the group's rows stay as they are (a new object
        once rows join or the list is tidied): a dashboard asks the same filter of the
        same hours at every refresh, a lookup then instead of the pairs' bisection and a
        regexp per row. Read-only: shared by the reads that ask."""
        memo = self.kept
        if memo is None:
            memo = self.kept = {}
        found = memo.get(row_filter)
        if found is None:
            picked = slots[self.rows_having(row_filter.contains)].tolist()
            found = np.array([s for s in picked if row_filter.matches(key_of[s])], np.int64)
            found.flags.writeable = False
            if len(memo) >= _GROUP_REGEXPS:
                memo.pop(next(iter(memo)))
            memo[row_filter] = found
        return found

    def rows_having(self, contains: tuple[tuple[bytes, ...], ...]) -> npt.NDArray[np.int64]:
        """The rows (in order) holding, for every entry of ``contains``, one of its pairs."""
        packed = self.packed
        assert packed is not None
        ordered, rows = self.ordered, self.rows
        if ordered is None or rows is None:
            flat = packed.ravel()
            order = np.argsort(flat, kind="stable")
            self.ordered = ordered = flat[order]
            self.rows = rows = order // max(1, packed.shape[1])
        found: npt.NDArray[np.int64] | None = None
        for entry in contains:
            wanted = np.array(sorted({int.from_bytes(s, "big") for s in entry}), np.uint64)
            lo = np.searchsorted(ordered, wanted, "left").tolist()
            hi = np.searchsorted(ordered, wanted, "right").tolist()
            if sum(hi) - sum(lo) <= _FEW_HITS:  # a dashboard's few series: no numpy set-up
                few: set[int] = set()
                for a, b in zip(lo, hi, strict=True):
                    few.update(rows[a:b].tolist())
                hits = np.array(sorted(few), np.int64)
            else:
                hits = np.unique(np.concatenate([rows[a:b] for a, b in zip(lo, hi, strict=True)]))
            found = hits if found is None else np.intersect1d(found, hits, assume_unique=True)
        assert found is not None
        return found.astype(np.int64, copy=False)


@dataclass(frozen=True, slots=True)
class _Part:
    """Runs of a batch (each row once) and their numbers, as arrays."""

    runs: Sequence[Run]
    counts: npt.NDArray[np.int64]
    q_sizes: npt.NDArray[np.int64]
    v_sizes: npt.NDArray[np.int64]
    #: per run: (offsets increase, first offset ms, last offset ms)
    checked: npt.NDArray[np.int64]

    @classmethod
    def of(cls, runs: Sequence[Run]) -> _Part:
        """The runs' numbers, from :func:`run_columns` (views of one array)."""
        columns = run_columns(runs)
        return cls(runs, columns[:, 0], columns[:, 1], columns[:, 2], columns[:, 3:])

    def select(self, mask: npt.NDArray[np.bool_]) -> _Part:
        return _Part(
            [self.runs[i] for i in np.flatnonzero(mask).tolist()],
            self.counts[mask],
            self.q_sizes[mask],
            self.v_sizes[mask],
            self.checked[mask],
        )


#: keys from which a row filter's pairs are checked over all keys at once (numpy)
_VECTOR_KEYS = 64


class Head:
    """The open row-hours of one data table, as slots in columns (see the module
    docstring): a row key's slot in the slot index; per slot its key, its points' bytes (one
    ``bytes``: the qualifiers, then the values) and its numbers in numpy arrays; per
    group (metric prefix and hour) the slots of its rows."""

    def __init__(self, layout: KeyLayout) -> None:
        self._layout = layout
        self._prefix_end = layout.salt_width + layout.metric_width
        self._key: list[bytes | None] = []
        #: row key -> slot (the keys compared with ``_key``'s: tsd/head/index.py)
        self._slot_of = new_slot_index(self._key)
        self._buf: list[bytes | None] = []
        self._cols = _Columns(0)
        self._slots = 0  # slots handed out so far (free ones among them)
        self._free = array("q")  # free slots, reused first
        #: (salt + metric, base time) -> group number: what a scan of hours reads
        self._group_of: dict[tuple[bytes, int], int] = {}
        self._groups: list[_Group | None] = []
        self._free_groups: list[int] = []
        #: groups of a closed hour with no idle row when last looked at: the oldest last
        #: write of their rows then (see :meth:`closed`)
        self._busy_since: dict[int, float] = {}
        #: bytes of the rows' points held (their bytes: packed parts and raw tails), and of
        #: the rows' keys
        self._data = 0
        self._key_data = 0
        self.points = 0
        #: counts the calls of :meth:`release` (the only way the oldest batch held grows)
        self.releases = 0
        #: the last version stamped on a slot (see the module docstring)
        self._version = 0
        #: a row's raw tail is packed once it holds this many points (tsd/head/pack.py)
        self._block_points = row_pack.BLOCK_POINTS

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: bytes) -> bool:
        return key in self._slot_of

    def get(self, key: bytes) -> HeadRow | None:
        """A copy of the row ``key`` (None: the head has no such row)."""
        s = self._slot_of.get(key)
        if s is None:
            return None
        buf = self._plain(s)
        group = self._groups[int(self._cols.group[s])]
        assert group is not None
        c = self._cols
        q_len = int(c.q_len[s])
        return HeadRow(
            key,
            group.key[1],
            bytearray(buf[:q_len]),
            bytearray(buf[q_len:]),
            int(c.count[s]),
            int(c.ms_count[s]),
            bool(c.clean[s]),
            int(c.last_offset[s]),
            float(c.written_at[s]),
            int(c.first_batch[s]),
            int(c.last_batch[s]),
        )

    # -- adding -------------------------------------------------------------------------------

    def add_runs(self, runs: Sequence[Run], batch: int, now: float) -> int:
        """Add a writer batch's rows (``(row key, cells, qualifiers, values)``, as
        :func:`tsd.wal.record.decode_row_runs` gives them); the points added.

        A Python step per row appends its bytes (or builds a new row's); the numbers of
        the batch's rows are set with a numpy operation per column."""
        if not runs:
            return 0
        joined = join_repeated_rows(runs)
        if len(joined) != len(runs):
            # a log record can hold a row more than once (the parts of one batch joined)
            return self.add_runs(joined, batch, now)
        keys = list(map(_FIRST, runs))
        part = _Part.of(runs)
        if not part.counts.all():  # empty runs add nothing
            return self.add_runs([run for run in runs if run[1]], batch, now)
        slots = self._slot_of.get_many(keys)
        news = slots.count(None)
        if not news:
            self._add_held(part, np.array(slots, np.int64), batch, now)
        elif news == len(slots):  # all new (a burst of new series): no selection
            self._add_new(part, batch, now, keys)
        else:
            new = np.fromiter((s is None for s in slots), np.bool_, len(runs))
            held = np.array([s for s in slots if s is not None], np.int64)
            self._add_new(part.select(new), batch, now)
            self._add_held(part.select(~new), held, batch, now)
        added = int(part.counts.sum())
        self.points += added
        self._data += int(part.q_sizes.sum() + part.v_sizes.sum())
        return added

    def _add_held(self, part: _Part, slots: npt.NDArray[np.int64], batch: int, now: float) -> None:
        """Points for rows the head holds: appended to each row's bytes (qualifiers
        before the values, values at the end), numbers updated by column."""
        c = self._cols
        # a row's bytes: its packed part, then its tail's qualifiers, then its tail's values
        at = c.packed[slots] + c.q_len[slots] - c.packed_q[slots]
        append_rows(self._buf, slots.tolist(), at.tolist(), part.runs)
        counts, q_sizes, checked = part.counts, part.q_sizes, part.checked
        c.q_len[slots] += q_sizes.astype(np.int32)
        c.v_len[slots] += part.v_sizes.astype(np.int32)
        before = c.count[slots]
        c.first_batch[slots[before == 0]] = batch
        c.count[slots] = before + counts
        c.ms_count[slots] += ((q_sizes - 2 * counts) // 2).astype(np.int32)
        clean = c.clean[slots]
        c.clean[slots] = clean & (checked[:, 0] != 0) & (checked[:, 1] > c.last_offset[slots])
        c.last_offset[slots] = np.where(clean, checked[:, 2], c.last_offset[slots])
        c.written_at[slots] = now
        c.last_batch[slots] = batch
        self._version += 1
        c.version[slots] = self._version
        # A tail is packed every half block of points, at a point count set by the slot
        # (a million series sending together pack a sixteenth of their rows an interval,
        # not all of them every sixteenth), and at a block at the latest.
        count, block = c.count[slots], self._block_points
        tail = count - c.packed_count[slots]
        half = max(1, block // 2)
        due = (tail >= block) | ((tail >= half) & ((count + slots) % half == 0))
        if due.any():
            self._pack(slots[due])

    def _pack(self, slots: npt.NDArray[np.int64]) -> None:
        """The rows' raw tails packed into their packed parts (tsd/head/pack.py): the
        same points, so the rows keep their versions."""
        c = self._cols
        before = sum(map(len, cast(list[bytes], _picked_at(self._buf, slots))))
        lengths = np.array(
            pack_rows(
                self._buf,
                slots.tolist(),
                c.packed[slots].tolist(),
                (c.q_len[slots] - c.packed_q[slots]).tolist(),
            ),
            np.int64,
        )
        done = lengths >= 0
        # a row left unpacked (its tail not whole points) kept its bytes
        self._data += int(lengths[done].sum()) - before
        if not done.all():
            self._data += sum(map(len, cast(list[bytes], _picked_at(self._buf, slots[~done]))))
        slots = slots[done]
        c.packed[slots] = lengths[done]
        c.packed_count[slots] = c.count[slots]
        c.packed_q[slots] = c.q_len[slots]

    def _plain(self, s: int) -> bytes:
        """Slot ``s``'s row as plain bytes: its qualifiers, then its values."""
        buf = self._buf[s]
        assert buf is not None
        c = self._cols
        p = c.packed.item(s)
        if not p:
            return buf
        return full_row(buf, p, c.q_len.item(s), c.v_len.item(s))

    def _add_new(
        self, part: _Part, batch: int, now: float, keys: list[bytes] | None = None
    ) -> None:
        """New rows (every series, once an hour): slots (freed ones first), bytes, numbers
        and groups, built whole (``keys``: the runs' row keys when the caller has them).

        C-speed passes, no Python step per row: fresh slots are a range (its keys and
        bytes set by slice), and a batch's new rows of one metric and hour (a burst of new
        series) are found to share their group by comparing the keys' prefixes as one
        array."""
        runs, counts, q_sizes, checked = part.runs, part.counts, part.q_sizes, part.checked
        m = len(runs)
        slots = self._take_slots(m)
        if keys is None:
            keys = list(map(_FIRST, runs))
        bufs = list(map(add, map(_THIRD, runs), map(_FOURTH, runs)))
        key_of, buf_of = self._key, self._buf
        first = int(slots[0])
        if int(slots[-1]) - first == m - 1 and (m < 3 or bool((np.diff(slots) == 1).all())):
            key_of[first : first + m] = keys
            buf_of[first : first + m] = bufs
        else:
            for s, key, buf in zip(slots.tolist(), keys, bufs, strict=True):
                key_of[s] = key
                buf_of[s] = buf
        slot_list = slots.tolist()
        self._slot_of.add_many(keys, slot_list)
        self._key_data += sum(map(len, keys))
        c = self._cols
        c.q_len[slots] = q_sizes
        c.v_len[slots] = part.v_sizes
        c.count[slots] = counts
        c.ms_count[slots] = (q_sizes - 2 * counts) // 2
        c.clean[slots] = checked[:, 0] != 0
        c.last_offset[slots] = checked[:, 2]
        c.written_at[slots] = now
        c.first_batch[slots] = batch
        c.last_batch[slots] = batch
        # (a slot's packed numbers are 0: a slot leaves with them cleared, see release)
        if int(counts.max()) >= self._block_points:  # a backfill: many points a row
            self._pack(slots[counts >= self._block_points])
        # groups: a batch's new rows mostly share a metric and an hour
        heads, index = prefix_groups(keys, self._prefix_end + TIMESTAMP_BYTES)
        if len(heads) == 1:
            number = self._group_for(heads[0])
            c.group[slots] = number
            self._join(number, slots)
            return
        numbers = np.array([self._group_for(head) for head in heads], np.int64)
        c.group[slots] = numbers[index]
        order = np.argsort(index, kind="stable")
        ordered = index[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        for start, stop in zip(starts.tolist(), [*starts[1:].tolist(), m], strict=True):
            self._join(int(numbers[ordered[start]]), slots[order[start:stop]])

    def _take_slots(self, m: int) -> npt.NDArray[np.int64]:
        free = self._free
        reused = min(m, len(free))
        taken = np.array(free[len(free) - reused :], np.int64) if reused else np.zeros(0, np.int64)
        if reused:
            del free[len(free) - reused :]
        fresh = m - reused
        if not fresh:
            return taken
        first = self._slots
        self._slots += fresh
        if self._slots > len(self._cols):
            size = max(self._slots, len(self._cols) * 3 // 2, 1024)
            self._cols = self._cols.grown(size)
            self._key.extend([None] * (size - len(self._key)))
            self._buf.extend([None] * (size - len(self._buf)))
        return np.concatenate([taken, np.arange(first, self._slots, dtype=np.int64)])

    def _group_for(self, head: bytes) -> int:
        at = self._prefix_end
        key = (head[:at], int.from_bytes(head[at:], "big"))
        number = self._group_of.get(key)
        if number is None:
            group = _Group(key, np.zeros(16, np.int64))
            if self._free_groups:
                number = self._free_groups.pop()
                self._groups[number] = group
            else:
                number = len(self._groups)
                self._groups.append(group)
            self._group_of[key] = number
        return number

    def _join(self, number: int, slots: npt.NDArray[np.int64]) -> None:
        group = self._groups[number]
        assert group is not None
        end = group.listed + len(slots)
        if end > len(group.slots):
            grown = np.zeros(max(end, len(group.slots) * 3 // 2), np.int64)
            grown[: group.listed] = group.slots[: group.listed]
            group.slots = grown
        group.slots[group.listed : end] = slots
        group.listed = end
        group.rows += len(slots)

    def _members(self, number: int) -> npt.NDArray[np.int64]:
        """The slots of group ``number``'s rows, in the order they came."""
        group = self._groups[number]
        assert group is not None
        if group.left:
            listed = group.slots[: group.listed]
            live = listed[self._cols.group[listed] == number]
            group.slots = np.concatenate([live, np.zeros(max(16, len(live) // 2), np.int64)])
            group.listed = len(live)
            group.tidied += 1
            self._free.extend(group.left)
            group.left = array("q")
        return group.slots[: group.listed]

    # -- reading ------------------------------------------------------------------------------

    def snapshot(self, specs: Iterable[ScanSpec]) -> HeadSnapshot:
        """The rows the scans ``specs`` would read (key range and row filter), copied."""
        parts: list[npt.NDArray[np.int64]] = []
        #: the group each part came from: parts of distinct groups share no row
        numbers: list[int | None] = []
        key_of = self._key
        for spec in specs:
            row_filter = spec.row_filter
            for number, slots in self._slots_in(spec):
                numbers.append(number)
                if row_filter is not None:
                    pairs = None
                    if row_filter.contains and number is not None:
                        pairs = self._group_pairs(number, row_filter.contains)
                    if pairs is not None:  # the group's pairs, kept: no step per row
                        parts.append(pairs.slots_kept(row_filter, slots, key_of))
                        continue
                    if number is not None:  # the group's matches, kept
                        parts.append(slots[self._group_matches(number, row_filter)])
                        continue
                    keys = [key_of[s] for s in slots.tolist()]
                    picked: Iterable[int] = range(len(keys))
                    if row_filter.contains:
                        picked = self._carrying(keys, row_filter.contains)
                    keep = [i for i in picked if row_filter.matches(keys[i])]
                    slots = slots[np.array(keep, np.int64)] if keep else slots[:0]
                parts.append(slots)
        if not parts:
            return HeadSnapshot.empty()
        found = np.concatenate(parts)
        if len(parts) > 1 and (None in numbers or len(set(numbers)) < len(numbers)):
            _, first = np.unique(found, return_index=True)
            found = found[np.sort(first)]
        return self._snapshot_of(found)

    def _carrying(self, keys: list[bytes], contains: tuple[tuple[bytes, ...], ...]) -> list[int]:
        """The indices of the ``keys`` that hold, for every entry of ``contains``, one of its
        byte strings (a row filter's necessary condition): when those are tag pairs and the
        keys have one length, checked at the pair positions over all keys at once (a dashboard's
        ``host=a|b|c`` of 10,000 series: no regexp per row), else by ``in``."""
        packed = None
        if len(keys) >= _VECTOR_KEYS and self._pairs_of(contains):
            packed = _packed_pairs(keys, self._layout.tags_start, self._layout.tag_pair_width)
        if packed is None:
            return [i for i, k in enumerate(keys) if all(any(s in k for s in e) for e in contains)]
        return np.flatnonzero(_having(packed, contains)).tolist()

    def _pairs_of(self, contains: tuple[tuple[bytes, ...], ...]) -> bool:
        """Whether every byte string of ``contains`` is one tag pair that fits an integer."""
        pair = self._layout.tag_pair_width
        return pair <= 8 and all(len(s) == pair for entry in contains for s in entry)

    def _group_pairs(
        self, number: int, contains: tuple[tuple[bytes, ...], ...]
    ) -> _GroupPairs | None:
        """Group ``number``'s tag pairs (:class:`_GroupPairs`, a row per listed slot,
        :meth:`_members` called just before), kept with the group and extended by the
        rows that joined since: a dashboard's filter over an hour of 10,000 series looks
        up its pairs, not 10,000 keys, each time. None where they do not apply."""
        group = self._groups[number]
        assert group is not None
        if not self._pairs_of(contains):
            return None
        cache = group.pairs
        listed = group.listed
        if cache is not None and cache.tidied == group.tidied:
            done, packed = cache.listed, cache.packed
            if packed is None:
                return None
            if done == listed:
                return cache
            key_of = self._key
            tail = [key_of[s] for s in group.slots[done:listed].tolist()]
            more = _packed_pairs(tail, self._layout.tags_start, self._layout.tag_pair_width)
            if more is None or (done and more.shape[1] != packed.shape[1]):
                packed = None
            else:
                packed = np.concatenate([packed, more]) if done else more
        else:
            key_of = self._key
            keys = [key_of[s] for s in group.slots[:listed].tolist()]
            packed = _packed_pairs(keys, self._layout.tags_start, self._layout.tag_pair_width)
        group.pairs = _GroupPairs(group.tidied, listed, packed)
        return group.pairs if packed is not None else None

    def _group_matches(self, number: int, row_filter: RowFilter) -> npt.NDArray[np.bool_]:
        """Which of group ``number``'s listed rows (:meth:`_members` called just before)
        ``row_filter`` matches, kept with the group (:class:`_GroupMatches`) and extended
        by the rows that joined since."""
        group = self._groups[number]
        assert group is not None
        memo = group.matches if group.matches is not None else {}
        listed, key_of = group.listed, self._key
        cached = memo.pop(row_filter.regex, None)
        if cached is not None and cached.tidied == group.tidied and cached.listed <= listed:
            hits = cached.hits
            if cached.listed < listed:
                tail = [key_of[s] for s in group.slots[cached.listed : listed].tolist()]
                more = np.fromiter(map(row_filter.matches, tail), np.bool_, len(tail))
                hits = np.concatenate([hits, more])
        else:
            keys = [key_of[s] for s in group.slots[:listed].tolist()]
            hits = np.fromiter(map(row_filter.matches, keys), np.bool_, len(keys))
        if len(memo) >= _GROUP_REGEXPS:
            memo.pop(next(iter(memo)))
        memo[row_filter.regex] = _GroupMatches(group.tidied, listed, hits)
        group.matches = memo
        return hits

    def snapshot_keys(self, keys: Iterable[bytes]) -> HeadSnapshot:
        """The rows of the given keys that the head holds, copied."""
        get = self._slot_of.get
        found = [s for k in dict.fromkeys(keys) if (s := get(k)) is not None]
        return self._snapshot_of(np.array(found, np.int64))

    def _snapshot_of(self, slots: npt.NDArray[np.int64]) -> HeadSnapshot:
        c = self._cols
        slots = slots[c.count[slots] > 0]
        if not len(slots):  # none (rows written out): no copy of every column
            return HeadSnapshot.empty()
        key_of, buf_of = self._key, self._buf
        # the slots of live rows: their bytes and keys are set. The bytes are kept as the
        # rows' own objects (never changed: points added make a new one) and parted
        # where they are read, only those read (:meth:`HeadSnapshot.remaining`).
        return HeadSnapshot(
            cast(list[bytes], _picked_at(key_of, slots)),
            cast(list[bytes], _picked_at(buf_of, slots)),
            c.q_len[slots].astype(np.int64),
            c.v_len[slots].astype(np.int64),
            c.count[slots].astype(np.int64),
            c.ms_count[slots].astype(np.int64),
            c.clean[slots].copy(),
            slots,
            c.version[slots],
            c.packed[slots].astype(np.int64),
        )

    def _slots_in(self, spec: ScanSpec) -> Iterator[tuple[int | None, npt.NDArray[np.int64]]]:
        """The slots of the rows in the scan's key range (whole groups of an hour where
        the range is one metric's hours: no step per row), with their group's number
        (None: rows of any group)."""
        at = self._prefix_end
        start, stop = spec.start, spec.stop
        if len(start) == len(stop) == at + TIMESTAMP_BYTES and start[:at] == stop[:at]:
            # prefix + base time on both ends: the hours in between, group by group
            prefix = start[:at]
            first = int.from_bytes(start[at:], "big")
            last = int.from_bytes(stop[at:], "big")
            groups = self._group_of
            if (last - first) // MAX_TIMESPAN > len(groups):
                hours: Iterable[int] = sorted(b for p, b in groups if p == prefix)
            else:
                hours = range(first - first % MAX_TIMESPAN, last, MAX_TIMESPAN)
            for base in hours:
                if first <= base < last and (number := groups.get((prefix, base))) is not None:
                    yield number, self._members(number)
            return
        yield (
            None,
            np.array(
                [
                    s
                    for s, key in enumerate(self._key)
                    if key is not None and start <= key and (not stop or key < stop)
                ],
                np.int64,
            ),
        )

    # -- leaving ------------------------------------------------------------------------------

    def closed(self, now: float, grace_s: float, limit: int | None = None) -> list[bytes]:
        """Rows whose hour ended ``grace_s`` ago and that got no point for ``grace_s``
        (docs/write-path.md), in key order; at most ``limit``, the oldest hours' first.

        The search stops at ``limit``: an hour of a million series closes at once and is
        written out a few thousand rows a tick, so each tick looks at about as many rows
        as it takes, not at (and sorts) every row still waiting."""
        keys: list[bytes] = []
        room = len(self._slot_of) if limit is None else limit
        quiet = self._busy_since
        written_at = self._cols.written_at
        for group_key, number in sorted(self._group_of.items(), key=_hour_of_group):
            if room <= 0:
                break
            if group_key[1] + MAX_TIMESPAN + grace_s > now:
                continue
            since = quiet.get(number)
            if since is not None and now - since < grace_s:
                continue  # no row of it can be idle yet: not looked at row by row
            members = self._members(number)
            at = written_at[members]
            found = members[now - at >= grace_s][:room]
            if len(found):
                quiet.pop(number, None)
            else:
                # Every row got a point within grace_s. A row's last write only moves
                # later and new rows come later still, so none is idle before the
                # oldest last write is grace_s old: a backfilled hour of a million
                # rows is not scanned every tick while it is written to.
                quiet[number] = float(at.min())
            key_of = self._key
            keys += [key_of[s] for s in found.tolist()]
            room -= len(found)
        keys.sort()
        return keys

    def oldest(self, target_bytes: int) -> list[bytes]:
        """Rows, oldest hour first and then least recently written, whose bytes (as
        :attr:`bytes` counts them) add up to at least ``target_bytes`` (the head is over
        its bound), in key order."""
        keys: list[bytes] = []
        freed = 0
        c = self._cols
        key_of = self._key
        for _, number in sorted(self._group_of.items(), key=_hour_of_group):
            members = self._members(number)
            members = members[np.argsort(c.written_at[members], kind="stable")]
            held = cast(list[bytes], _picked_at(self._buf, members))
            data = np.fromiter(map(len, held), np.int64, len(held))
            listed = [key_of[s] or b"" for s in members.tolist()]
            key_sizes = np.fromiter(map(len, listed), np.int64, len(listed))
            sizes = ROW_OVERHEAD_BYTES + key_sizes + data + (data >> DATA_SLACK_SHIFT)
            ends = freed + np.cumsum(sizes)
            cut = int(np.searchsorted(ends, target_bytes)) + 1
            keys += listed[:cut]
            freed = int(ends[min(cut, len(ends)) - 1]) if len(ends) else freed
            if freed >= target_bytes:
                break
        keys.sort()
        return keys

    def all_keys(self) -> list[bytes]:
        return sorted([key for key in self._key if key is not None])

    def take(self, key: bytes) -> Taken | None:
        """The row's points as cells for storage (None when it has none); the row keeps
        them until :meth:`release`."""
        s = self._slot_of.get(key)
        if s is None:
            return None
        c = self._cols
        count = c.count.item(s)
        if not count:
            return None
        buf = self._plain(s)
        q_len = c.q_len.item(s)
        qualifiers, values = buf[:q_len], buf[q_len:]
        ms_count = c.ms_count.item(s)
        return Taken(
            key,
            _cells_of(qualifiers, values, count, ms_count, bool(c.clean.item(s))),
            qualifiers,
            values,
            q_len,
            len(values),
            count,
            ms_count,
            c.last_batch.item(s),
        )

    def release(self, taken: Taken) -> None:
        """Storage holds ``taken``: drop those points (points added since stay)."""
        self.releases += 1
        s = self._slot_of.get(taken.key)
        if s is None:
            return
        c = self._cols
        count = c.count.item(s) - taken.count
        # the row changes, or leaves its slot to another row: a new version either way
        self._version += 1
        c.version[s] = self._version
        held = self._buf[s]
        assert held is not None
        self._data -= len(held)
        self.points -= taken.count
        if count:
            buf = self._plain(s)
            q_len = c.q_len.item(s)
            self._buf[s] = left = (
                buf[taken.qualifier_bytes : q_len] + buf[q_len + taken.value_bytes :]
            )
            self._data += len(left)
            c.packed[s] = c.packed_count[s] = c.packed_q[s] = 0
            c.q_len[s] = q_len - taken.qualifier_bytes
            c.v_len[s] -= taken.value_bytes
            c.count[s] = count
            c.ms_count[s] -= taken.ms_count
            # Only later batches' points are left; their order is checked again.
            c.first_batch[s] = taken.last_batch + 1
            c.clean[s] = False
            return
        # every point left: the slot's numbers are set again when it is reused, but for
        # its packed part's: a new row in the slot starts from them (_add_new sets none)
        c.count[s] = 0
        c.packed[s] = c.packed_count[s] = c.packed_q[s] = 0
        self._slot_of.remove(taken.key)
        self._key_data -= len(taken.key)
        self._key[s] = None
        self._buf[s] = None
        number = c.group.item(s)
        c.group[s] = -1
        group = self._groups[number]
        assert group is not None
        group.rows -= 1
        group.left.append(s)
        if not group.rows:
            self._free.extend(group.left)
            del self._group_of[group.key]
            self._groups[number] = None
            self._free_groups.append(number)
            self._busy_since.pop(number, None)
        elif group.listed > 2 * group.rows + 64:
            self._members(number)  # tidied: the list keeps to about its rows

    def discard(self, keys: Iterable[bytes]) -> None:
        """Drop the rows ``keys`` and their points (a query with ``delete``)."""
        c = self._cols
        for key in keys:
            s = self._slot_of.get(key)
            if s is not None and c.count[s]:
                self.release(
                    Taken(
                        key,
                        [],
                        b"",
                        b"",
                        c.q_len.item(s),
                        c.v_len.item(s),
                        c.count.item(s),
                        c.ms_count.item(s),
                        c.last_batch.item(s),
                    )
                )

    def oldest_batch(self) -> int | None:
        """The oldest writer batch some row still holds points of (None: none)."""
        c = self._cols
        n = self._slots
        held = (c.group[:n] >= 0) & (c.count[:n] > 0)
        if not held.any():
            return None
        return int(c.first_batch[:n][held].min())

    def bytes_to_add(self, runs: Sequence[Run]) -> int:
        """What :meth:`add_runs` of ``runs`` would add to :attr:`bytes` at most: a row the
        head does not hold costs its fixed cost and its key, every run its points' bytes
        with their room to grow (the writer reserves this much before a batch goes in:
        :meth:`tsd.write.head_flush.HeadSink.room`). C-speed passes, no step per row."""
        new = list(filterfalse(self._slot_of.__contains__, map(_FIRST, runs)))
        data = sum(map(len, map(_THIRD, runs))) + sum(map(len, map(_FOURTH, runs)))
        fixed = len(new) * ROW_OVERHEAD_BYTES + sum(map(len, new))
        return fixed + data + (data >> DATA_SLACK_SHIFT) + 1

    @property
    def bytes(self) -> int:
        """The memory the rows take, as measured (bench/head_memory.py): a fixed cost per
        row, and the rows' bytes (packed parts and raw tails: tsd/head/pack.py) with the
        allocator's rounding."""
        data = self._data
        fixed = len(self._slot_of) * ROW_OVERHEAD_BYTES + self._key_data
        return fixed + data + (data >> DATA_SLACK_SHIFT)


#: columns from this size on are pages mapped of their own (see _zeros)
_MAPPED_BYTES = 1 << 20


def _zeros(size: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """A column of zeros whose pages are resident only once written. np.zeros asks the C
    library's calloc, which clears a block reused from the heap by writing every byte of
    it (the daemon gives freed heap pages back, tsd/malloc.py, and calloc cannot know
    they are zero): the room a grown column keeps for later rows was resident from the
    start, about 60 bytes a slot of it, and at an hour's close the head's slots grow by
    half of up to twice a row per series (issue 26). Anonymous pages are zero until
    written; unmapped when the column goes."""
    nbytes = size * np.dtype(dtype).itemsize
    if nbytes < _MAPPED_BYTES:
        return np.zeros(size, dtype)
    pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # not shared: not shmem
    if hasattr(mmap, "MADV_HUGEPAGE"):  # as numpy does for its large arrays
        pages.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(pages, dtype, size)


class _Columns:
    """The numbers of every slot, a numpy array each (grown by half when full: the
    room not yet used is not touched, so it takes no memory)."""

    __slots__ = (
        "clean",
        "count",
        "first_batch",
        "group",
        "last_batch",
        "last_offset",
        "ms_count",
        "packed",
        "packed_count",
        "packed_q",
        "q_len",
        "v_len",
        "version",
        "written_at",
    )

    def __init__(self, size: int) -> None:
        self.q_len = _zeros(size, np.int32)
        self.v_len = _zeros(size, np.int32)
        self.count = _zeros(size, np.int32)
        self.ms_count = _zeros(size, np.int32)
        #: every point strictly after the one before (see the module docstring)
        self.clean = _zeros(size, np.bool_)
        #: the last point's offset in its hour (ms), while the row is clean
        self.last_offset = _zeros(size, np.int32)
        #: wall clock (s) of the last point
        self.written_at = _zeros(size, np.float64)
        #: the oldest and newest writer batch whose points the row holds
        self.first_batch = _zeros(size, np.int64)
        self.last_batch = _zeros(size, np.int64)
        #: the row's group (-1: a free slot)
        self.group = np.full(size, -1, np.int32)
        #: the slot's version (the module docstring): stamped when its points change
        self.version = _zeros(size, np.int64)
        #: the row's packed part (tsd/head/pack.py): its bytes at the front of the row's
        #: bytes (0: none), its points and its qualifiers' bytes unpacked
        self.packed = _zeros(size, np.int32)
        self.packed_count = _zeros(size, np.int32)
        self.packed_q = _zeros(size, np.int32)

    def __len__(self) -> int:
        return len(self.q_len)

    def grown(self, size: int) -> _Columns:
        grown = _Columns(size)
        n = len(self)
        for name in _Columns.__slots__:
            getattr(grown, name)[:n] = getattr(self, name)
        return grown


def _packed_pairs(keys: list[bytes], start: int, pair: int) -> npt.NDArray[np.uint64] | None:
    """Each key's tag pairs (from byte ``start``, ``pair`` bytes each, at most 8) as one
    integer per pair, a row per key; None unless the keys have one length."""
    if not keys:
        return np.zeros((0, 0), np.uint64)
    width = len(keys[0])
    if (width - start) % pair or len(set(map(len, keys))) != 1:
        return None
    matrix = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), width)
    tags = matrix[:, start:].reshape(len(keys), -1, pair)
    weights = (256 ** np.arange(pair - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
    return np.asarray((tags.astype(np.uint64) * weights).sum(axis=2, dtype=np.uint64))


def _having(
    packed: npt.NDArray[np.uint64], contains: tuple[tuple[bytes, ...], ...]
) -> npt.NDArray[np.bool_]:
    """Per row of ``packed`` (:func:`_packed_pairs`), whether it holds, for every entry of
    ``contains``, one of its tag pairs."""
    keep = np.ones(len(packed), dtype=np.bool_)
    for entry in contains:
        wanted = [int.from_bytes(s, "big") for s in entry]
        if len(wanted) == 1:
            keep &= (packed == np.uint64(wanted[0])).any(axis=1)
        else:
            keep &= np.isin(packed, np.array(wanted, dtype=np.uint64)).any(axis=1)
    return keep


def _join_parts(
    bufs: list[bytes], q_lens: npt.NDArray[np.int64], v_lens: npt.NDArray[np.int64]
) -> tuple[bytes, bytes]:
    """Every row's qualifiers joined, and every row's values (a row's bytes are its
    qualifiers then its values): by the compiled helper (``join_parts`` in
    ``tsd/head/_runs.c``, two copies per row) where it is built; a query of 30 days in
    the head parts 40 MB, where the mask below took most of the snapshot."""
    if _c_join_parts is not None:
        parted = _c_join_parts(bufs, q_lens, v_lens)
        if parted is not None:
            return cast(tuple[bytes, bytes], parted)
    return python_join_parts(bufs, q_lens, v_lens)


def python_join_parts(
    bufs: list[bytes], q_lens: npt.NDArray[np.int64], v_lens: npt.NDArray[np.int64]
) -> tuple[bytes, bytes]:
    """:func:`_join_parts`' spec: the rows joined whole at once, then parted with one
    mask (a view or a slice per row cost several times more)."""
    whole = np.frombuffer(b"".join(bufs), np.uint8)
    n = len(bufs)
    lengths = np.empty(2 * n, np.int64)
    lengths[0::2] = q_lens
    lengths[1::2] = v_lens
    firsts = np.zeros(2 * n, np.bool_)
    firsts[0::2] = True
    mask = np.repeat(firsts, lengths)
    return whole[mask].tobytes(), whole[~mask].tobytes()


#: a row's points at the time of a snapshot: qualifiers, values, count, ms count, clean
_Copy = tuple[bytes, bytes, int, int, bool]


@dataclass(frozen=True, slots=True)
class RowBytes:
    """Rows' own bytes, as the head holds them: per row a packed part of ``packed[i]``
    bytes, then its raw tail (tsd/head/pack.py); ``q_lens[i]`` and ``v_lens[i]``: its
    plain qualifiers' and values' bytes. Immutable: the head makes a new ``bytes`` when a
    row changes, so a reader may walk them from any thread."""

    bufs: list[bytes]
    packed: npt.NDArray[np.int64]
    q_lens: npt.NDArray[np.int64]
    v_lens: npt.NDArray[np.int64]

    def part(self, rows: slice) -> RowBytes:
        """The rows ``rows`` (a slice)."""
        return RowBytes(self.bufs[rows], self.packed[rows], self.q_lens[rows], self.v_lens[rows])


class HeadRuns:
    """Clean rows of seconds points, end to end: per row its key and point count, all
    qualifiers joined (2 bytes each) and all values joined (lengths from the flags). The
    query layer decodes them straight to arrays (:mod:`tsd.query.head_rows`). From a
    snapshot, also each row's slot and version (the module docstring: together they name
    the row's points exactly) and its value bytes, and the rows' own bytes (:attr:`rows`):
    the joined qualifiers and values are then made from them only when first asked for
    (a fresh query reads the rows' bytes as they are, tsd/query/head_rows.py)."""

    __slots__ = ("_parts", "counts", "keys", "rows", "slots", "value_lengths", "versions")

    def __init__(
        self,
        keys: list[bytes],
        counts: npt.NDArray[np.int64],
        qualifiers: bytes | None = None,
        values: bytes | None = None,
        slots: npt.NDArray[np.int64] | None = None,
        versions: npt.NDArray[np.int64] | None = None,
        value_lengths: npt.NDArray[np.int64] | None = None,
        rows: RowBytes | None = None,
    ) -> None:
        if (qualifiers is None or values is None) and rows is None:
            raise ValueError("HeadRuns needs the joined qualifiers and values or the rows")
        self.keys = keys
        self.counts = counts
        self.slots = slots
        self.versions = versions
        self.value_lengths = value_lengths
        self.rows = rows
        self._parts = None if qualifiers is None or values is None else (qualifiers, values)

    @property
    def qualifiers(self) -> bytes:
        """Every row's qualifiers, joined."""
        return self._joined()[0]

    @property
    def values(self) -> bytes:
        """Every row's values, joined."""
        return self._joined()[1]

    @property
    def points(self) -> int:
        """The rows' points (2 qualifier bytes each)."""
        if self.rows is not None:
            return int(self.rows.q_lens.sum()) // 2
        return len(self.qualifiers) // 2

    @property
    def plain_bytes(self) -> int:
        """The rows' qualifier and value bytes, plain (not packed)."""
        if self.rows is not None:
            return int(self.rows.q_lens.sum() + self.rows.v_lens.sum())
        return len(self.qualifiers) + len(self.values)

    def _joined(self) -> tuple[bytes, bytes]:
        """The rows' bytes parted into qualifiers and values (packed parts decoded, then
        one compiled pass, :func:`_join_parts`), once."""
        if self._parts is None:
            rows = self.rows
            assert rows is not None
            if not self.keys:
                self._parts = (b"", b"")
            else:
                bufs = rows.bufs
                if rows.packed.any():
                    bufs = full_rows(bufs, rows.packed, rows.q_lens, rows.v_lens)
                self._parts = _join_parts(bufs, rows.q_lens, rows.v_lens)
        return self._parts

    def part(self, rows: slice) -> HeadRuns:
        """The rows ``rows`` (a slice) as runs of their own (made from :attr:`rows`)."""
        assert self.rows is not None
        return HeadRuns(
            self.keys[rows],
            self.counts[rows],
            slots=None if self.slots is None else self.slots[rows],
            versions=None if self.versions is None else self.versions[rows],
            value_lengths=None if self.value_lengths is None else self.value_lengths[rows],
            rows=self.rows.part(rows),
        )


#: the arrays of an empty snapshot, shared (read-only: a snapshot writes only to its rows)
_NO_I: npt.NDArray[np.int64] = np.zeros(0, np.int64)
_NO_B: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
_NO_I.setflags(write=False)
_NO_B.setflags(write=False)


class HeadSnapshot:
    """The head's rows for one read, copied at once: per row its key, its bytes (the row's
    own ``bytes`` object, which the head never changes: points added make a new one), its
    point count, byte lengths, flags, slot and version (arrays). Taken on the event loop
    (the head's only writer), read afterwards from any thread. Rows a stored row of the
    same key holds too are merged into it (:meth:`merge_into`); rows a reader answers
    otherwise are set aside (:meth:`set_aside`); the rest are read on their own
    (:meth:`remaining`): the clean rows of seconds points, usually all of them, as one
    :class:`HeadRuns` whose qualifiers and values are parted from the rows' bytes then."""

    def __init__(
        self,
        keys: list[bytes],
        bufs: list[bytes],
        q_lens: npt.NDArray[np.int64],
        v_lens: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        ms_counts: npt.NDArray[np.int64],
        clean: npt.NDArray[np.bool_],
        slots: npt.NDArray[np.int64],
        versions: npt.NDArray[np.int64],
        packed: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self._keys = keys
        self._bufs = bufs
        #: per row, its packed part's bytes at the front of its bytes (None: none has one)
        self._packed = packed if packed is not None and packed.any() else None
        self._q_lens = q_lens
        self._v_lens = v_lens
        self._counts = counts
        self._ms_counts = ms_counts
        self._clean = clean
        self.slots = slots
        self.versions = versions
        self._left = np.ones(len(keys), np.bool_)  # not merged into a stored row
        self._index: dict[bytes, int] | None = None

    @classmethod
    def empty(cls) -> HeadSnapshot:
        """A snapshot of no row (a read of rows all written out: no array to copy)."""
        return cls([], [], _NO_I, _NO_I, _NO_I, _NO_I, _NO_B, _NO_I, _NO_I)

    def __len__(self) -> int:
        return int(np.count_nonzero(self._left))

    def _where(self) -> dict[bytes, int]:
        if self._index is None:
            self._index = dict(zip(self._keys, range(len(self._keys)), strict=True))
        return self._index

    def _copy(self, i: int) -> _Copy:
        buf, q_len = self._bufs[i], int(self._q_lens[i])
        if self._packed is not None and self._packed[i]:
            buf = full_row(buf, int(self._packed[i]), q_len, int(self._v_lens[i]))
        return (
            buf[:q_len],
            buf[q_len:],
            int(self._counts[i]),
            int(self._ms_counts[i]),
            bool(self._clean[i]),
        )

    def keys(self) -> list[bytes]:
        """The keys of the rows copied (not yet merged into a stored row)."""
        left = self._left
        if left.all():  # nothing merged yet (the usual case): every key, no step per row
            return list(self._keys)
        return [k for k, kept in zip(self._keys, left.tolist(), strict=True) if kept]

    def all_keys(self) -> list[bytes]:
        """Every row's key, merged or not, in the snapshot's row order (the order of
        :attr:`slots`, :attr:`versions` and :meth:`plain_rows`)."""
        return self._keys

    def keys_at(self, rows: npt.NDArray[np.int64]) -> list[bytes]:
        """The keys of the rows (indices in :meth:`all_keys`' order), by one compiled
        gather."""
        return _picked_at(self._keys, rows)

    def plain_rows(self) -> npt.NDArray[np.bool_]:
        """The rows :meth:`remaining` would hand over as :class:`HeadRuns` (clean rows of
        seconds points, not merged or set aside yet)."""
        plain: npt.NDArray[np.bool_] = self._left & self._clean & (self._ms_counts == 0)
        return plain

    def set_aside(self, rows: npt.NDArray[np.int64]) -> None:
        """The rows (indices) a reader answers otherwise: no longer :meth:`remaining`."""
        self._left[rows] = False

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

    def remaining(self, resort: bool = False) -> tuple[HeadRuns, CellBlock]:
        """The rows no stored row was merged with (and not set aside): clean rows of
        seconds points as :class:`HeadRuns`, the others as one block of cells. Once only.
        ``resort``: rows of seconds points that came out of order are runs too where
        their cells, in order, are (:func:`sorted_seconds`)."""
        fast = self.plain_rows()
        left = self._left
        self._left = np.zeros(len(left), np.bool_)
        slow = np.flatnonzero(left & ~fast).tolist()
        resorted: list[tuple[int, tuple[bytes, bytes, int]]] = []
        for i in slow if resort else ():
            if not self._ms_counts[i]:
                row = self._copy(i)
                found = sorted_seconds(row[0], row[1])
                if found is not None:
                    resorted.append((i, found))
        runs = self._runs(fast, resorted)
        if resorted:
            taken = {i for i, _ in resorted}
            slow = [i for i in slow if i not in taken]
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

    def _runs(
        self,
        take: npt.NDArray[np.bool_],
        resorted: Sequence[tuple[int, tuple[bytes, bytes, int]]] = (),
    ) -> HeadRuns:
        """The rows ``take`` as runs of their own bytes (:class:`RowBytes`: parted into
        qualifiers and values only if asked for), the rows' own list when every row is
        taken; then the rows ``resorted`` (index, :func:`sorted_seconds` of its points)."""
        q_lens, v_lens = self._q_lens, self._v_lens
        if take.all():
            keys, bufs, rows = list(self._keys), self._bufs, slice(None)
        else:
            at = np.flatnonzero(take)
            keys = _picked_at(self._keys, at)
            bufs = _picked_at(self._bufs, at)
            rows = at  # type: ignore[assignment]
        packed = self._packed[rows] if self._packed is not None else np.zeros(len(keys), np.int64)
        numbers = [self._counts[rows], self.slots[rows], self.versions[rows], packed]
        lengths = [q_lens[rows], v_lens[rows]]
        if resorted:
            more = np.array([i for i, _ in resorted], np.int64)
            keys = [*keys, *(self._keys[i] for i, _ in resorted)]
            bufs = [*bufs, *(q + v for _, (q, v, _) in resorted)]
            added = [
                np.array([n for _, (_, _, n) in resorted], np.int64),
                self.slots[more],
                self.versions[more],
                np.zeros(len(more), np.int64),
            ]
            numbers = [np.concatenate(pair) for pair in zip(numbers, added, strict=True)]
            added_lengths = [
                np.array([len(q) for _, (q, _, _) in resorted], np.int64),
                np.array([len(v) for _, (_, v, _) in resorted], np.int64),
            ]
            lengths = [np.concatenate(pair) for pair in zip(lengths, added_lengths, strict=True)]
        counts, slots, versions, packed = numbers
        return HeadRuns(
            keys,
            counts,
            slots=slots,
            versions=versions,
            value_lengths=lengths[1],
            rows=RowBytes(bufs, packed, lengths[0], lengths[1]),
        )


T = TypeVar("T")


def _picked(items: Sequence[T], at: list[int]) -> list[T]:
    """``[items[i] for i in at]`` by one C-level gather (72,000 head rows of a 30-day
    panel: a listcomp step each was a visible part of its read)."""
    if not at:
        return []
    if len(at) == 1:
        return [items[at[0]]]
    return list(itemgetter(*at)(items))


def _picked_at(items: list[T], at: npt.NDArray[np.int64]) -> list[T]:
    """:func:`_picked` of the indices ``at``, by the compiled ``picked`` (tsd/head/_runs.c,
    over the int64 indices as they are) where it is built."""
    if _c_picked is not None:
        found = _c_picked(items, np.ascontiguousarray(at, dtype=np.int64))
        if found is not None:
            return cast(list[T], found)
    return _picked(items, at.tolist())


def _hour_of_group(item: tuple[tuple[bytes, int], object]) -> int:
    return item[0][1]


def _offset_bounds(runs: Sequence[Run]) -> Iterable[tuple[bool, int, int]]:
    """Per run: (its offsets strictly increase, first offset ms, last offset ms); a run
    mixing seconds and milliseconds counts as not increasing (read as single cells).
    :func:`python_run_bounds` is the specification; the head reads these as columns of
    :func:`run_columns` (by the compiled helper where it is built: a burst of new series,
    or a million series at one point each, is a run of one point per row, and numpy's
    set-up per run, about 0.3 us, was most of the work)."""
    columns = run_columns(runs)
    return zip(columns[:, 3].astype(np.bool_).tolist(), *columns[:, 4:].T.tolist(), strict=True)


def join_repeated_rows(runs: Sequence[Run]) -> list[Run]:
    """:func:`python_join_repeated_rows`, by the compiled helper (``tsd/head/_runs.c``)
    when it is built and the runs are tuples of (bytes, int, bytes, bytes)."""
    if _c_join_repeated_rows is not None:
        joined = _c_join_repeated_rows(runs)
        if joined is not None:
            return cast(list[Run], joined)
    return python_join_repeated_rows(runs)


def append_rows(
    bufs: list[bytes | None], slots: list[int], at: list[int], runs: Sequence[Run]
) -> None:
    """Each run's points appended to its row's bytes (:func:`python_append_rows`), by the
    compiled helper (``append_rows`` in ``tsd/head/_runs.c``) where it is built."""
    if _c_append_rows is None or _c_append_rows(bufs, slots, at, runs) is None:
        python_append_rows(bufs, slots, at, runs)


def python_append_rows(
    bufs: list[bytes | None], slots: list[int], at: list[int], runs: Sequence[Run]
) -> None:
    """Per run, the row ``bufs[slots[i]]`` (its qualifiers, then its values) replaced by
    its bytes with the run's qualifiers inserted at ``at[i]`` (the end of the row's
    qualifiers) and the run's values at the end: a row is an exact-size ``bytes``, no
    room to grow kept (bench/head_memory.py)."""
    for s, end, run in zip(slots, at, runs, strict=True):
        buf = bufs[s]
        assert buf is not None
        bufs[s] = b"".join((buf[:end], run[2], buf[end:], run[3]))


def run_columns(runs: Sequence[Run]) -> npt.NDArray[np.int64]:
    """Per run, a row of six: its cells, its qualifiers' and values' lengths, then
    :func:`_offset_bounds` (increasing as 0 or 1, first, last); by the compiled helper
    (``run_columns`` in ``tsd/head/_runs.c``: one buffer, read as one array) when it is
    built and the runs are tuples of (bytes, int, bytes, bytes)."""
    if _c_run_columns is not None:
        packed = _c_run_columns(runs)
        if packed is not None:
            return np.frombuffer(packed, np.int64).reshape(len(runs), 6)
    return python_run_columns(runs)


def python_run_columns(runs: Sequence[Run]) -> npt.NDArray[np.int64]:
    """:func:`run_columns`' specification and fallback, with numpy."""
    n = len(runs)
    return np.stack(
        [
            np.fromiter(map(_SECOND, runs), np.int64, n),
            np.fromiter(map(len, map(_THIRD, runs)), np.int64, n),
            np.fromiter(map(len, map(_FOURTH, runs)), np.int64, n),
            *_python_bounds(runs),
        ],
        axis=1,
    )


def prefix_groups(keys: Sequence[bytes], end: int) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """The keys' distinct first ``end`` bytes in the order they first come, and per key
    the number of its own (:func:`python_prefix_groups`), by the compiled helper
    (``prefix_groups`` in ``tsd/head/_runs.c``) where it is built: a batch's new rows by
    group (metric and hour) without a slice per row."""
    if _c_prefix_groups is not None:
        found = _c_prefix_groups(keys, end)
        if found is not None:
            return found[0], np.frombuffer(found[1], np.int64)
    return python_prefix_groups(keys, end)


def python_prefix_groups(
    keys: Sequence[bytes], end: int
) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """:func:`prefix_groups`' specification and fallback."""
    heads: dict[bytes, int] = {}
    index = [heads.setdefault(bytes(key[:end]), len(heads)) for key in keys]
    return list(heads), np.array(index, np.int64)


def python_run_bounds(runs: Sequence[Run]) -> Iterator[tuple[bool, int, int]]:
    """:func:`_offset_bounds` with numpy: the runs of one qualifier width are checked all
    at once."""
    ok, first, last = _python_bounds(runs)
    return zip(ok.astype(np.bool_).tolist(), first.tolist(), last.tolist(), strict=True)


def _python_bounds(
    runs: Sequence[Run],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`python_run_bounds` as three arrays (increasing as 0 or 1)."""
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
    return ok.astype(np.int64), first, last
