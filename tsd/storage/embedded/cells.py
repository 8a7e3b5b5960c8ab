"""Blocking cell operations inside one LMDB transaction (run off the event loop).

Write functions run on the writer thread inside its write transaction; read
functions run on a reader thread inside a short read transaction. Both see
cells through the key layout of :mod:`tsd.storage.embedded.keys`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import add, attrgetter
from typing import TYPE_CHECKING, TypeAlias

import lmdb

from tsd.errors import StorageError
from tsd.storage.base import (
    Cell,
    CellColumn,
    CheckAndPut,
    Delete,
    FamilySpec,
    Mutation,
    Put,
    Row,
    RowFilter,
    column_values,
)
from tsd.storage.embedded import packed
from tsd.storage.embedded.keys import (
    KEY_LIMIT,
    PACKED_FAMILY,
    cell_key,
    cell_prefix,
    cell_prefixes,
    cell_tail,
    decode_bucket,
    encode_bucket,
    is_bucket,
    is_packed,
    packed_key,
    row_after,
    row_start,
    split_row,
)

if TYPE_CHECKING:
    Txn: TypeAlias = lmdb.Transaction[bytes]  # generic in py-lmdb's stubs only
else:
    Txn = lmdb.Transaction

#: a scan batch ends at the first row boundary past this many cells
MAX_BATCH_CELLS = 65_536
#: builds a Cell (a NamedTuple) from a (family, qualifier, value) tuple: 5x cheaper per cell
#: than calling Cell(...), whose generated __new__ adds a Python frame
_new_cell = tuple.__new__
_INT64 = 1 << 64


@dataclass(frozen=True, slots=True)
class TableInfo:
    """An open table: its LMDB database and its families."""

    name: str
    db: lmdb._Database
    families: tuple[FamilySpec, ...]
    #: the packed rows (keys.py): a database of their own, so that the pages of the rows
    #: that stay are not the sparse leftovers of the single cells compaction deletes
    packed: lmdb._Database | None = None
    #: family name as stored in keys -> family name
    names: dict[bytes, str] = field(init=False, repr=False, compare=False)
    #: the families whose rows are packed whole (FamilySpec.packed_rows)
    grouped: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = {spec.name.encode("ascii"): spec.name for spec in self.families}
        object.__setattr__(self, "names", names)
        grouped = frozenset(spec.name for spec in self.families if spec.packed_rows)
        object.__setattr__(self, "grouped", grouped)

    def packs(self, family: str, qualifier: bytes) -> bool:
        """Whether the cell lives in its row's packed entry (keys.is_packed, or every cell
        of a family whose rows are packed whole)."""
        return family in self.grouped or is_packed(family, qualifier)

    def check_family(self, family: str) -> None:
        if family.encode("ascii", "replace") not in self.names:
            raise StorageError(f"no column family {family!r} in table {self.name!r}")


# -- single cells ---------------------------------------------------------------------------


def read_cell(
    txn: Txn, table: TableInfo, row: bytes, family: str, qualifier: bytes
) -> bytes | None:
    table.check_family(family)
    if table.packs(family, qualifier):
        if table.packed is None:
            return None
        stored = txn.get(packed_key(row, family), db=table.packed)
        return None if stored is None else dict(packed.unpack(stored)).get(qualifier)
    key, bucket = cell_key(cell_prefix(row, family), qualifier)
    stored = txn.get(key, db=table.db)
    if stored is None or not bucket:
        return stored
    return dict(decode_bucket(stored)).get(qualifier)


def write_cell(
    txn: Txn, table: TableInfo, put: Put, encoded: Mapping[packed.Pair, bytes] | None = None
) -> None:
    """``encoded``: packed cells encoded already (:func:`apply_mutations`)."""
    if not put.row:
        raise StorageError("row key must not be empty")
    table.check_family(put.family)
    if table.packs(put.family, put.qualifier):
        _update_packed(txn, table, put.row, put.family, put.qualifier, put.value, encoded)
        return
    key, bucket = cell_key(cell_prefix(put.row, put.family), put.qualifier)
    if not bucket:
        txn.put(key, put.value, db=table.db)
        return
    stored = txn.get(key, db=table.db)
    pairs = dict(decode_bucket(stored)) if stored is not None else {}
    pairs[put.qualifier] = put.value
    txn.put(key, encode_bucket(pairs), db=table.db)


def _update_packed(
    txn: Txn,
    table: TableInfo,
    row: bytes,
    family: str,
    qualifier: bytes,
    value: bytes | None,
    encoded: Mapping[packed.Pair, bytes] | None = None,
) -> None:
    """Set (or with ``value`` None, remove) one cell of the row's packed entry."""
    _update_packed_many(txn, table, row, family, [(qualifier, value)], encoded)


