"""The storage interface: a small async API shaped like HBase.

Tables hold rows; a row holds cells addressed by (family, qualifier); rows are
ordered by their key bytes (memcmp), cells within a row by (family, qualifier).
Everything is bytes in and bytes out, except table and family names, which are
ASCII names and kept as ``str``.

Every backend (embedded, hbase) implements :class:`Storage` and passes the one
contract suite in ``tests/storage/test_contract.py``. A backend maps its own
exceptions to :mod:`tsd.errors` (``StorageError`` and its subclasses,
``TableNotFound``) at this boundary; nothing backend-specific rises above it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from tsd.errors import StorageError


class Cell(NamedTuple):
    """One cell as read.

    A NamedTuple rather than a frozen dataclass: scans build one per cell, and a
    frozen dataclass's ``__init__`` costs several times as much (bench/storage.py).
    """

    family: str
    qualifier: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Row:
    """A row as read: its key and its cells sorted by (family, qualifier)."""

    key: bytes
    cells: tuple[Cell, ...]

    def value(self, family: str, qualifier: bytes) -> bytes | None:
        for cell in self.cells:
            if cell.family == family and cell.qualifier == qualifier:
                return cell.value
        return None


# -- bulk reads: cells end to end ----------------------------------------------------------
#
# CellBlock: rows read in bulk, their cells laid end to end (columnar), not one object each.
#
# A scan of 360,000 single cells as :class:`~tsd.storage.base.Row` / ``Cell`` objects costs
# about a microsecond of Python per cell before any decoding starts; the query engine wants
# the cells end to end anyway (:mod:`tsd.query.decode`). A CellBlock holds, for R rows and
# C cells: the R row keys, the cells per row, and per cell its family (an index into
# ``families``), qualifier length and value length, with all qualifiers joined in one bytes
# object and all values in another. The HBase backend fills one straight from the Thrift reply
# bytes (tsd/storage/hbase/rows.py); :meth:`CellBlock.from_rows` builds one from rows for the
# other backends.
#
# A CellBlock is also a ``Sequence[Row]`` whose rows are built on demand, for the rare code
# paths that want one row's cells as objects.

I64 = npt.NDArray[np.int64]
_EMPTY = np.zeros(0, dtype=np.int64)

#: HBase's longest row key (HConstants.MAX_ROW_LENGTH, Short.MAX_VALUE bytes): longer
#: rows are refused by the region server
HBASE_MAX_ROW_LENGTH = 32767


@dataclass(frozen=True, slots=True, eq=False)
class CellBlock(Sequence[Row]):
    """R rows and their C cells, end to end; cells of a row in (family, qualifier) order."""

    keys: list[bytes]
    counts: I64  # R: cells per row
    families: list[str]
    family_index: npt.NDArray[np.uint8]  # C: index into families
    qualifier_lengths: I64  # C
    value_lengths: I64  # C
    qualifiers: bytes
    values: bytes
    #: bytes received from storage for these rows (0 when unknown)
    wire_bytes: int = 0
    #: what the read's :data:`BlockWork` made of the block where it was read (None: not done)
    prepared: object = None

    @property
    def cell_count(self) -> int:
        return len(self.qualifier_lengths)

    @property
    def stored_bytes(self) -> int:
        """Key, qualifier and value bytes of every cell (what the query byte limit counts)."""
        keys = int(np.dot(np.fromiter(map(len, self.keys), np.int64, len(self.keys)), self.counts))
        return keys + len(self.qualifiers) + len(self.values)

    # -- Sequence[Row] --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        first, last = self._cell_range(index)
        return Row(self.keys[index], tuple(self._cells(first, last)))

    def __iter__(self) -> Iterator[Row]:
        cells = self._cells(0, self.cell_count)
        for key, count in zip(self.keys, self.counts.tolist(), strict=True):
            yield Row(key, tuple(next(cells) for _ in range(count)))

    def _cell_range(self, row: int) -> tuple[int, int]:
        first = int(self.counts[:row].sum())
        return first, first + int(self.counts[row])

    def _cells(self, first: int, last: int) -> Iterator[Cell]:
        q_at = int(self.qualifier_lengths[:first].sum())
        v_at = int(self.value_lengths[:first].sum())
        for i in range(first, last):
            ql, vl = int(self.qualifier_lengths[i]), int(self.value_lengths[i])
            family = self.families[int(self.family_index[i])]
            yield Cell(family, self.qualifiers[q_at : q_at + ql], self.values[v_at : v_at + vl])
            q_at += ql
            v_at += vl

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_rows(cls, rows: Sequence[Row], wire_bytes: int = 0) -> CellBlock:
        """The rows' cells end to end (one Python pass over the cells)."""
        if isinstance(rows, CellBlock):
            return rows
        families: dict[str, int] = {}
        cells = [c for r in rows for c in r.cells]
        quals = [c.qualifier for c in cells]
        vals = [c.value for c in cells]
        index = [families.setdefault(c.family, len(families)) for c in cells]
        n = len(cells)
        return cls(
            [r.key for r in rows],
            np.fromiter((len(r.cells) for r in rows), np.int64, len(rows)),
            list(families),
            np.array(index, dtype=np.uint8) if n else np.zeros(0, np.uint8),
            np.fromiter(map(len, quals), np.int64, n),
            np.fromiter(map(len, vals), np.int64, n),
            b"".join(quals),
            b"".join(vals),
            wire_bytes,
        )

    @classmethod
    def empty(cls) -> CellBlock:
        return cls([], _EMPTY, [], np.zeros(0, np.uint8), _EMPTY, _EMPTY, b"", b"")

    @classmethod
    def concat(cls, blocks: Sequence[CellBlock]) -> CellBlock:
        """One block of the blocks' rows, in order."""
        blocks = [b for b in blocks if len(b)]
        if not blocks:
            return cls.empty()
        if len(blocks) == 1:
            return blocks[0]
        families: list[str] = []
        remapped = []
        for b in blocks:
            mapping = np.array([_index_of(families, f) for f in b.families] or [0], dtype=np.uint8)
            remapped.append(mapping[b.family_index] if b.cell_count else b.family_index)
        return cls(
            [k for b in blocks for k in b.keys],
            np.concatenate([b.counts for b in blocks]),
            families,
            np.concatenate(remapped),
            np.concatenate([b.qualifier_lengths for b in blocks]),
            np.concatenate([b.value_lengths for b in blocks]),
            b"".join(b.qualifiers for b in blocks),
            b"".join(b.values for b in blocks),
            sum(b.wire_bytes for b in blocks),
        )

    def take(self, rows: Sequence[int] | npt.NDArray[Any]) -> CellBlock:
        """The block of the given rows (in the order given)."""
        picked = np.asarray(rows, dtype=np.int64)
        if len(picked) == len(self) and (picked == np.arange(len(self))).all():
            return self
        cell_start = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.counts, out=cell_start[1:])
        counts = self.counts[picked]
        # the picked cells' indices: each picked row's range, end to end
        cells = _ranges(cell_start[picked], counts)
        q_start = np.zeros(self.cell_count + 1, np.int64)
        np.cumsum(self.qualifier_lengths, out=q_start[1:])
        v_start = np.zeros(self.cell_count + 1, np.int64)
        np.cumsum(self.value_lengths, out=v_start[1:])
        qlen = self.qualifier_lengths[cells]
        vlen = self.value_lengths[cells]
        qbuf = np.frombuffer(self.qualifiers, np.uint8)
        vbuf = np.frombuffer(self.values, np.uint8)
        return CellBlock(
            [self.keys[i] for i in picked.tolist()],
            counts,
            self.families,
            self.family_index[cells],
            qlen,
            vlen,
            qbuf[_ranges(q_start[cells], qlen)].tobytes(),
            vbuf[_ranges(v_start[cells], vlen)].tobytes(),
            self.wire_bytes,
        )


