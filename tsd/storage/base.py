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

import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

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


@dataclass(frozen=True, slots=True)
class Put:
    """Set one cell (creating the row if needed)."""

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


def check_distinct_cells(checks: Sequence[CheckAndPut]) -> None:
    """The precondition of :meth:`Storage.check_and_put_many`."""
    cells = {(c.put.row, c.family, c.qualifier) for c in checks}
    if len(cells) != len(checks):
        raise StorageError("check_and_put_many: two checks on one cell")


class Storage(ABC):
    """An async, HBase-shaped store. See the module docstring for the contract."""

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

    @abstractmethod
    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        """Atomically append ``value`` to the cell's bytes (creating it if missing)."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources; later calls raise StorageUnavailable."""