def _update_packed_many(
    txn: Txn,
    table: TableInfo,
    row: bytes,
    family: str,
    changes: Sequence[tuple[bytes, bytes | None]],
    encoded: Mapping[packed.Pair, bytes] | None = None,
) -> None:
    """Set (value None: remove) cells of the row's packed entry, in order, in one rewrite."""
    db = _packed_db(table)
    key = packed_key(row, family)
    stored = txn.get(key, db=db)
    changed, entry = packed.merge(stored, changes, encoded, grouped=family in table.grouped)
    if not changed:
        return
    if entry is not None:
        txn.put(key, entry, db=db)
    else:
        txn.delete(key, db=db)


def _packed_db(table: TableInfo) -> lmdb._Database:
    if table.packed is None:
        raise StorageError("embedded store opened read-only")
    return table.packed


def _delete_cell(txn: Txn, table: TableInfo, row: bytes, family: str, qualifier: bytes) -> None:
    if table.packs(family, qualifier):
        _update_packed(txn, table, row, family, qualifier, None)
        return
    key, bucket = cell_key(cell_prefix(row, family), qualifier)
    if not bucket:
        txn.delete(key, db=table.db)
        return
    stored = txn.get(key, db=table.db)
    if stored is None:
        return
    pairs = dict(decode_bucket(stored))
    if pairs.pop(qualifier, None) is None:
        return
    if pairs:
        txn.put(key, encode_bucket(pairs), db=table.db)
    else:
        txn.delete(key, db=table.db)


def _delete_prefix(txn: Txn, table: TableInfo, prefix: bytes, packed_too: bool = False) -> None:
    if packed_too and table.packed is not None:
        _delete_prefix_in(txn.cursor(db=table.packed), prefix)
    _delete_prefix_in(txn.cursor(db=table.db), prefix)


def _delete_prefix_in(cursor: lmdb.Cursor[bytes], prefix: bytes) -> None:
    if not cursor.set_range(prefix):
        return
    # Cursor.delete moves to the next entry; an exhausted cursor has key b"".
    while cursor.key().startswith(prefix):
        if not cursor.delete():
            break


# -- write-transaction operations -------------------------------------------------------------


def apply_mutations(txn: Txn, table: TableInfo, mutations: Sequence[Mutation]) -> None:
    """Apply puts and deletes in order. Runs of plain puts go through one putmulti.

    The hot path of ingest: batches arrive sorted, so the key prefix is reused
    while the row and family stay the same.
    """
    if _put_plain_run(txn, table, mutations):
        return
    encoded = _encode_packed(table, mutations)
    run: list[tuple[bytes, bytes]] = []
    last_row: bytes | None = None
    last_family: str | None = None
    family_tail = b""  # keys.cell_tail(last_family)
    prefix = b""
    room = 0
    # consecutive changes of one row's cells in a family packed whole: one rewrite
    group: list[tuple[bytes, bytes | None]] = []
    group_at: tuple[bytes, str] = (b"", "")
    for mutation in mutations:
        family = mutation.family
        if (
            family is not None
            and family in table.grouped
            and (isinstance(mutation, Put) or mutation.qualifier is not None)
        ):
            if mutation.row != group_at[0] or family != group_at[1]:
                _flush_group(txn, table, group_at, group)
                if not mutation.row:
                    raise StorageError("row key must not be empty")
                group_at = (mutation.row, family)
            value = mutation.value if isinstance(mutation, Put) else None
            assert mutation.qualifier is not None
            group.append((mutation.qualifier, value))
            continue
        if group:
            _flush_group(txn, table, group_at, group)
        if isinstance(mutation, Put):
            row, family = mutation.row, mutation.family
            if row != last_row or family != last_family:
                if not row:
                    raise StorageError("row key must not be empty")
                if family != last_family:
                    table.check_family(family)
                    family_tail = cell_tail(family)
                    last_family = family
                prefix = row.replace(b"\x00", b"\x00\xff") + family_tail  # cell_prefix
                if len(prefix) > KEY_LIMIT:
                    cell_prefix(row, family)  # raises the too-long error
                room = KEY_LIMIT - len(prefix)
                last_row = row
            qualifier = mutation.qualifier
            if len(qualifier) < room and (
                family != PACKED_FAMILY or not is_packed(family, qualifier)  # keys.py
            ):
                run.append((prefix + qualifier, mutation.value))
                continue
        _flush_puts(txn, table, run)
        if isinstance(mutation, Put):
            write_cell(txn, table, mutation, encoded)
        else:
            _apply_delete(txn, table, mutation)
    _flush_group(txn, table, group_at, group)
    _flush_puts(txn, table, run)