# PointBlock: rows read in bulk whose points the store decoded itself.
#
# The embedded store keeps compacted cells in a columnar form of its own (packed rows,
# tsd/storage/embedded/packed.py). Turning those columns back into OpenTSDB cell bytes only
# for the query to decode the bytes again cost most of a query; for the rows where it is
# exact, the store reads the columns straight into points (tsd/storage/embedded/points.py):
# per point its offset in ms from its row's base time (the key layout, which gives the base
# time, belongs to the query layer), its value as a double and, for integers, exactly.
# They are the points tsd.query.decode finds in the rows' cells: sorted, no duplicates.

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class PointBlock:
    """R rows and their P points, row after row (``counts``: points per row).

    ``ints``/``is_int`` are None when no point is an integer. ``cell_count`` and
    ``stored_bytes`` are what the rows' cells would count (the query byte limit counts the
    cells' key, qualifier and value bytes). :meth:`cells` builds the rows' cells, for
    readers that want them (the query path never does)."""

    keys: list[bytes]
    counts: I64
    offsets_ms: I64
    values: F64
    ints: I64 | None
    is_int: npt.NDArray[np.bool_] | None
    cell_count: int
    stored_bytes: int
    build_cells: Callable[[], CellBlock]
    wire_bytes: int = 0
    #: what the read's :data:`BlockWork` made of the block where it was read (None: not done)
    prepared: object = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def point_count(self) -> int:
        return len(self.offsets_ms)

    def cells(self) -> CellBlock:
        return self.build_cells()

    @classmethod
    def concat(cls, blocks: Sequence[PointBlock]) -> PointBlock:
        """One block of the blocks' rows, in order (at least one block)."""
        if len(blocks) == 1:
            return blocks[0]
        ints: I64 | None = None
        is_int: npt.NDArray[np.bool_] | None = None
        if any(b.ints is not None for b in blocks):
            ints = np.concatenate(
                [np.zeros(b.point_count, np.int64) if b.ints is None else b.ints for b in blocks]
            )
            is_int = np.concatenate(
                [
                    np.zeros(b.point_count, np.bool_) if b.is_int is None else b.is_int
                    for b in blocks
                ]
            )
        parts = list(blocks)
        return cls(
            [k for b in parts for k in b.keys],
            np.concatenate([b.counts for b in parts]),
            np.concatenate([b.offsets_ms for b in parts]),
            np.concatenate([b.values for b in parts]),
            ints,
            is_int,
            sum(b.cell_count for b in parts),
            sum(b.stored_bytes for b in parts),
            lambda: CellBlock.concat([b.cells() for b in parts]),
            sum(b.wire_bytes for b in parts),
        )


