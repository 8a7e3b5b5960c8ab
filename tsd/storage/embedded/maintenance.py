"""Upkeep of an embedded store's own bytes: check, repair, range deletes, file compaction.

* :func:`check_table` reads every entry of a table and reports the ones whose bytes do not
  decode (a key without a row end or with an unknown family, a bucket or packed value that
  does not parse); :func:`delete_keys` removes them (``tsdb check-store --fix``).
* :func:`delete_range` deletes every entry of the rows in ``[start, stop)`` inside one write
  transaction, walking the range once with a cursor: what retention uses to drop an expired
  hour. LMDB puts the freed pages on its free list and reuses them for later writes, so a
  store under retention stops growing.
* :func:`compact_store` gives space back to the filesystem: LMDB never shrinks its file, so
  after retention has dropped a lot (or after a load whose single cells were compacted away,
  leaving sparse pages) every database is copied entry by entry, in key order, with
  ``MDB_APPEND`` into a new file (full pages: LMDB's own compacting copy keeps each page's
  fill as it is) and the new file swapped in. It needs the store to itself: it takes the
  store's flock and refuses while a daemon holds it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import lmdb

from tsd.errors import StorageError, StorageUnavailable
from tsd.storage.embedded import packed
from tsd.storage.embedded.cells import Entries, TableInfo, Txn
from tsd.storage.embedded.keys import decode_bucket, is_bucket, row_start, split_row

LOCK_FILE = "tsd.lock"
#: entries examined per check batch (one read transaction each)
CHECK_BATCH = 10_000


@dataclass(frozen=True, slots=True)
class BadEntry:
    """One stored entry whose bytes do not decode."""

    key: bytes
    reason: str


def check_entries(
    txn: Txn, table: TableInfo, start: bytes, limit: int
) -> tuple[list[BadEntry], int, bytes | None]:
    """Check up to ``limit`` entries from key ``start``: (bad ones, entries read, next key)."""
    bad: list[BadEntry] = []
    cursor = Entries(txn, table)
    if not cursor.set_range(start):
        return bad, 0, None
    read = 0
    for key, value in cursor.iternext():
        if read >= limit:
            return bad, read, key
        read += 1
        reason = _entry_problem(table, key, value)
        if reason is not None:
            bad.append(BadEntry(key, reason))
    return bad, read, None


def _entry_problem(table: TableInfo, key: bytes, value: bytes) -> str | None:
    try:
        _, family_at = split_row(key)
    except StorageError as exc:
        return str(exc)
    family_end = key.find(b"\x00", family_at)
    if family_end < 0:
        if key[-1:] != b"\x01" or key[family_at:-1] not in table.names:
            return "corrupt embedded key (unknown family)"
        try:
            packed.unpack(value)
        except StorageError as exc:
            return str(exc)
        return None
    if key[family_at:family_end] not in table.names:
        return "corrupt embedded key (unknown family)"
    if is_bucket(key):
        try:
            decode_bucket(value)
        except StorageError as exc:
            return str(exc)
    return None


def delete_keys(txn: Txn, table: TableInfo, keys: list[bytes]) -> int:
    """Delete entries by key, from whichever of the table's databases holds each."""
    deleted = 0
    for key in keys:
        deleted += bool(txn.delete(key, db=table.db))
        if table.packed is not None:
            deleted += bool(txn.delete(key, db=table.packed))
    return deleted


def delete_range(txn: Txn, table: TableInfo, start: bytes, stop: bytes) -> int:
    """Delete every entry of the rows in ``[start, stop)``; the entries deleted."""
    stop_key = row_start(stop) if stop else None
    deleted = 0
    for db in (table.db, table.packed):
        if db is None:
            continue
        cursor = txn.cursor(db=db)
        if not cursor.set_range(row_start(start)):
            continue
        # Cursor.delete moves to the next entry; an exhausted cursor has key b"".
        while True:
            key = cursor.key()
            if not key or (stop_key is not None and key >= stop_key) or not cursor.delete():
                break
            deleted += 1
    return deleted


def store_pages(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(bytes of the pages the store's B-trees use, bytes of the file's pages)."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=1024, subdir=True)
    try:
        psize = env.stat()["psize"]
        used = 0
        with env.begin() as txn:
            names = [key for key, _ in txn.cursor()]
            stats = [env.stat()]
            for name in names:
                try:
                    stats.append(txn.stat(env.open_db(name, txn=txn, create=False)))
                except lmdb.Error:
                    continue  # a plain key of the main database, not a named one
        for stat in stats:
            used += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
        total = env.info()["last_pgno"] + 1
        return (used + 2) * psize, total * psize
    finally:
        env.close()


def held_by_daemon(path: str | os.PathLike[str]) -> bool:
    """True while a process holds the store's lock (``tsd.lock``): a daemon has it open.
    Blocking (a file open and two flocks)."""
    try:
        fd = os.open(Path(path) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing it drops the shared lock taken, if any
    return False


def compact_store(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Rewrite the store's file with its live pages only; (bytes before, bytes after).

    Refused (StorageUnavailable) while a daemon holds the store. Other tools must not have
    the store open meanwhile: the file is replaced under them.
    """
    directory = Path(path)
    data = directory / "data.mdb"
    if not data.is_file():
        raise StorageUnavailable(f"no embedded store in {str(directory)!r}")
    with open(directory / LOCK_FILE, "ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StorageUnavailable(
                f"embedded store {str(directory)!r} is held by a running daemon: stop it "
                "first (compact-store replaces the store's file)"
            ) from None
        before = data.stat().st_size
        scratch = directory / "compact.tmp"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        try:
            _rewrite(directory, scratch)
            copied = scratch / "data.mdb"
            with open(copied, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(copied, data)
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        # The lock file describes the old file's readers and transactions: start afresh.
        (directory / "lock.mdb").unlink(missing_ok=True)
        return before, data.stat().st_size


def _rewrite(source: Path, target: Path) -> None:
    """Copy every database of the store in ``source`` into a new store in ``target``."""
    old = lmdb.open(str(source), readonly=True, max_dbs=1024, lock=False)
    new = lmdb.open(str(target), map_size=1 << 40, max_dbs=1024, sync=False)
    try:
        with old.begin() as read:
            names = [key for key, _ in read.cursor()]
            plain = []
            for name in names:
                try:
                    db = old.open_db(name, txn=read, create=False)
                except lmdb.Error:
                    plain.append(name)  # a plain key of the main database
                    continue
                with new.begin(write=True) as write:
                    copy = new.open_db(name, txn=write, create=True)
                    write.cursor(db=copy).putmulti(read.cursor(db=db).iternext(), append=True)
            with new.begin(write=True) as write:
                for name in plain:
                    value = read.get(name)
                    if value is not None:
                        write.put(name, value)
        new.sync(True)
    finally:
        new.close()
        old.close()