def _put_plain_run(txn: Txn, table: TableInfo, mutations: Sequence[Mutation]) -> bool:
    """:func:`apply_mutations` of puts all of one family stored a cell a key (neither
    packed nor grouped), whose keys all fit: their keys made at C speed and put in one
    ``putmulti`` (a batch of new UIDs' reverse mappings, meta's rows: thousands of puts,
    no Python step each). False, nothing done, for any other list."""
    if len(mutations) < 2:
        return False
    family = mutations[0].family  # the data table's cells (packed) are told at once
    if family == PACKED_FAMILY or family in table.grouped or family is None:
        return False
    if set(map(type, mutations)) != {Put} or set(map(_family, mutations)) != {family}:
        return False
    rows = list(map(_row, mutations))
    if b"" in rows:
        return False  # the loop raises, in order
    table.check_family(family)
    keys = list(map(add, cell_prefixes(rows, family), map(_qualifier, mutations)))
    if max(map(len, keys)) >= KEY_LIMIT:
        return False  # a key too long: the loop raises or stores it apart
    txn.cursor(db=table.db).putmulti(list(zip(keys, map(_value, mutations), strict=True)))
    return True


_family = attrgetter("family")
_row = attrgetter("row")
_qualifier = attrgetter("qualifier")
_value = attrgetter("value")


def _flush_group(
    txn: Txn, table: TableInfo, at: tuple[bytes, str], group: list[tuple[bytes, bytes | None]]
) -> None:
    if group:
        _update_packed_many(txn, table, at[0], at[1], group)
        group.clear()


def _encode_packed(table: TableInfo, mutations: Sequence[Mutation]) -> dict[packed.Pair, bytes]:
    """The packed cells (compacted data cells) the mutations put, encoded in one call (the
    head writes many rows at once: packed.encode_cells takes them together); not those of
    families packed whole (their group form encodes no cell on its own)."""
    cells = [
        (m.qualifier, m.value)
        for m in mutations
        if m.family == PACKED_FAMILY  # is_packed's first test, the cheapest one first
        and isinstance(m, Put)
        and type(m.value) is bytes
        and type(m.qualifier) is bytes
        and is_packed(m.family, m.qualifier)
        and m.family not in table.grouped
    ]
    if len(cells) < 2:
        return {}
    return dict(zip(cells, packed.encode_cells(cells), strict=True))


def _flush_puts(txn: Txn, table: TableInfo, run: list[tuple[bytes, bytes]]) -> None:
    if run:
        txn.cursor(db=table.db).putmulti(run)
        run.clear()


def _apply_delete(txn: Txn, table: TableInfo, delete: Delete) -> None:
    if delete.family is None:
        if delete.qualifier is not None:
            raise StorageError("a Delete with a qualifier needs a family")
        _delete_prefix(txn, table, row_start(delete.row), packed_too=True)
        return
    table.check_family(delete.family)
    if delete.qualifier is None:
        _delete_prefix(txn, table, cell_prefix(delete.row, delete.family))
        if delete.family == PACKED_FAMILY or delete.family in table.grouped:
            txn.delete(packed_key(delete.row, delete.family), db=_packed_db(table))
    else:
        _delete_cell(txn, table, delete.row, delete.family, delete.qualifier)


