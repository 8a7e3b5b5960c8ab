"""WriteAheadLog: segment files under ``<data dir>/wal``, appended with group-committed
syncs, replayed on start, dropped once stored (record bytes: :mod:`tsd.wal.record`).

* Appending. The writer logs each batch while it stores it (:meth:`append`). Records
  wait in a queue; one commit at a time writes every queued record and syncs the
  segment once (``fdatasync``), in a dedicated thread (file I/O never runs on the loop),
  then wakes their appenders: batches in flight together share one sync (group commit).
  An appender that waits for its sync to answer a client (remote write) may ask the commit
  to let the event loop turn a few times first (``gather``), so that requests already
  received reach the queue and share that sync rather than each paying one. Only while
  appenders come together (the last commit held more than one record): a lone client
  would pay the turns for nothing.
* Segments. ``00000001.wal``, ``00000002.wal``, ...; a new one is started once the
  current one passes ``segment_bytes``. Each record's segment is remembered until the
  writer reports the batch stored (:meth:`mark_stored`); a segment that is no longer
  written to and holds no unstored record is deleted. A batch storage never took keeps
  its segment, so the next start replays it.
* Replay (:meth:`segments`, :meth:`read_segment`): every segment left by the last run,
  in order; records are read up to the first torn or corrupt one, where the segment is
  cut (logged as ``wal.tail_cut``, never a crash). The writer stores the cells, then
  :meth:`drop_recovered` deletes those segments; new records go to fresh ones.
* Failures. A write that fails (a full disk) is cut back to the last whole record and
  raises StorageError: the writer still stores the batch, and says so in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tsd.errors import StorageError, StorageFull, StorageReadOnly, StorageUnavailable
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.wal.record import HEADER, SEGMENT_MAGIC, read_records, scan_records

log = get_logger(WRITER)

#: Bytes after which a new segment is started.
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: the least an open segment holds before :meth:`WriteAheadLog.cut` closes it
MIN_CUT_BYTES = 1024 * 1024
SUFFIX = ".wal"
#: held (flock) by the process that owns the log, from start to close
LOCK_FILE = "LOCK"
#: loop turns a commit asked to gather gives before it takes the queue: enough for a
#: request already received to be parsed, taken and appended (its handler task made, then
#: run up to its append), not a timed wait: an idle loop turns in microseconds
GATHER_TURNS = 6


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:08d}{SUFFIX}"


class WriteAheadLog:
    """The log of one data directory: replay what :meth:`segments` lists, then
    ``append``/``mark_stored``."""

    def __init__(
        self,
        directory: Path,
        registry: StatsRegistry,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tsd-wal")
        self._queue: list[tuple[bytes, int, asyncio.Future[int]]] = []
        self._committing: asyncio.Task[None] | None = None
        self._gather = False  # the next commit lets the loop turn first (append's gather)
        self._last_commit = 0  # records the last commit held
        self._next_seq = 0
        self._file: int | None = None  # the open segment's descriptor
        self._number = 0  # the open segment's number
        self._size = 0  # bytes in the open segment
        self._segment_of: dict[int, tuple[int, int]] = {}  # unstored record -> (segment, offset)
        self._unstored: dict[int, int] = {}  # segment -> records not stored yet
        self._recovered: list[Path] = []
        self._cut_asked = False  # cut(): start a new segment at the next append
        self._lock_fd: int | None = None
        self._appended = registry.counter("wal.records", type="appended")
        self._synced_cells = registry.counter("wal.cells", type="synced")
        self._fsyncs = registry.counter("wal.fsyncs")
        self._failures = registry.counter("wal.errors", type="append")
        self._cut = registry.counter("wal.errors", type="tail_cut")
        registry.gauge("wal.segments", lambda: len(self._unstored) + (self._file is not None))

    # -- start --------------------------------------------------------------------------------

    def segments(self) -> list[Path]:
        """The segments the last run left, oldest first (blocking: run it in a thread).
        New records go to segments numbered after them."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # one line, as the embedded store's (tsd.cli prints it)
            raise StorageUnavailable(
                f"cannot create the write-ahead log {str(self.directory)!r}: {exc}"
                " (tsd.storage.data_dir must be writable)"
            ) from exc
        self._take_lock()
        paths = sorted(self.directory.glob("*" + SUFFIX))
        self._recovered = paths
        if paths:
            self._number = max(self._number, int(paths[-1].stem))
        return paths

    def _take_lock(self) -> None:
        """One process per log: a second daemon (or one started with the same
        tsd.storage.data_dir on HBase) would replay and delete the first one's segments."""
        if self._lock_fd is not None:
            return
        try:
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot open the write-ahead log {str(self.directory)!r}: {exc}"
                " (tsd.storage.data_dir must be writable)"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StorageUnavailable(
                f"write-ahead log {str(self.directory)!r} is in use by another process"
                " (each daemon needs its own tsd.storage.data_dir)"
            ) from None
        self._lock_fd = fd

    def read_segment(self, path: Path) -> list[tuple[int, bytes]]:
        """The intact records of one segment, ``(type, payload)`` (blocking: run it in a
        thread); a torn or corrupt tail is cut, with a ``wal.tail_cut`` log line. The
        caller decodes them one at a time (:func:`tsd.wal.record.decode_cells`): decoded
        cells take many times the bytes of the record."""
        data = path.read_bytes()
        scan = scan_records(data)
        if scan.problem is not None:
            self._cut.inc()
            log.warning(
                "wal.tail_cut",
                segment=str(path),
                kept_bytes=scan.good_end,
                dropped_bytes=len(data) - scan.good_end,
                reason=scan.problem,
            )
        return scan.records

    def drop_segment(self, path: Path) -> None:
        """Delete one segment :meth:`segments` listed, its records stored (the HBase spool
        drains them one by one, after the daemon started)."""
        if path in self._recovered:
            self._recovered.remove(path)
        self._executor.submit(path.unlink, missing_ok=True)

    def drop_recovered(self) -> None:
        """Delete the segments :meth:`segments` listed (their cells are stored now)."""
        for path in self._recovered:
            path.unlink(missing_ok=True)
        self._recovered = []

    # -- appending ----------------------------------------------------------------------------

    async def append(self, record: bytes, cells: int, *, gather: bool = False) -> int:
        """Write ``record`` (framed) and fsync it; its sequence number, for
        :meth:`mark_stored`. Raises StorageError when the write or fsync fails.

        ``gather``: the commit that takes the record first lets the event loop turn
        :data:`GATHER_TURNS` times, so appends already on their way share its sync, when
        the last commit held more than one record."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        self._queue.append((record, cells, done))
        self._gather = self._gather or gather
        if self._committing is None:
            self._committing = loop.create_task(self._commit())
        return await done

    def mark_stored(self, seq: int) -> None:
        """The record ``seq`` is in storage: its segment may go once all of it is."""
        where = self._segment_of.pop(seq, None)
        if where is None:
            return
        number = where[0]
        self._unstored[number] -= 1
        if not self._unstored[number] and number != self._number:
            self._drop(number)

    def cut(self) -> None:
        """Start a new segment at the next append once the open one holds
        :data:`MIN_CUT_BYTES` or more: the head calls this when it has written rows out,
        so the records they came from go with their segment instead of waiting for it to
        fill (a small daemon would keep its whole segment size of stored points)."""
        self._cut_asked = True

    def location(self, seq: int) -> tuple[Path, int] | None:
        """The segment and byte offset of record ``seq`` while it is not stored (the
        HBase spool reads it back from there: :func:`read_record_at`); None once stored."""
        where = self._segment_of.get(seq)
        if where is None:
            return None
        return segment_path(self.directory, where[0]), where[1]

    async def close(self) -> None:
        """Finish the commits under way and close the segment (it stays for the next
        start when it holds unstored records; else it is deleted)."""
        while self._committing is not None:
            await asyncio.shield(self._committing)
        if self._file is not None:
            fd, number = self._file, self._number
            self._file = None
            await asyncio.get_running_loop().run_in_executor(self._executor, os.close, fd)
            if not self._unstored.get(number):
                self._drop(number)
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # -- the commit task ----------------------------------------------------------------------

    async def _commit(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                if self._gather and self._last_commit > 1:
                    for _ in range(GATHER_TURNS):
                        await asyncio.sleep(0)
                self._gather = False
                items, self._queue = self._queue, []
                self._last_commit = len(items)
                records = [record for record, _, _ in items]
                try:
                    number, start, closed = await loop.run_in_executor(
                        self._executor, self._write, records
                    )
                except OSError as exc:
                    self._failures.inc()
                    error = _log_error(exc)
                    for _, _, done in items:
                        if not done.done():
                            done.set_exception(error)
                    continue
                self._fsyncs.inc()
                # Bookkeeping stays on the loop (mark_stored runs there too).
                seqs = range(self._next_seq, self._next_seq + len(items))
                self._next_seq += len(items)
                self._unstored[number] = self._unstored.get(number, 0) + len(items)
                offset = start
                for seq, record in zip(seqs, records, strict=True):
                    self._segment_of[seq] = (number, offset)
                    offset += len(record)
                if closed is not None and not self._unstored.get(closed):
                    self._drop(closed)
                for seq, (_, cells, done) in zip(seqs, items, strict=True):
                    self._appended.inc()
                    self._synced_cells.inc(cells)
                    if not done.done():
                        done.set_result(seq)
                    else:  # the appender was cancelled: nobody will report it stored
                        self.mark_stored(seq)
        finally:
            self._committing = None

    def _write(self, records: list[bytes]) -> tuple[int, int, int | None]:
        """In the log's thread: append the records to the open segment (starting a new
        one when it is full), fsync once; the segment's number, the offset of the first
        record, and the number of the segment closed meanwhile (if any)."""
        closed = None
        cut = self._cut_asked and self._size >= MIN_CUT_BYTES
        if self._file is None or self._size >= self._segment_bytes or cut:
            self._cut_asked = False
            closed = self._start_segment()
        fd = self._file
        assert fd is not None
        start = self._size
        data = b"".join(records)
        try:
            _write_all(fd, data)
            # fdatasync: the data and the file's new size, which is what reading the
            # records back needs (the segment's directory entry was synced when it was
            # started); an fsync also writes the inode's times, about twice the CPU and
            # wall time of a commit of a remote write request's record on ext4.
            os.fdatasync(fd)
        except OSError:
            # Cut back to the last whole record, so later records stay readable.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
        self._size = start + len(data)
        return self._number, start, closed

    def _start_segment(self) -> int | None:
        """Open the next segment; the number of the one closed (None at the first)."""
        old, old_number = self._file, self._number
        number = old_number + 1
        self.directory.mkdir(parents=True, exist_ok=True)
        path = segment_path(self.directory, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            _write_all(fd, SEGMENT_MAGIC)
            os.fsync(fd)
            _fsync_directory(self.directory)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._file, self._number, self._size = fd, number, len(SEGMENT_MAGIC)
        if old is None:
            return None
        os.close(old)
        return old_number

    def _drop(self, number: int) -> None:
        """Forget a segment and delete its file (in the log's thread)."""
        self._unstored.pop(number, None)
        self._executor.submit(segment_path(self.directory, number).unlink, missing_ok=True)


def _log_error(exc: OSError) -> StorageError:
    """A failed log write as the error the writer passes on: a full disk (507) or a
    read-only one (503) refuse writes until they return; anything else is an I/O error."""
    message = f"write-ahead log: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(message)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageReadOnly(message)
    return StorageError(message)


def read_record_at(path: Path, offset: int) -> tuple[int, bytes]:
    """The record that starts at ``offset`` of segment ``path``, ``(type, payload)``
    (blocking: run it in a thread). Only a record the log committed may be asked for:
    raises StorageError when it is not there whole or its checksum does not match."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            header = file.read(HEADER.size)
            if len(header) == HEADER.size:
                length = HEADER.unpack(header)[0]
                data = header + file.read(length)
            else:
                data = header
    except OSError as exc:
        raise StorageError(f"write-ahead log: {exc.strerror or exc}") from None
    records, _, problem = read_records(data)
    if problem is not None or len(records) != 1:
        raise StorageError(f"write-ahead log: {path.name} at byte {offset}: {problem}")
    return records[0]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_directory(directory: Path) -> None:
    """Make a new segment's directory entry durable too."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
