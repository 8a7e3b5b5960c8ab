"""A TCP proxy in front of HBase's Thrift gateway that a test cuts and restores: an HBase
outage as a TSD sees it (connections reset, new ones refused), without stopping HBase.

Run as its own process (``python -m tests.hbase.fault_proxy TARGET_HOST TARGET_PORT``), so
that forwarding never competes with the test's own loop: it prints ``listening <port>``,
then on SIGUSR1 resets every connection, stops listening and prints ``cut``; on SIGUSR2
listens again on the same port and prints ``restored``; on SIGHUP it starts holding
``checkAndPut`` calls (prints ``holding``): a connection whose next bytes to the gateway name
``checkAndPut`` forwards nothing more, and the first one held prints ``held``; a TSD's forward
UID mappings then never arrive, the moment a test kills it in the middle of a UID block.
:class:`FaultProxy` drives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 1 << 16


class _Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.open: set[asyncio.StreamWriter] = set()
        self.holding = False
        self.held = 0

    async def listen(self) -> None:
        self.server = await asyncio.start_server(
            self.accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = {writer, up_writer}
        self.open |= pair
        try:
            await asyncio.gather(
                self.pump(reader, up_writer, upstream=True),
                self.pump(up_reader, writer),
                return_exceptions=True,
            )
        finally:
            self.open -= pair
            for side in pair:
                side.transport.abort()

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool = False
    ) -> None:
        while data := await reader.read(CHUNK):
            if upstream and self.holding and b"checkAndPut" in data:
                self.held += 1
                if self.held == 1:
                    print("held", flush=True)
                await asyncio.Event().wait()  # never forwarded (until the connection goes)
            writer.write(data)
            await writer.drain()
        writer.transport.abort()

    async def cut(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in list(self.open):
            writer.transport.abort()
        print("cut", flush=True)

    async def hold_checks(self) -> None:
        self.holding = True
        print("holding", flush=True)

    async def restore(self) -> None:
        if self.server is None:
            await self.listen()
        print("restored", flush=True)


async def _main(target_host: str, target_port: int) -> None:
    proxy = _Proxy(target_host, target_port)
    await proxy.listen()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def on(action: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = loop.create_task(action())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    loop.add_signal_handler(signal.SIGUSR1, on, proxy.cut)
    loop.add_signal_handler(signal.SIGUSR2, on, proxy.restore)
    loop.add_signal_handler(signal.SIGHUP, on, proxy.hold_checks)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(f"listening {proxy.port}", flush=True)
    await stop.wait()


class FaultProxy:
    """The proxy process: :attr:`port` to point a TSD at, :meth:`cut`, :meth:`restore`."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    async def _signal(self, signum: int, reply: bytes) -> None:
        self.process.send_signal(signum)
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 10)
        assert line.strip() == reply, line

    async def cut(self) -> None:
        """Reset every connection and refuse new ones (returns once that holds)."""
        await self._signal(signal.SIGUSR1, b"cut")

    async def restore(self) -> None:
        """Take connections again."""
        await self._signal(signal.SIGUSR2, b"restored")

    async def hold_checks(self) -> None:
        """From now on, forward no checkAndPut call (nor anything after it on its
        connection); :meth:`wait_held` returns once one is held."""
        await self._signal(signal.SIGHUP, b"holding")

    async def wait_held(self, timeout_s: float = 30) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout_s)
        assert line.strip() == b"held", line


@contextlib.asynccontextmanager
async def fault_proxy(target_host: str, target_port: int) -> AsyncIterator[FaultProxy]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.hbase.fault_proxy",
        target_host,
        str(target_port),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        words = line.split()
        assert words[:1] == [b"listening"], line
        yield FaultProxy(process, int(words[1]))
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