def increment(
    txn: Txn, table: TableInfo, row: bytes, family: str, qualifier: bytes, amount: int
) -> int:
    current = read_cell(txn, table, row, family, qualifier)
    if current is None:
        old = 0
    elif len(current) == 8:
        old = int.from_bytes(current, "big", signed=True)
    else:
        # HBase's wording for the same refusal.
        raise StorageError("Attempted to increment field that isn't 64 bits wide")
    new = (old + amount + (1 << 63)) % _INT64 - (1 << 63)  # wraps like a Java long
    write_cell(txn, table, Put(row, family, qualifier, new.to_bytes(8, "big", signed=True)))
    return new


def check_and_put(
    txn: Txn,
    table: TableInfo,
    row: bytes,
    family: str,
    qualifier: bytes,
    expected: bytes | None,
    put: Put,
) -> bool:
    current = read_cell(txn, table, row, family, qualifier)
    # HBase: a null or empty expected value matches a missing or an empty cell.
    matches = current == expected if expected else not current
    if matches:
        write_cell(txn, table, put)
    return matches


def check_and_put_many(txn: Txn, table: TableInfo, checks: Sequence[CheckAndPut]) -> list[bool]:
    """:func:`check_and_put` of each check, in order (distinct cells, one transaction).

    Checks that plain cells are absent (what a batch of new UIDs makes: two per name) go
    in bulk: one ``getmulti`` finds which of their keys exist, and those absent are put in
    one ``putmulti`` (applied: LMDB has one writer, nothing comes between); a key present
    goes through :func:`check_and_put` (an empty stored cell counts as absent, as in
    HBase), as do packed, bucketed and other checks, each in its place in the order."""
    fresh = _absent_cell_keys(table, checks)
    if fresh is not None and _put_all_absent(
        txn, table, fresh, list(map(_value, map(_put, checks)))
    ):
        return [True] * len(checks)  # a batch of new UIDs' mappings: keys made at C speed
    keys: list[bytes | None] = []
    values: list[bytes] = []
    family_at: str | None = None
    qualifier_at = b""
    tail: bytes | None = None  # the key's end for cells of (family_at, qualifier_at)
    for family, qualifier, expected, put in checks:
        if family != family_at or qualifier != qualifier_at:  # once per run (a UID batch: 1)
            table.check_family(family)
            family_at, qualifier_at = family, qualifier
            tail = None
            if not table.packs(family, qualifier):
                tail = cell_tail(family, qualifier)
        row = put.row
        key = None
        if expected is None and row and tail is not None:
            key = row.replace(b"\x00", b"\x00\xff") + tail  # keys.escape_row
            if len(key) >= KEY_LIMIT:  # a bucket or a prefix too long (keys.py)
                key = None
        keys.append(key)
        values.append(put.value)
    cursor = txn.cursor(db=table.db)
    plain = [key for key in keys if key is not None]
    present = {key for key, _ in cursor.getmulti(plain)} if plain else set()
    if plain and not present and len(plain) == len(checks):  # every check a fresh cell
        cursor.putmulti(list(zip(plain, values, strict=True)))
        return [True] * len(checks)
    results: list[bool] = []
    for key, (family, qualifier, expected, put) in zip(keys, checks, strict=True):
        if key is not None and key not in present:
            txn.put(key, put.value, db=table.db)
            results.append(True)
        else:
            results.append(check_and_put(txn, table, put.row, family, qualifier, expected, put))
    return results


def put_if_absent_column(txn: Txn, table: TableInfo, column: CellColumn) -> list[bool]:
    """:meth:`Storage.put_if_absent_column` (distinct rows, checked by the caller): when
    every cell is stored a key of its own and none exists, one ``getmulti`` and one
    ``putmulti`` of keys made from the rows at C speed (a batch of new UIDs: no object per
    check); otherwise :func:`check_and_put_many` of the checks, each in its place."""
    keys = column_keys(table, column.family, column.qualifier, column.rows)
    if keys is not None and _put_all_absent(txn, table, keys, column.values):
        return [True] * len(keys)
    return check_and_put_many(txn, table, column.absent_checks())


def put_column(txn: Txn, table: TableInfo, column: CellColumn) -> None:
    """:meth:`Storage.put_column`: one ``putmulti`` of keys made from the rows at C speed
    when every cell is stored a key of its own; otherwise :func:`apply_mutations`."""
    keys = column_keys(table, column.family, column.qualifier, column.rows)
    if keys is None:
        apply_mutations(txn, table, column.puts())
    elif keys:
        txn.cursor(db=table.db).putmulti(list(zip(keys, column.values, strict=True)))