def joined_blocks(blocks: Sequence[Block]) -> list[Block]:
    """The non-empty ``blocks``, each run of one kind (CellBlock, PointBlock) as one block."""
    out: list[Block] = []
    run: list[Any] = []
    for block in blocks:
        if not len(block):
            continue
        if run and type(run[0]) is not type(block):
            out.append(type(run[0]).concat(run))
            run = []
        run.append(block)
    if run:
        out.append(type(run[0]).concat(run))
    return out


#: what a bulk read yields
Block = CellBlock | PointBlock

#: Work on each block of a bulk read that the store may do where it reads the block (the
#: embedded store: in its reader thread, the read transaction still open), its result
#: handed over in the block's ``prepared``. A store that does not (HBase: its replies are
#: read on the event loop) hands blocks over with ``prepared`` None and the reader does
#: the work itself, so a work answers None for a block it cannot do rather than raise.
BlockWork = Callable[[Block], object]


def prepared(block: Block, work: BlockWork | None) -> Block:
    """``block`` with ``work``'s result (the block itself without a work)."""
    if work is None:
        return block
    return dataclasses.replace(block, prepared=work(block))


@dataclass(slots=True)
class ReadStats:
    """What reading data cost one query, added up over its storage calls.

    ``cells``/``rows``: data cells and rows received; ``key_rows``: rows received as keys
    only (a key-only pass); ``wire_bytes``: reply bytes received; ``decode_s``: CPU time
    spent turning reply bytes into cells.
    """

    rows: int = 0
    cells: int = 0
    key_rows: int = 0
    wire_bytes: int = 0
    decode_s: float = 0.0
    calls: int = 0
    #: how the rows were chosen (the query layer's read path), for showStats
    path: str = ""

    def add(self, block: Block, decode_s: float) -> None:
        self.rows += len(block)
        self.cells += block.cell_count
        self.wire_bytes += block.wire_bytes
        self.decode_s += decode_s
        self.calls += 1


def _index_of(names: list[str], name: str) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def _ranges(starts: I64, lengths: I64) -> I64:
    """The indices start[i] .. start[i] + length[i] - 1 for every i, end to end."""
    total = int(lengths.sum())
    if total == 0:
        return _EMPTY
    offsets = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


