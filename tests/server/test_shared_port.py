"""One port, two protocols: the first byte decides (real sockets, both event loops)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import aiohttp
import pytest
from aiohttp import web

from tests.server.support import eventually
from tsd.server.listener import Listener, TrackedProtocol
from tsd.stats import StatsRegistry

pytestmark = pytest.mark.both_loops


class EchoProtocol(TrackedProtocol):
    """A stand-in telnet protocol: answers each chunk with ``echo:<chunk>``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"echo:" + data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.on_lost is not None:
            self.on_lost(self)

    def close(self) -> None:
        self.transport.close()


async def hello(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path})


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    app = web.Application()
    app.router.add_get("/hello", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    assert runner.server is not None
    listener = Listener(EchoProtocol, runner.server, StatsRegistry(), connections_limit=4)
    await listener.start("127.0.0.1", 0)
    yield listener
    listener.close()
    for protocol in listener.telnet_protocols:
        protocol.close()
    await runner.cleanup()


async def test_telnet_and_http_share_the_port(listener: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"version\n")
    assert await reader.readexactly(13) == b"echo:version\n"
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{listener.port}/hello") as response,
    ):
        assert response.status == 200
        assert await response.json() == {"path": "/hello"}
    writer.close()
    await writer.wait_closed()


@pytest.mark.parametrize(
    ("first", "expect_http"),
    [
        pytest.param(b"put x 1 1 a=b\n", False, id="lowercase_put"),
        pytest.param(b"\r\n", False, id="blank_line"),
        pytest.param(b"1", False, id="digit"),
        pytest.param(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", True, id="http_get"),
    ],
)
async def test_first_byte_picks_the_protocol(
    listener: Listener, first: bytes, expect_http: bool
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(first)
    head = await reader.readexactly(5)
    assert (head == b"HTTP/") is expect_http
    writer.close()
    await writer.wait_closed()


async def test_http_request_split_after_first_byte(listener: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"G")
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.write(b"ET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    reply = await reader.read()
    assert reply.startswith(b"HTTP/1.1 200 OK")
    assert reply.endswith(b'{"path": "/hello"}')
    writer.close()


async def test_connect_and_close_at_once_leaves_the_port_serving(listener: Listener) -> None:
    for _ in range(20):
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.close()
        await writer.wait_closed()
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"still\n")
    assert await reader.readexactly(11) == b"echo:still\n"
    writer.close()
    await writer.wait_closed()
    await eventually(lambda: listener.open_connections() == 0)


async def test_connections_over_the_limit_are_closed(listener: Listener) -> None:
    writers = []
    for _ in range(4):
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"x")
        await reader.readexactly(6)
        writers.append(writer)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    assert await reader.read() == b""  # closed by the server
    for w in [*writers, writer]:
        w.close()
    await eventually(lambda: listener.open_connections() == 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"y")
    assert await reader.readexactly(6) == b"echo:y"
    writer.close()