def column_keys(
    table: TableInfo, family: str, qualifier: bytes, rows: Sequence[bytes]
) -> list[bytes] | None:
    """The keys of the cells ``family:qualifier`` of ``rows``, made at C speed, when each
    is stored a key of its own (not in a packed entry), no row is empty and every key fits
    (keys.cell_key's rule); else None: the general path, which raises what it must."""
    table.check_family(family)
    if table.packs(family, qualifier) or b"" in rows:
        return None
    if not rows:
        return []
    keys = list(cell_prefixes(rows, family, qualifier))
    return keys if max(map(len, keys)) < KEY_LIMIT else None


def _put_all_absent(txn: Txn, table: TableInfo, keys: list[bytes], values: Sequence[bytes]) -> bool:
    """Put every value under its key if none of the keys exists (one ``getmulti``, one
    ``putmulti``: LMDB has one writer, nothing comes between); False, nothing done, when
    one does."""
    cursor = txn.cursor(db=table.db)
    if any(True for _ in cursor.getmulti(keys)):
        return False
    cursor.putmulti(list(zip(keys, values, strict=True)))
    return True


def _absent_cell_keys(table: TableInfo, checks: Sequence[CheckAndPut]) -> list[bytes] | None:
    """The keys of ``checks`` when every one checks that a cell of one family and
    qualifier (stored a cell a key) is absent, each key fitting; else None."""
    if len(checks) < 2:
        return None
    first = checks[0]
    family, qualifier = first.family, first.qualifier
    if (
        set(map(_expected, checks)) != {None}
        or set(map(_family, checks)) != {family}
        or set(map(_qualifier, checks)) != {qualifier}
    ):
        return None
    return column_keys(table, family, qualifier, list(map(_row, map(_put, checks))))


_expected = attrgetter("expected")
_put = attrgetter("put")


def append(
    txn: Txn, table: TableInfo, row: bytes, family: str, qualifier: bytes, value: bytes
) -> None:
    current = read_cell(txn, table, row, family, qualifier) or b""
    write_cell(txn, table, Put(row, family, qualifier, current + value))


def convert_to_packed(txn: Txn, table: TableInfo) -> None:
    """Move what belongs in the packed database there: compacted cells stored one key each
    (format 1) and packed rows stored among the plain cells (format 2)."""
    moved: dict[tuple[bytes, str], dict[bytes, bytes]] = {}
    rows: list[tuple[bytes, bytes]] = []
    stale: list[bytes] = []
    cursor = txn.cursor(db=table.db)
    for key, value in cursor:
        row, family_at = split_row(key)
        family_end = key.find(b"\x00", family_at)
        if family_end < 0:  # a packed row
            stale.append(key)
            rows.append((key, value))
            continue
        family = table.names.get(key[family_at:family_end])
        if family != PACKED_FAMILY:
            continue
        pairs = decode_bucket(value) if is_bucket(key) else [(key[family_end + 1 :], value)]
        if any(table.packs(family, q) for q, _ in pairs):
            stale.append(key)
            moved.setdefault((row, family), {}).update(pairs)
    for key in stale:
        txn.delete(key, db=table.db)
    for key, value in rows:
        txn.put(key, value, db=_packed_db(table))
    for (row, family), found in moved.items():
        for qualifier, value in found.items():
            write_cell(txn, table, Put(row, family, qualifier, value))


# -- read-transaction operations --------------------------------------------------------------


class Entries:
    """A table's two databases read as one key order: plain cells and packed rows merged
    (the packed key of a row and family sorts right after that family's plain keys).
    ``set_range`` positions both; ``iternext`` yields (key, value) from there."""

    __slots__ = ("_plain", "_packed", "_plain_at", "_packed_at")

    def __init__(self, txn: Txn, table: TableInfo) -> None:
        self._plain = txn.cursor(db=table.db)
        self._packed = txn.cursor(db=table.packed) if table.packed is not None else None
        self._plain_at = self._packed_at = False

    def set_range(self, key: bytes) -> bool:
        self._plain_at = self._plain.set_range(key)
        self._packed_at = self._packed is not None and self._packed.set_range(key)
        return self._plain_at or self._packed_at

    def iternext(self) -> Iterator[tuple[bytes, bytes]]:
        if not self._packed_at:
            return self._plain.iternext() if self._plain_at else iter(())
        assert self._packed is not None
        if not self._plain_at:
            return self._packed.iternext()
        return _merge(self._plain.iternext(), self._packed.iternext())