class Put(NamedTuple):
    """Set one cell (creating the row if needed). A NamedTuple (as :class:`Cell`): every
    new series builds several (UID rows, series index), and a frozen dataclass's
    ``__init__`` costs several times as much."""

    row: bytes
    family: str
    qualifier: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete one cell, a whole family of a row (qualifier None), or a whole row (family None)."""

    row: bytes
    family: str | None = None
    qualifier: bytes | None = None


Mutation = Put | Delete


class CheckAndPut(NamedTuple):
    """One check-and-put of :meth:`Storage.check_and_put_many`: apply ``put`` only if the
    cell (``put.row``, family, qualifier) holds ``expected`` (None: must not exist).
    A NamedTuple: a batch of new UIDs builds two per name."""

    family: str
    qualifier: bytes
    expected: bytes | None
    put: Put


@dataclass(frozen=True, slots=True)
class RowFilter:
    """A row predicate a backend may push down.

    ``regex`` is a bytes regular expression matched against the whole row key,
    each byte standing for the character of the same code (ISO-8859-1), as
    OpenTSDB's ``KeyRegexpFilter`` does. It must match the whole key
    (``fullmatch``); compile with DOTALL so ``.`` matches every byte.
    """

    regex: bytes
    #: A necessary condition the regex implies, which a backend may push down as a
    #: pre-filter (never instead of the regex): for every entry, the key contains one of its
    #: byte strings. Empty: none given.
    contains: tuple[tuple[bytes, ...], ...] = ()
    _compiled: re.Pattern[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.regex, re.DOTALL))

    def matches(self, key: bytes) -> bool:
        return self._compiled.fullmatch(key) is not None


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """A range scan: rows with ``start <= key < stop`` (an empty stop: to the end)."""

    start: bytes = b""
    stop: bytes = b""
    families: tuple[str, ...] = ()  # empty: every family
    row_filter: RowFilter | None = None
    limit: int | None = None  # at most this many rows
    batch_rows: int = 1024  # rows fetched per round trip (HBase scanner caching)


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """A column family and the HBase options tsd sets on it."""

    name: str
    max_versions: int = 1
    compression: str = "NONE"
    bloom_filter: str = "ROW"
    block_cache: bool = True
    ttl_s: int | None = None  # None: forever
    #: the embedded store keeps all of a row's cells of the family in one entry, as
    #: columns (rollup tables: many small cells read together); HBase ignores it
    packed_rows: bool = False


def check_distinct_cells(checks: Sequence[CheckAndPut]) -> None:
    """The precondition of :meth:`Storage.check_and_put_many`."""
    if len({c.put.row for c in checks}) == len(checks):  # distinct rows (a UID batch's)
        return
    cells = {(c.put.row, c.family, c.qualifier) for c in checks}
    if len(cells) != len(checks):
        raise StorageError("check_and_put_many: two checks on one cell")


class CellColumn(NamedTuple):
    """Cells of one column over many rows: ``values[i]`` for the cell ``family:qualifier``
    of ``rows[i]`` (:meth:`Storage.put_column`, :meth:`Storage.put_if_absent_column`: a
    batch of new UIDs' mappings, given as columns rather than an object per cell)."""

    family: str
    qualifier: bytes
    rows: Sequence[bytes]
    values: Sequence[bytes]

    def puts(self) -> list[Put]:
        """One Put per row, built at C speed (map and zip: no Python step per cell)."""
        fields = zip(self.rows, repeat(self.family), repeat(self.qualifier), self.values)
        return list(map(_new, repeat(Put), fields))

    def absent_checks(self) -> list[CheckAndPut]:
        """Per row, a check that its cell is absent, putting its value."""
        checks = zip(repeat(self.family), repeat(self.qualifier), repeat(None), self.puts())
        return list(map(_new, repeat(CheckAndPut), checks))

    def check_distinct(self) -> None:
        """The precondition of :meth:`Storage.put_if_absent_column` (one column: distinct
        rows are distinct cells), with :func:`check_distinct_cells`' error."""
        if len(set(self.rows)) != len(self.rows):
            raise StorageError("check_and_put_many: two checks on one cell")


def column_values(
    found: Iterable[Row], family: str, qualifier: bytes, rows: Sequence[bytes]
) -> list[bytes | None]:
    """:meth:`Storage.get_column`'s answer from the rows read (``found``, those with cells):
    per row of ``rows``, the value of its cell ``family:qualifier`` or None."""
    values = {row.key: row.value(family, qualifier) for row in found}
    return list(map(values.get, rows))


#: builds a NamedTuple (Put, CheckAndPut) from a tuple of its fields without the Python
#: frame of its generated ``__new__``
_new = tuple.__new__


class Storage(ABC):
    """An async, HBase-shaped store. See the module docstring for the contract."""

    def max_row_length(self, family: str) -> int:
        """The longest row key (in bytes, none of them 00) a cell of ``family`` may have;
        longer rows raise StorageError. HBase's limit unless a backend has a smaller one
        (the UID table's forward rows are names: tsd.uid refuses longer names up front)."""
        return HBASE_MAX_ROW_LENGTH

    @abstractmethod
    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        """Create ``table`` with ``families``; idempotent. True when it was created now."""

    @abstractmethod
    async def list_tables(self) -> list[str]:
        """The names of the existing tables, sorted."""

    @abstractmethod
    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        """Apply puts and deletes in order. When this returns, they are durable."""

    async def put(self, table: str, puts: Sequence[Put]) -> None:
        await self.mutate(table, puts)

    async def delete(self, table: str, deletes: Sequence[Delete]) -> None:
        await self.mutate(table, deletes)

    @abstractmethod
    async def get(self, table: str, row: bytes, families: Sequence[str] = ()) -> Row | None:
        """The row with its cells (only ``families`` when given), or None when it has none."""

    async def get_many(
        self, table: str, rows: Sequence[bytes], families: Sequence[str] = ()
    ) -> list[Row]:
        """The rows that exist among ``rows``, in the order asked."""
        found = []
        for key in rows:
            row = await self.get(table, key, families)
            if row is not None:
                found.append(row)
        return found

    @abstractmethod
    def scan(self, table: str, spec: ScanSpec) -> AsyncGenerator[Row, None]:
        """Rows in key order. Callers that may leave early wrap it in ``contextlib.aclosing``.

        An async generator (not just an iterator) so that ``aclosing`` type-checks.
        """

    # -- bulk reads (the query path): cells end to end (CellBlock) -------------------------

    async def scan_blocks(
        self,
        table: str,
        spec: ScanSpec,
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        """The rows of :meth:`scan`, ``spec.batch_rows`` at a time, as CellBlocks (row
        filter applied), or as PointBlocks where the store decodes its rows itself; each
        with ``work`` done where the store does it (:data:`BlockWork`: not here). Backends
        that read replies in bulk override it."""
        batch: list[Row] = []
        async with contextlib.aclosing(self.scan(table, spec)) as rows:
            async for row in rows:
                batch.append(row)
                if len(batch) >= spec.batch_rows:
                    block = CellBlock.from_rows(batch)
                    if stats is not None:
                        stats.add(block, 0.0)
                    yield block
                    batch = []
        if batch:
            block = CellBlock.from_rows(batch)
            if stats is not None:
                stats.add(block, 0.0)
            yield block

    def parallel_reads(self) -> int:
        """Reads of one sub-query worth having in flight at once (the query path cuts a
        scan in that many time slices): HBase's round trips overlap, so 4 by default."""
        return 4

    def reads_ranges_at_once(self) -> bool:
        """Whether :meth:`scan_ranges` reads many key ranges per call to the store (the
        embedded store: one reader-thread hop), so the query path hands it all of a
        sub-query's small ranges together rather than scanning a few at a time in parallel
        (round trips to HBase)."""
        return False

    async def scan_ranges(
        self,
        table: str,
        specs: Sequence[ScanSpec],
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        """The rows of the scans ``specs`` (disjoint key ranges in key order), in order, as
        :meth:`scan_blocks` gives them (``work`` as there); a block may hold rows of
        several ranges."""
        for spec in specs:
            scan = self.scan_blocks(table, spec, stats, work)
            async with contextlib.aclosing(scan) as blocks:
                async for block in blocks:
                    yield block

    async def get_blocks(
        self,
        table: str,
        rows: Sequence[bytes],
        families: Sequence[str] = (),
        stats: ReadStats | None = None,
    ) -> CellBlock:
        """:meth:`get_many` as one CellBlock (the rows that exist, in the order asked)."""
        block = CellBlock.from_rows(await self.get_many(table, rows, families))
        if stats is not None:
            stats.add(block, 0.0)
        return block

    async def scan_keys(
        self, table: str, spec: ScanSpec, stats: ReadStats | None = None
    ) -> AsyncGenerator[list[bytes], None]:
        """The keys of the rows :meth:`scan` would return (row filter applied), in batches,
        without their cells' values where the backend can leave them out."""
        batch: list[bytes] = []
        async with contextlib.aclosing(self.scan(table, spec)) as rows:
            async for row in rows:
                batch.append(row.key)
                if len(batch) >= spec.batch_rows:
                    if stats is not None:
                        stats.key_rows += len(batch)
                    yield batch
                    batch = []
        if batch:
            if stats is not None:
                stats.key_rows += len(batch)
            yield batch

    async def holds_rows(self, table: str, start: bytes, stop: bytes) -> bool:
        """Whether rows in ``[start, stop)`` (an empty stop: to the end) may be stored:
        False only where the backend tells cheaply that there are none (the embedded
        store: a seek), so that a read of rows all still in the head skips its scans."""
        return True

    async def last_key(self, table: str, start: bytes, stop: bytes) -> bytes | None:
        """The greatest row key in ``[start, stop)``, when the backend can tell it cheaply
        (HBase: a reversed scan of one row); None: no row, or not known cheaply. Used to cut
        a big scan into key ranges read in parallel."""
        return None

    async def delete_range(self, table: str, start: bytes, stop: bytes) -> int:
        """Delete every row with ``start <= key < stop``; the rows deleted. Retention drops
        whole expired hours with it. This default scans the keys and deletes them in
        batches; a backend that can delete a key range in place overrides it."""
        deleted = 0
        spec = ScanSpec(start=start, stop=stop, batch_rows=1024)
        async with contextlib.aclosing(self.scan_keys(table, spec)) as batches:
            async for keys in batches:
                await self.delete(table, [Delete(key) for key in keys])
                deleted += len(keys)
        return deleted

    @abstractmethod
    async def increment(
        self, table: str, row: bytes, family: str, qualifier: bytes, amount: int = 1
    ) -> int:
        """Atomically add ``amount`` to an 8-byte big-endian signed counter; the new value.

        A missing cell counts as 0.
        """

    @abstractmethod
    async def check_and_put(
        self,
        table: str,
        row: bytes,
        family: str,
        qualifier: bytes,
        expected: bytes | None,
        put: Put,
    ) -> bool:
        """Apply ``put`` only if the cell (row, family, qualifier) holds ``expected``.

        ``expected=None`` means the cell must not exist; as in HBase, ``None`` and ``b""``
        both match a missing cell or an empty one. True when applied.
        """

    async def check_and_put_many(self, table: str, checks: Sequence[CheckAndPut]) -> list[bool]:
        """Many independent check-and-puts, each on its own put's row, each atomic on its
        own as :meth:`check_and_put` (HBase has no multi-row CAS); ``applied`` per check,
        in order. The checked cells must be distinct (StorageError otherwise): the checks
        may run concurrently, so none may depend on another.

        The point is the round trips: a backend runs them in one write (embedded) or
        concurrently over its connections (HBase). This default runs them one by one."""
        check_distinct_cells(checks)
        return [
            await self.check_and_put(
                table, check.put.row, check.family, check.qualifier, check.expected, check.put
            )
            for check in checks
        ]

    async def get_column(
        self, table: str, family: str, qualifier: bytes, rows: Sequence[bytes]
    ) -> list[bytes | None]:
        """Per row of ``rows``, the value of its cell ``family:qualifier``, or None when it
        has none: one read (a batch of names' forward UID rows). This default reads the
        rows; a backend may read the cells straight (the embedded store: one getmulti of
        keys made from the rows)."""
        return column_values(await self.get_many(table, rows, (family,)), family, qualifier, rows)

    async def put_if_absent_column(self, table: str, column: CellColumn) -> list[bool]:
        """:meth:`check_and_put_many` of one column: for each of its rows (distinct), put
        its value into the row's cell if that cell is absent (or empty, HBase's rule);
        applied per row, in order. What a batch of new UIDs asks (its forward mappings, a
        random ID's reverse ones). This default builds the checks; a backend may take the
        columns as they are (the embedded store makes the cells' keys from the rows)."""
        return await self.check_and_put_many(table, column.absent_checks())

    async def put_column(self, table: str, column: CellColumn) -> None:
        """:meth:`put` of one column (a batch of new UIDs' reverse mappings)."""
        await self.put(table, column.puts())

    @abstractmethod
    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        """Atomically append ``value`` to the cell's bytes (creating it if missing)."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources; later calls raise StorageUnavailable."""
