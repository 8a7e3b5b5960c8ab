"""Helpers for the server tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tests.write.readback import StoredPoint, stored_points
from tsd.daemon import Daemon
from tsd.server.flow import FlowControl
from tsd.storage.base import ScanSpec

T = TypeVar("T")


async def eventually(condition: Callable[[], bool], attempts: int = 1000) -> None:
    """Wait (polling the loop) until ``condition()`` holds; fail after ``attempts`` tries.

    For state the server updates after the client side has already returned (a closed
    connection being noticed), not for timing.
    """
    for _ in range(attempts):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"condition never held: {condition}")


class TelnetClient:
    """A telnet connection to the daemon, as collectors open one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> TelnetClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def line(self) -> bytes:
        """The next reply line, without its newline."""
        line = await self.reader.readline()
        assert line.endswith(b"\n"), f"connection closed: {line!r}"
        return line[:-1]

    async def sync(self) -> list[bytes]:
        """Send ``version`` and return the reply lines before its answer: every line sent
        earlier has been handled once it comes back."""
        await self.send(b"version\n")
        lines = []
        while not (line := await self.line()).startswith(b"tsd "):
            lines.append(line)
        await self.line()  # "Built on ..."
        return lines

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def stored(daemon: Daemon) -> list[StoredPoint]:
    """Everything the daemon's storage holds, after writing what is buffered (and the
    head's rows, on the embedded store)."""
    await daemon.writer.flush()
    if daemon.writer.head is not None:
        await daemon.writer.head.flush_all()
    return await stored_points(daemon.storage, daemon.config.storage, daemon.uids)


async def telnet_idle(daemon: Daemon) -> None:
    """Wait until every telnet connection is finished (closed and fully handled)."""
    await eventually(lambda: not daemon.listener.telnet_protocols)


async def storage_snapshot(daemon: Daemon) -> list[tuple[str, bytes, str, bytes, bytes]]:
    """Every cell of every table, after writing what is buffered: a request that changed
    nothing leaves it equal."""
    await daemon.writer.flush()
    await daemon.meta.tracker.flush()
    names = daemon.config.storage
    cells: list[tuple[str, bytes, str, bytes, bytes]] = []
    for table in (names.data_table, names.uid_table, names.tree_table, names.meta_table):
        async for row in daemon.storage.scan(table, ScanSpec()):
            cells.extend((table, row.key, c.family, c.qualifier, c.value) for c in row.cells)
    return cells


async def longest_stall(port: int, requests: list[Coroutine[Any, Any, T]]) -> tuple[list[T], float]:
    """Run ``requests`` concurrently while another client (a telnet connection) sends
    ``version`` round trips back to back: their answers, and the longest round trip (the
    longest the daemon kept that other client waiting)."""
    telnet = await TelnetClient.connect(port)
    await telnet.sync()
    tasks = [asyncio.create_task(request) for request in requests]
    longest = 0.0
    while not all(task.done() for task in tasks):
        t0 = time.perf_counter()
        await telnet.sync()
        longest = max(longest, time.perf_counter() - t0)
    await telnet.close()
    return [task.result() for task in tasks], longest


async def non_reader(
    daemon: Daemon, lines: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, FlowControl]:
    """A telnet client with a small receive buffer that sends ``lines`` and reads nothing:
    returned once the daemon has stopped reading it (its replies unsent) and holds less
    than 1 MiB of them."""
    from tsd.server.telnet import TelnetProtocol

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", daemon.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(lines)
    await eventually(lambda: len(daemon.listener.telnet_protocols) == 1)
    (protocol,) = daemon.listener.telnet_protocols
    assert isinstance(protocol, TelnetProtocol)
    flow = protocol.flow
    assert flow is not None
    await eventually(lambda: flow.reading_paused and flow.writing_paused)
    transport = protocol._transport
    assert transport is not None
    assert transport.get_write_buffer_size() < 1024 * 1024  # bounded, not every reply
    return reader, writer, flow