def _merge(
    plain: Iterator[tuple[bytes, bytes]], rows: Iterator[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes]]:
    a = next(plain, None)
    b = next(rows, None)
    while a is not None and b is not None:
        if a[0] < b[0]:
            yield a
            a = next(plain, None)
        else:
            yield b
            b = next(rows, None)
    if a is not None:
        yield a
        yield from plain
    if b is not None:
        yield b
        yield from rows


#: packed entries met while reading rows: (index of the row in the result, [(position among
#: the row's plain cells, family, stored value)])
Deferred: TypeAlias = list[tuple[int, list[tuple[int, str, bytes]]]]


def read_rows(
    txn: Txn, table: TableInfo, rows: Sequence[bytes], families: Collection[str]
) -> list[Row]:
    """The rows among ``rows`` that have cells (in ``families`` when not empty), in order."""
    names = table.names
    found: list[Row] = []
    deferred: Deferred = []
    cursor = Entries(txn, table)
    for row in rows:
        prefix = row_start(row)
        if not cursor.set_range(prefix):
            continue
        cells: list[Cell] = []
        entries: list[tuple[int, str, bytes]] = []
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                break
            _add_cells(cells, entries, key, len(prefix), value, names, families)
        if entries:
            deferred.append((len(found), entries))
        if cells or entries:
            found.append(Row(row, tuple(cells)))
    _unpack_deferred(found, deferred)
    return found


def read_column(
    txn: Txn, table: TableInfo, family: str, qualifier: bytes, rows: Sequence[bytes]
) -> list[bytes | None]:
    """:meth:`Storage.get_column`: one ``getmulti`` of keys made from the rows at C speed
    when each cell is stored a key of its own (a batch of names' forward UID rows, most of
    them absent in a burst of new names: no Python step per row); else :func:`read_rows`."""
    keys = column_keys(table, family, qualifier, rows)
    if keys is None:
        return column_values(read_rows(txn, table, rows, (family,)), family, qualifier, rows)
    values = dict(txn.cursor(db=table.db).getmulti(keys))
    return list(map(values.get, keys))


def _unpack_deferred(rows: list[Row], deferred: Deferred) -> None:
    """Put the cells of the packed entries met into their rows (decoded all at once)."""
    if not deferred:
        return
    decoded = iter(packed.unpack_many([value for _, entries in deferred for *_, value in entries]))
    for index, entries in deferred:
        if len(entries) == 1 and not rows[index].cells:  # the common row: compacted only
            family = entries[0][1]
            found = tuple([_new_cell(Cell, (family, q, v)) for q, v in next(decoded)])
            rows[index] = Row(rows[index].key, found)
            continue
        cells = list(rows[index].cells)
        families = {cell.family for cell in cells}
        mixed = False
        inserts = [(position, family, next(decoded)) for position, family, _ in entries]
        for position, family, pairs in reversed(inserts):
            mixed = mixed or family in families
            cells[position:position] = [_new_cell(Cell, (family, q, v)) for q, v in pairs]
        if mixed:  # plain and packed cells of one family: back to qualifier order
            cells.sort(key=_cell_order)
        rows[index] = Row(rows[index].key, tuple(cells))


def _cell_order(cell: Cell) -> tuple[str, bytes]:
    return cell.family, cell.qualifier


@dataclass(slots=True)
class ScanCursor:
    """Where a scan resumes: the next key to read, the end bound and the rows still allowed."""

    next_key: bytes | None
    stop_key: bytes | None
    remaining: int | None
    #: cells read into the current batch
    batch_cells: int = 0


def scan_batch(
    txn: Txn,
    table: TableInfo,
    position: ScanCursor,
    families: Collection[str],
    row_filter: RowFilter | None,
    max_rows: int,
) -> list[Row]:
    """Read up to ``max_rows`` whole rows from ``position`` and advance it.

    A batch also ends at the first row boundary past :data:`MAX_BATCH_CELLS`
    cells, bounding its memory whatever the row sizes. ``position.next_key``
    becomes None at the end. Rows the filter rejects are skipped with one seek
    past their last cell rather than read.
    """
    names = table.names
    rows: list[Row] = []
    deferred: Deferred = []
    if position.remaining is not None:
        max_rows = min(max_rows, position.remaining)
    cursor = Entries(txn, table)
    seek = position.next_key
    position.next_key = None
    position.batch_cells = 0
    while seek is not None:
        if not cursor.set_range(seek):
            break
        seek = _read_rows_from(
            cursor, position, names, families, row_filter, rows, deferred, max_rows
        )
    _unpack_deferred(rows, deferred)
    if position.remaining is not None:
        position.remaining -= len(rows)
        if position.remaining <= 0:
            position.next_key = None
    return rows


