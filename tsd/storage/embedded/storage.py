"""EmbeddedStorage: the Storage interface over LMDB, for a single-node tsd.

Why LMDB: ``python -m bench.embedded_choice`` on this machine (2 shared cores,
virtio disk; several runs while other work ran, so ranges): 1,000,000 inserts of
16-byte keys committed durably (fsync) in batches of 10,000, then a
100,000-key range scan::

                         sorted batch   random batch   series-shaped   scan 100k
    LMDB (py-lmdb)       4.2-7.0 s      4.6-5.6 s      1.3-1.8 s       18-33 ms
    RocksDB (rocksdict)  1.5-2.1 s      2.3-2.8 s      0.7 s           25-43 ms
    SQLite (WAL, FULL)   8.0-12.7 s     13.1-18.7 s    6.6-12.8 s      55-83 ms

("series-shaped": 1,000 series, each batch the next timestamps of every series,
as tsd's writer produces. The issue measured LMDB 0.38/4.7 s, RocksDB
0.29/2.4 s, SQLite 2.2/9.6 s and scans of 18-22/31-45/49-61 ms elsewhere.)
RocksDB writes 2-3x faster here, but LMDB scans as fast or up to 1.8x faster
and reads are what queries wait on; LMDB's 150,000-800,000 durable cells/s is
above what the Python write path feeds it; a committed LMDB transaction needs
no recovery step after a crash; other processes can read a live store (``tsdb
dump``) through LMDB's reader table; and LMDB's single writer makes increment
and check-and-put atomic without locks of our own. py-lmdb was already a
dependency; RocksDB's bindings would add a large native wheel and background
compaction threads.

Layout: the store is one LMDB environment in ``path`` (``data.mdb``,
``lock.mdb``) plus ``tsd.lock``, an flock held by the one exclusive opener (the daemon).
Other processes may write beside it (``exclusive=False``: the tools): LMDB serialises write
transactions across processes through ``lock.mdb``, so increment and check-and-put stay
atomic; two daemons on one store are refused.
The named database ``catalog`` maps each table name to its families (JSON);
each table is the named database ``table:<name>``; cell keys are described in
:mod:`tsd.storage.embedded.keys`.

Threads: blocking LMDB work never runs on the event loop. Writes go through the
single writer thread (:mod:`tsd.storage.embedded.commit_thread`, group commit); reads
and scan batches run on a small reader pool, each in its own short read
transaction. A scan is therefore consistent per batch of rows, not across
batches (as with an HBase scanner). Durability: ``sync`` and ``metasync`` on,
no ``writemap``, so a write that has returned survives a crash.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import errno
import fcntl
import functools
import json
import os
import re
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import lmdb

from tsd.cores import usable_cores
from tsd.errors import (
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    TableNotFound,
)
from tsd.storage.base import (
    Block,
    BlockWork,
    CellBlock,
    CellColumn,
    CheckAndPut,
    FamilySpec,
    Mutation,
    Put,
    ReadStats,
    Row,
    RowFilter,
    ScanSpec,
    Storage,
    check_distinct_cells,
    joined_blocks,
    prepared,
)
from tsd.storage.embedded import cells, maintenance
from tsd.storage.embedded.blocks import PackedRun, rows_block, scan_block
from tsd.storage.embedded.cells import ScanCursor, TableInfo, Txn
from tsd.storage.embedded.commit_thread import WriterThread
from tsd.storage.embedded.keys import KEY_LIMIT, PACKED_FAMILY, cell_tail, row_start
from tsd.storage.embedded.maintenance import LOCK_FILE, BadEntry

T = TypeVar("T")
B = TypeVar("B", bound=Sized)

#: Virtual address space reserved for the map; the file grows only as data is written. 1 TiB is
#: far below the 128 TiB of user address space on 64-bit Linux, so no resizing is ever needed.
DEFAULT_MAP_SIZE = 1 << 40
#: Tables at most (LMDB named databases: the catalog plus two per table).
MAX_TABLES = 255
#: Threads running read transactions; LMDB readers never block each other or the writer.
READER_THREADS = 4
#: Blocks of a bulk read (scan_blocks) read per reader-thread call: each call is a thread
#: hop (submit, wake-up, loop callback), a sizeable part of a query reading thousands of
#: compacted rows; the blocks keep the spec's batch size.
BLOCKS_PER_READ = 4
#: ... unless they hold this many values already: the query decodes a block while the
#: next is read, so a hop of big blocks makes it wait (a written-out day of 1,000 series at
#: 10 s, 368,000 points a block: summed at 1m 63-67 -> 58 ms, its rate 73 -> 65 ms).
HOP_VALUES = 200_000
#: Rows the first hop of :meth:`EmbeddedStorage.scan_ranges` reads on the event loop
#: itself: a query of a few series (a day of one series is 24 rows, three of 10,000 over
#: two hours 6) then costs no reader-thread hop, which on a busy machine costs 0.3 ms to
#: milliseconds, against some microseconds a row read from the memory map; a bigger read
#: goes on in reader threads after them.
INLINE_ROWS = 64
#: 3: compacted data cells live in packed rows, in a database of their own per table
#: (keys.py, packed.py); a store of an earlier format is converted when a writer opens it
FORMAT = b"tsd-embedded 3"
_CONVERTED = (b"tsd-embedded 1", b"tsd-embedded 2")
_FORMAT_KEY = b"\x00format"
_CATALOG = b"catalog"
_TABLE_PREFIX = b"table:"
#: the named database of a table's packed rows (keys.py)
_PACKED_PREFIX = b"packed:"
_LOCK_FILE = LOCK_FILE
#: pauses between attempts to take the store's lock (about 0.3 s in all)
LOCK_RETRY_PAUSES_S = (0.01, 0.03, 0.1, 0.15)
# HBase's table-name characters (namespace:qualifier) and family-name rules, kept strict
# so the same names work on both backends.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
_FAMILY_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")


#: py-lmdb raises DiskError for ENOSPC and ReadonlyError for EACCES; other errno values come
#: as a plain lmdb.Error whose text is strerror's, so those two are told by their text.
_QUOTA_TEXT = os.strerror(errno.EDQUOT)
_READ_ONLY_FS_TEXT = os.strerror(errno.EROFS)


def map_lmdb_error(exc: BaseException) -> BaseException:
    """The tsd error for an LMDB exception; other exceptions unchanged. A full disk or map
    is :class:`StorageFull`, a filesystem gone read-only :class:`StorageReadOnly`."""
    if isinstance(exc, lmdb.MapFullError):
        return StorageFull("embedded store full: the LMDB map size is reached")
    if isinstance(exc, lmdb.DiskError) or (isinstance(exc, lmdb.Error) and _QUOTA_TEXT in str(exc)):
        return StorageFull(f"embedded store full: no space left on its disk ({exc})")
    if isinstance(exc, lmdb.ReadonlyError):
        return StorageReadOnly(f"embedded store not writable ({exc})")
    if isinstance(exc, lmdb.Error) and _READ_ONLY_FS_TEXT in str(exc):
        return StorageReadOnly(f"embedded store on a read-only filesystem ({exc})")
    if isinstance(exc, lmdb.Error):
        return StorageError(f"embedded store error: {exc}")
    return exc


@contextlib.contextmanager
def _lmdb_errors() -> Iterator[None]:
    try:
        yield
    except lmdb.Error as exc:
        raise map_lmdb_error(exc) from exc


class EmbeddedStorage(Storage):
    """An LMDB store in directory ``path`` (created if missing unless ``read_only``).

    ``read_only`` opens a store that another process (a running daemon) may hold
    open for writing; writes then raise StorageError. ``exclusive`` (a writer's default)
    takes the store's flock, which one process at a time may hold; a writer opened with
    ``exclusive=False`` shares the store with that holder. Opening is quick and
    synchronous (an mmap and one catalog read), so it happens in the constructor.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        map_size: int = 0,
        exclusive: bool = True,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.exclusive = exclusive and not read_only
        self._closed = False
        self._lock_file: IO[bytes] | None = None
        self._refresh_lock = threading.Lock()
        self._env = self._open_env(map_size or DEFAULT_MAP_SIZE)
        try:
            with _lmdb_errors():
                self._env.reader_check()  # frees reader slots of dead processes
                self._catalog = self._open_catalog()
                self._tables = self._load_tables()
        except BaseException:
            self._release()
            raise
        self._readers = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="tsd-lmdb-read")
        #: reads of a sub-query at once: one per core (:meth:`parallel_reads`)
        self._parallel_reads = max(1, min(READER_THREADS, usable_cores()))
        self._writer = None if read_only else WriterThread(self._env, map_lmdb_error)

    def max_row_length(self, family: str) -> int:
        # A cell key is the row, its end, the family and its end (keys.py), at most
        # LMDB's KEY_LIMIT: 506 bytes for the UID table's forward rows (family "id").
        return KEY_LIMIT - len(cell_tail(family))

    # -- opening ------------------------------------------------------------------------------

    def _open_env(self, map_size: int) -> lmdb.Environment:
        if self.read_only:
            if not (self.path / "data.mdb").is_file():
                raise StorageUnavailable(f"no embedded store in {str(self.path)!r}")
        else:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageUnavailable(f"cannot create {str(self.path)!r}: {exc}") from exc
            if self.exclusive:
                self._lock_file = self._take_lock()
        try:
            return lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=2 * MAX_TABLES + 1,
                readonly=self.read_only,
                create=not self.read_only,
                lock=True,
                sync=True,
                metasync=True,
                writemap=False,
            )
        except lmdb.Error as exc:
            self._release()
            raise StorageUnavailable(
                f"cannot open embedded store {str(self.path)!r}: {exc}"
            ) from exc

    def _take_lock(self) -> IO[bytes]:
        lock_file = open(self.path / _LOCK_FILE, "ab")  # noqa: SIM115 - held until close
        # A tool looking whether a daemon runs (maintenance.held_by_daemon) holds the lock
        # shared for a few microseconds: tried again for a moment before refusing.
        for pause in (*LOCK_RETRY_PAUSES_S, None):
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return lock_file
            except OSError:
                if pause is not None:
                    time.sleep(pause)
        lock_file.close()
        raise StorageUnavailable(
            f"embedded store {str(self.path)!r} is open for writing by another process"
        )

    def _open_catalog(self) -> lmdb._Database:
        if self.read_only:
            try:
                return self._env.open_db(_CATALOG, create=False)
            except lmdb.NotFoundError:
                raise StorageUnavailable(f"not a tsd store: {str(self.path)!r}") from None
        catalog = self._env.open_db(_CATALOG, create=True)
        with self._env.begin(write=True, db=catalog) as txn:
            found = txn.get(_FORMAT_KEY)
            if found is None:
                txn.put(_FORMAT_KEY, FORMAT)
            elif found in _CONVERTED:
                for key, value in list(txn.cursor()):
                    if key != _FORMAT_KEY:
                        info = self._open_table(key.decode("ascii"), value, txn, create=True)
                        cells.convert_to_packed(txn, info)
                txn.put(_FORMAT_KEY, FORMAT)
            elif found != FORMAT:
                raise StorageUnavailable(f"unsupported embedded store format {found!r}")
        return catalog

    def _open_table(
        self, name: str, families: bytes, txn: Txn | None = None, create: bool = False
    ) -> TableInfo:
        """A table's two databases (plain cells, packed rows); the packed one is None in a
        format-1 store opened read-only (it has none)."""
        key = name.encode("ascii")
        db = self._env.open_db(_TABLE_PREFIX + key, txn=txn, create=create)
        try:
            packed_db = self._env.open_db(_PACKED_PREFIX + key, txn=txn, create=create)
        except lmdb.NotFoundError:
            packed_db = None
        return TableInfo(name, db, _decode_families(families), packed_db)

    def _load_tables(self) -> dict[str, TableInfo]:
        with self._env.begin(db=self._catalog) as txn:
            entries = [(k, v) for k, v in txn.cursor() if k != _FORMAT_KEY]
        return {
            key.decode("ascii"): self._open_table(key.decode("ascii"), value)
            for key, value in entries
        }

    # -- plumbing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailable("embedded store is closed")

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(txn, *args)`` in a read transaction on a reader thread."""
        self._check_open()
        call = functools.partial(self._in_read_txn, fn, *args)
        try:
            future = asyncio.get_running_loop().run_in_executor(self._readers, call)
        except RuntimeError:  # the pool is shut down: closed meanwhile
            raise StorageUnavailable("embedded store is closed") from None
        return await future

    def _in_read_txn(self, fn: Callable[..., T], *args: Any) -> T:
        with _lmdb_errors(), self._env.begin() as txn:
            return fn(txn, *args)

    async def _write(self, fn: Callable[[Txn], T], cells_count: int = 1, solo: bool = False) -> T:
        self._check_open()
        if self._writer is None:
            raise StorageError("embedded store opened read-only")
        result: T = await self._writer.submit(fn, cells_count, solo)
        return result

    async def _table(self, name: str) -> TableInfo:
        self._check_open()
        info = self._tables.get(name)
        if info is None:  # another process sharing the store may have created it
            await self._read(self._refresh_tables)
            info = self._tables.get(name)
        if info is None:
            raise TableNotFound(name)
        return info

    def _refresh_tables(self, _txn: Txn) -> None:
        # Another process (the daemon, a tool beside it) may have created tables since.
        with self._refresh_lock:
            self._tables = self._load_tables()

    # -- tables -------------------------------------------------------------------------------

    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        if not _TABLE_NAME.fullmatch(table):
            raise StorageError(f"illegal table name: {table!r}")
        if not families:
            raise StorageError(f"table {table!r} needs at least one column family")
        for spec in families:
            if not _FAMILY_NAME.fullmatch(spec.name):
                raise StorageError(f"illegal column family name: {spec.name!r}")
        if table in self._tables:
            self._check_open()
            return False
        fn = functools.partial(self._create_in_txn, table, tuple(families))
        created, info = await self._write(fn, solo=True)
        self._tables[table] = info
        return created

    def _create_in_txn(
        self, table: str, families: tuple[FamilySpec, ...], txn: Txn
    ) -> tuple[bool, TableInfo]:
        key = table.encode("ascii")
        stored = txn.get(key, db=self._catalog)
        if stored is not None:  # created by a create_table queued just before this one
            return False, self._open_table(table, stored, txn)
        encoded = _encode_families(families)
        txn.put(key, encoded, db=self._catalog)
        return True, self._open_table(table, encoded, txn, create=True)

    async def list_tables(self) -> list[str]:
        await self._read(self._refresh_tables)
        self._check_open()
        return sorted(self._tables)

    # -- writes -------------------------------------------------------------------------------

    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        info = await self._table(table)
        if not mutations:
            return
        frozen = tuple(mutations)  # the caller may reuse its list while we wait
        await self._write(lambda txn: cells.apply_mutations(txn, info, frozen), len(frozen))

    async def increment(
        self, table: str, row: bytes, family: str, qualifier: bytes, amount: int = 1
    ) -> int:
        info = await self._table(table)
        return await self._write(
            lambda txn: cells.increment(txn, info, row, family, qualifier, amount)
        )

    async def check_and_put(
        self,
        table: str,
        row: bytes,
        family: str,
        qualifier: bytes,
        expected: bytes | None,
        put: Put,
    ) -> bool:
        info = await self._table(table)
        if put.row != row:
            raise StorageError("check_and_put: the put must be on the checked row")
        return await self._write(
            lambda txn: cells.check_and_put(txn, info, row, family, qualifier, expected, put)
        )

    async def check_and_put_many(self, table: str, checks: Sequence[CheckAndPut]) -> list[bool]:
        """Every check in one write transaction (one commit), in order."""
        info = await self._table(table)
        frozen = tuple(checks)
        check_distinct_cells(frozen)
        if not frozen:
            return []

        return await self._write(
            functools.partial(cells.check_and_put_many, table=info, checks=frozen), len(frozen)
        )

    async def put_if_absent_column(self, table: str, column: CellColumn) -> list[bool]:
        """One write transaction, the cells' keys made from the rows (cells.py)."""
        info = await self._table(table)
        column = column._replace(rows=tuple(column.rows), values=tuple(column.values))
        column.check_distinct()  # (the caller may reuse its lists meanwhile: copied)
        if not column.rows:
            return []
        return await self._write(
            functools.partial(cells.put_if_absent_column, table=info, column=column),
            len(column.rows),
        )

    async def put_column(self, table: str, column: CellColumn) -> None:
        info = await self._table(table)
        if not column.rows:
            return
        column = column._replace(rows=tuple(column.rows), values=tuple(column.values))
        await self._write(
            functools.partial(cells.put_column, table=info, column=column), len(column.rows)
        )

    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        info = await self._table(table)
        await self._write(lambda txn: cells.append(txn, info, row, family, qualifier, value))

    # -- reads --------------------------------------------------------------------------------

    async def get(self, table: str, row: bytes, families: Sequence[str] = ()) -> Row | None:
        found = await self.get_many(table, [row], families)
        return found[0] if found else None

    async def get_many(
        self, table: str, rows: Sequence[bytes], families: Sequence[str] = ()
    ) -> list[Row]:
        info = await self._table(table)
        wanted = _check_families(info, families)
        return await self._read(cells.read_rows, info, tuple(rows), wanted)

    async def get_column(
        self, table: str, family: str, qualifier: bytes, rows: Sequence[bytes]
    ) -> list[bytes | None]:
        info = await self._table(table)
        _check_families(info, (family,))
        return await self._read(cells.read_column, info, family, qualifier, tuple(rows))

    async def get_blocks(
        self,
        table: str,
        rows: Sequence[bytes],
        families: Sequence[str] = (),
        stats: ReadStats | None = None,
    ) -> CellBlock:
        info = await self._table(table)
        wanted = _check_families(info, families)
        block = await self._read(rows_block, info, tuple(rows), wanted)
        if stats is not None:
            stats.add(block, 0.0)
        return block

    async def scan(self, table: str, spec: ScanSpec) -> AsyncGenerator[Row, None]:
        async with contextlib.aclosing(self._batches(cells.scan_batch, table, spec)) as batches:
            async for rows in batches:
                for row in rows:
                    yield row

    async def scan_blocks(
        self,
        table: str,
        spec: ScanSpec,
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        """:meth:`scan`'s rows, a batch at a time, read straight into CellBlocks, or for
        packed rows into PointBlocks (blocks.py: no Row or Cell objects on the query path);
        ``work`` done on each in the reader thread that read it (both cores then decode a
        query's time slices side by side, with no hop of their own)."""
        batches = self._batches(scan_block, table, spec, BLOCKS_PER_READ, work)
        async with contextlib.aclosing(batches) as blocks:
            async for block in blocks:
                if stats is not None:
                    stats.add(block, 0.0)
                yield block

    def parallel_reads(self) -> int:
        """A read of the embedded store is CPU work (decoding the mapped pages): more
        slices than cores only trade the GIL back and forth (py-lmdb drops it at every
        entry), so one per core, at most ``READER_THREADS``. On two cores, a written-out
        day of 1,000 series summed at 1m took 66-74 ms with four, 61 ms with two."""
        return self._parallel_reads

    def reads_ranges_at_once(self) -> bool:
        return True

    async def holds_rows(self, table: str, start: bytes, stop: bytes) -> bool:
        """One seek per database of the table, on the event loop (as a small read's first
        hop): a fresh query's rows all in the head skip the read path's dozen steps."""
        info = await self._table(table)
        self._check_open()
        stop_key = row_start(stop) if stop else None
        return self._in_read_txn(_holds_rows, info, row_start(start), stop_key)

    async def scan_ranges(
        self,
        table: str,
        specs: Sequence[ScanSpec],
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        """Every range read in turn within one read transaction per hop, up to a hop's
        rows (``BLOCKS_PER_READ`` batches of the first spec's ``batch_rows``): a filter of
        a few series over a day reads two dozen small ranges in one hop, not one each. The
        first hop, of at most ``INLINE_ROWS`` rows, reads on the event loop itself.
        ``work`` as :meth:`scan_blocks` does it, in the hop that read the block."""
        info = await self._table(table)
        todo: collections.deque[tuple[ScanCursor, frozenset[str], RowFilter | None, int]]
        todo = collections.deque()
        for spec in specs:
            wanted = _check_families(info, spec.families)
            if (position := _cursor(spec)) is not None:
                todo.append((position, wanted, spec.row_filter, max(1, spec.batch_rows)))
        if not todo:
            return
        budget = BLOCKS_PER_READ * todo[0][3]
        self._check_open()
        # the first hop on the event loop, a few rows (see INLINE_ROWS), the rest in hops
        blocks = self._in_read_txn(_ranges_hop, info, todo, INLINE_ROWS, work, INLINE_ROWS)
        while True:
            for block in blocks:
                if stats is not None:
                    stats.add(block, 0.0)
                yield block
            if not todo:
                return
            blocks = await self._read(_ranges_hop, info, todo, budget, work)

    async def _batches(
        self,
        read: Callable[..., B],
        table: str,
        spec: ScanSpec,
        per_read: int = 1,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[B, None]:
        """The non-empty batches of ``read`` (scan_batch or scan_block) over ``spec``,
        ``per_read`` batches per read transaction (one reader-thread hop), ``work`` done on
        each (blocks only) in that hop."""
        info = await self._table(table)
        wanted = _check_families(info, spec.families)
        position = _cursor(spec)
        if position is None:
            return
        batch_rows = max(1, spec.batch_rows)
        while position.next_key is not None:
            batches = await self._read(
                _several, read, per_read, work, info, position, wanted, spec.row_filter, batch_rows
            )
            for batch in batches:
                if len(batch):
                    yield batch

    # -- upkeep (maintenance.py) -------------------------------------------------------------

    async def delete_range(self, table: str, start: bytes, stop: bytes) -> int:
        """Every entry of the rows in ``[start, stop)`` in one write transaction (one pass of
        a cursor); the entries deleted. The freed pages are reused by later writes."""
        info = await self._table(table)
        return await self._write(
            lambda txn: maintenance.delete_range(txn, info, start, stop), solo=True
        )

    async def table_bytes(self) -> dict[str, int]:
        """Bytes of the pages each table uses, by name (``maintenance.table_bytes`` of this
        open store: LMDB refuses a second open of it in one process)."""
        return await self._read(functools.partial(maintenance.txn_table_bytes, self._env))

    async def check_store(self, repair: bool = False) -> list[tuple[str, BadEntry]]:
        """Every entry of every table whose bytes do not decode; with ``repair``, deleted."""
        found: list[tuple[str, BadEntry]] = []
        for name in await self.list_tables():
            info = self._tables[name]
            start: bytes | None = b""
            while start is not None:
                bad, _, start = await self._read(
                    maintenance.check_entries, info, start, maintenance.CHECK_BATCH
                )
                found += [(name, entry) for entry in bad]
                if repair and bad:
                    delete = functools.partial(
                        maintenance.delete_keys, table=info, keys=[entry.key for entry in bad]
                    )
                    await self._write(delete)
        return found

    # -- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        if self._writer is not None:
            self._writer.stop()  # queued writes finish first
        self._readers.shutdown(wait=True)
        self._release()

    def _release(self) -> None:
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None


def _several(
    txn: Txn,
    read: Callable[..., B],
    count: int,
    work: BlockWork | None,
    info: TableInfo,
    position: ScanCursor,
    *args: Any,
) -> list[B]:
    """Up to ``count`` batches of ``read`` in one transaction, while the scan has rows
    left and they hold fewer than ``HOP_VALUES`` values (``args``: the families, row filter
    and batch size ``read`` takes); ``work`` done on each (only blocks get one)."""
    batches = [read(txn, info, position, *args)]
    held = 0
    while len(batches) < count and position.next_key is not None:
        held += _values_held(batches[-1])
        if held >= HOP_VALUES:
            break
        batches.append(read(txn, info, position, *args))
    if work is not None:
        return [cast(B, prepared(cast(Block, b), work)) if len(b) else b for b in batches]
    return batches


def _values_held(block: object) -> int:
    """A block's points (a cell block's value bytes): only blocks are read more than one
    batch a hop (scan_blocks)."""
    return len(cast(Block, block).values)


def _holds_rows(txn: Txn, info: TableInfo, seek: bytes, stop: bytes | None) -> bool:
    """Whether an entry of the plain or the packed database lies in ``[seek, stop)``."""
    for db in (info.db, info.packed):
        if db is None:
            continue
        cursor = txn.cursor(db=db)
        if cursor.set_range(seek) and (stop is None or cursor.key() < stop):
            return True
    return False


def _cursor(spec: ScanSpec) -> ScanCursor | None:
    """Where ``spec``'s scan starts (None: a limit of no rows)."""
    if spec.limit is not None and spec.limit <= 0:
        return None
    return ScanCursor(
        next_key=row_start(spec.start),
        stop_key=row_start(spec.stop) if spec.stop else None,
        remaining=spec.limit,
    )


def _ranges_hop(
    txn: Txn,
    info: TableInfo,
    todo: collections.deque[tuple[ScanCursor, frozenset[str], RowFilter | None, int]],
    budget: int,
    work: BlockWork | None,
    most_rows: int | None = None,
) -> list[Block]:
    """:meth:`EmbeddedStorage.scan_ranges`' reads of one hop: ranges from the front of
    ``todo`` (each popped once read to its end) until ``budget`` rows are read or
    ``BLOCKS_PER_READ`` batches ended before their range did (as :func:`_several`), the
    blocks of one kind joined, ``work`` done on each; each batch at most ``most_rows`` rows
    when given."""
    blocks: list[Block] = []
    run = PackedRun(txn, info)  # packed-only batches, in a row, decoded together
    rows = cut = 0
    while todo and rows < budget and cut < BLOCKS_PER_READ:
        position, wanted, row_filter, batch_rows = todo[0]
        if most_rows is not None:
            batch_rows = min(batch_rows, most_rows)
        taken = len(run.rows)
        if (not wanted or PACKED_FAMILY in wanted) and run.take(position, batch_rows, row_filter):
            rows += len(run.rows) - taken
        else:  # scan_block's other path, after the packed batches before it
            if run.rows:
                blocks.append(run.block())
            batch = cells.scan_batch(txn, info, position, wanted, row_filter, batch_rows)
            block = CellBlock.from_rows(batch)
            blocks.append(block)
            rows += len(block)
        if position.next_key is None:
            todo.popleft()
        else:
            cut += 1
    if run.rows:
        blocks.append(run.block())
    return [prepared(block, work) for block in joined_blocks(blocks)]


def _check_families(info: TableInfo, families: Sequence[str]) -> frozenset[str]:
    for family in families:
        info.check_family(family)
    return frozenset(families)


def _encode_families(families: Sequence[FamilySpec]) -> bytes:
    return json.dumps([dataclasses.asdict(spec) for spec in families]).encode()


def _decode_families(stored: bytes) -> tuple[FamilySpec, ...]:
    return tuple(FamilySpec(**spec) for spec in json.loads(stored))
