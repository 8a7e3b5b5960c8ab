"""The daemon's control socket: a tool beside a running daemon asks it to write out what
it acknowledged, so the tool's reads and writes of the store see every such point.

Why: on the embedded store, acknowledged points wait in the daemon's in-memory head (and
its write-ahead log) until their row-hour is closed (docs/write-path.md). Another process
reading the store (``tsdb query``, ``scan``, ``fsck``, ...) would not see them, and a
``scan --delete`` could not remove them: the daemon would write them out later and go on
answering with them. OpenTSDB's tools see every point its TSD acknowledged (asynchbase
has sent it to HBase), so tsd's tools ask the daemon first.

Where: a Unix socket, ``tsd.sock`` in ``tsd.storage.data_dir``, mode 0600 (bound under a
temporary name, chmod-ed, then renamed into place: never reachable with wider
permissions), so only a user who can already write the store can use it. The daemon
binds it as soon as it holds the store's lock (``tsd.lock``) and removes it once it let
go of the store; a socket file left by a killed daemon is replaced by the next one. A
tool that finds nobody answering looks at the file and the lock
(:func:`request_write_out`) to tell a daemon gone (work on the store alone) from one
starting or stopping (wait for it).

Protocol: one request line, one answer line, ASCII, ``\\n`` ended; several requests may
follow one another on a connection.

* ``flush`` -> ``ok <rows>``: the writer's buffered batch is written, then every row of
  the head (whatever its hour; late points afterwards merge into the stored cell as any
  late point does), the log's records released; ``rows`` is how many rows were written.
  ``error <message>`` when storage refuses them (a full disk).
* anything else -> ``error unknown request: ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from tsd.errors import StorageError, StorageUnavailable
from tsd.log import DAEMON, get_logger

log = get_logger(DAEMON)

#: the socket's name in the data directory
SOCKET_NAME = "tsd.sock"
FLUSH = b"flush"
#: the longest request line read (longer ones are answered with an error and dropped)
MAX_REQUEST_BYTES = 256
#: pause between attempts to reach a daemon that holds the store but does not answer yet
RETRY_S = 0.05

#: sun_path holds 108 bytes with its terminating NUL
_MAX_ADDRESS_BYTES = 107


def socket_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / SOCKET_NAME


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits sun_path: the path itself, or, when it is too
    long (a deep data directory), the same file reached through ``/proc/self/fd`` of its
    directory."""
    if len(os.fsencode(path)) <= _MAX_ADDRESS_BYTES:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class ControlServer:
    """The daemon's side. Bound (:meth:`start`) as soon as the daemon holds the store, so
    that a tool tells a daemon starting from a process without a control socket; answers
    ``flush`` once :meth:`serve` gave it the writer's
    :meth:`~tsd.write.batch_writer.Writer.write_out` (after the log's replay: a request before
    waits for it)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = socket_path(data_dir)
        self._write_out: Callable[[], Awaitable[int]] | None = None
        self._ready = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind and listen. The caller holds the store's lock: a socket file there is a
        dead daemon's, and is replaced."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _address(temporary) as address:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(address)
                sock.bind(address)
            os.chmod(temporary, 0o600)
            os.replace(temporary, path)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(
                self._serve, sock=sock, limit=MAX_REQUEST_BYTES
            )
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def serve(self, write_out: Callable[[], Awaitable[int]]) -> None:
        """Answer ``flush`` requests with ``write_out`` from now on."""
        self._write_out = write_out
        self._ready.set()
        log.info("daemon.control_socket", path=str(self.path))

    async def close(self) -> None:
        """Stop serving; the socket file stays until :meth:`remove` (after the daemon let
        go of the store): a tool asking meanwhile finds nobody answering but the store
        held, and waits for the stop, which writes the head out. A write-out a tool asked
        for goes on to its end (it is shielded; the head writes out one at a time)."""
        if self._server is None:
            return
        self._server.close()
        self._server = None
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers))

    def remove(self) -> None:
        """Remove the socket file (the daemon no longer holds the store)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while line := await reader.readline():
                writer.write(await self._answer(line.strip()) + b"\n")
                await writer.drain()
        except (ValueError, ConnectionError):  # a line past the limit; the tool went away
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer(self, request: bytes) -> bytes:
        if request != FLUSH:
            return b"error unknown request: " + request[:64]
        await self._ready.wait()
        assert self._write_out is not None
        try:
            rows = await asyncio.shield(self._write_out())
        except StorageError as exc:
            log.warning("daemon.write_out_failed", error=exc.message)
            return b"error " + exc.message.encode("utf-8", "replace")
        log.info("daemon.written_out", rows=rows)
        return b"ok %d" % rows


async def request_write_out(
    data_dir: str | os.PathLike[str], timeout_s: float, daemon_running: Callable[[], bool]
) -> int | None:
    """The tool's side: ask the daemon serving ``data_dir`` to write out what it
    acknowledged; the rows it wrote, or None when no daemon of ours runs there.

    ``daemon_running()`` says whether a process holds the store's lock. Nobody answering
    on the socket: with no socket file, a holder is not a daemon with a control socket
    (an older tsd; ``compact-store``) and the tool goes on as before; with a file, nobody
    holding the store means the daemon that left it is gone, while a holder is a daemon
    starting (not yet bound) or stopping (writing its head out), waited for. A daemon
    that takes longer than ``timeout_s`` in all: StorageUnavailable."""
    path = socket_path(data_dir)
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                answer = await _ask(path)
                if answer is not None:
                    break
                if not daemon_running() or not path.exists():
                    return None
                await asyncio.sleep(RETRY_S)
    except TimeoutError:
        raise StorageUnavailable(
            f"the daemon running on {str(data_dir)!r} did not write out its points within"
            f" {timeout_s:g} s (tsd.storage.head.flush_timeout); nothing was done"
        ) from None
    if answer.startswith(b"ok "):
        return int(answer[3:])
    message = answer.removeprefix(b"error ").decode("utf-8", "replace")
    raise StorageUnavailable(
        f"the daemon running on {str(data_dir)!r} could not write out its points: {message}"
    )


async def _ask(path: Path) -> bytes | None:
    """One ``flush`` request; None when nobody answers (no socket, a dead daemon's, a
    daemon stopping)."""
    try:
        with _address(path) as address:
            reader, writer = await asyncio.open_unix_connection(address)
    except (FileNotFoundError, ConnectionError):
        return None
    except OSError as exc:  # not ours to use (permissions), not a socket
        raise StorageUnavailable(
            f"cannot reach the daemon's control socket {str(path)!r}: {exc.strerror or exc}"
        ) from None
    try:
        writer.write(FLUSH + b"\n")
        await writer.drain()
        line = await reader.readline()
    except ConnectionError:
        return None
    finally:
        writer.close()
    return line.strip() if line.endswith(b"\n") else None