def _read_rows_from(
    cursor: Entries,
    position: ScanCursor,
    names: dict[bytes, str],
    families: Collection[str],
    row_filter: RowFilter | None,
    rows: list[Row],
    deferred: Deferred,
    max_rows: int,
) -> bytes | None:
    """Append rows from the cursor's position; the key to seek to next, or None when done.

    Sets ``position.next_key`` when it stops at a row boundary with rows still to read.
    This is the scan's inner loop, so consecutive cells of one row and family take a
    fast path: one ``startswith`` and a slice per cell. Packed entries are noted in
    ``deferred`` and decoded by the caller, all at once.
    """
    prefix = b""  # the current row's smallest key: escaped row + 00 00
    row = b""
    cells: list[Cell] = []
    entries: list[tuple[int, str, bytes]] = []
    stop = position.stop_key
    family_prefix = b""  # prefix + family + 00 of the current cells
    family = ""
    wanted = True
    qualifier_at = 0
    for key, value in cursor.iternext():
        if family_prefix and key.startswith(family_prefix) and len(key) < KEY_LIMIT:
            if wanted:
                cells.append(_new_cell(Cell, (family, key[qualifier_at:], value)))
            continue
        if not prefix or not key.startswith(prefix):
            if cells or entries:
                if entries:
                    deferred.append((len(rows), entries))
                    position.batch_cells += len(entries)
                    entries = []
                rows.append(Row(row, tuple(cells)))
                position.batch_cells += len(cells)
                cells = []
            if stop is not None and key >= stop:
                return None
            row, family_at = split_row(key)
            prefix = key[:family_at]
            if len(rows) >= max_rows or position.batch_cells >= MAX_BATCH_CELLS:
                position.next_key = prefix
                return None
            if row_filter is not None and not row_filter.matches(row):
                return row_after(row)
        family_end = key.find(b"\x00", len(prefix))
        if family_end < 0:  # a packed entry: escaped row 00 00 family 01
            family_prefix = b""
            name = names.get(key[len(prefix) : -1])
            if name is None or key[-1] != 1:
                raise StorageError(f"corrupt embedded key (unknown family): {key[:64]!r}")
            if not families or name in families:
                entries.append((len(cells), name, value))
            continue
        name = names.get(key[len(prefix) : family_end])
        if name is None:
            raise StorageError(f"corrupt embedded key (unknown family): {key[:64]!r}")
        family = name
        qualifier_at = family_end + 1
        family_prefix = key[:qualifier_at]
        wanted = not families or family in families
        if not wanted:
            continue
        if is_bucket(key):
            cells.extend(Cell(family, q, v) for q, v in decode_bucket(value))
        else:
            cells.append(_new_cell(Cell, (family, key[qualifier_at:], value)))
    if cells or entries:
        if entries:
            deferred.append((len(rows), entries))
        rows.append(Row(row, tuple(cells)))
    return None


def _add_cells(
    cells: list[Cell],
    entries: list[tuple[int, str, bytes]],
    key: bytes,
    family_at: int,
    value: bytes,
    names: dict[bytes, str],
    families: Collection[str],
) -> None:
    family_end = key.find(b"\x00", family_at)
    packed_entry = family_end < 0
    family = names.get(key[family_at:-1] if packed_entry else key[family_at:family_end])
    if family is None or (packed_entry and key[-1] != 1):
        raise StorageError(f"corrupt embedded key (unknown family): {key[:64]!r}")
    if families and family not in families:
        return
    if packed_entry:
        entries.append((len(cells), family, value))
    elif is_bucket(key):
        cells.extend(Cell(family, q, v) for q, v in decode_bucket(value))
    else:
        cells.append(_new_cell(Cell, (family, key[family_end + 1 :], value)))
