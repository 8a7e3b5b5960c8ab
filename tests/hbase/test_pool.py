"""The connection rules of the HBase backend (tsd/storage/hbase/pool.py), on real sockets.

The faults of aiohappybase/thriftpy2's async client are reproduced for real: a
proxy in front of the live Thrift gateway holds replies back, so a call can be
cancelled or time out with its reply still on the way; the test HBase's gateway
drops idle connections after a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from tests.hbase_harness import THRIFT_READ_TIMEOUT_MS, HBaseServer, drop_tables, unique_prefix
from tsd.config import StorageConfig
from tsd.errors import StorageTimeout, StorageUnavailable
from tsd.storage.base import Cell, FamilySpec, Put, Row, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.pool import HBASE_THRIFT, pipelined
from tsd.storage.hbase.storage import Scanner
from tsd.storage.settings import HBaseSettings
from tsd.storage_setup import hbase_settings


class DelayingProxy:
    """TCP proxy to ``upstream``; holds every server->client chunk back ``delay_s``.

    ``drop_next_request``: the next request is not forwarded; its connection is closed
    instead, as a server closing an idle connection just as a call is sent.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay_s = 0.0
        self.drop_next_request = False
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        delayed: bool,
        peer: asyncio.StreamWriter,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if not delayed and self.drop_next_request:
                    self.drop_next_request = False
                    peer.close()
                    break
                if delayed and self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.upstream)
        for task in (
            asyncio.create_task(self._pump(client_r, server_w, delayed=False, peer=client_w)),
            asyncio.create_task(self._pump(server_r, client_w, delayed=True, peer=server_w)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @contextlib.asynccontextmanager
    async def running(self, port: int = 0) -> AsyncIterator[DelayingProxy]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A port that accepts connections and never answers."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


@contextlib.asynccontextmanager
async def timed_out_get(
    hbase_server: HBaseServer, table: str
) -> AsyncIterator[tuple[DelayingProxy, HBaseStorage]]:
    """A storage behind a proxy holding each reply 0.6 s, with a 200 ms deadline for reads
    (1 s for other calls), and one get on ``table`` that timed out."""
    async with DelayingProxy((hbase_server.thrift_host, hbase_server.thrift_port)).running() as px:
        cfg = StorageConfig(
            thrift_host="127.0.0.1",
            thrift_port=px.port,
            thrift_pool_size=1,
            thrift_timeout_ms=1000,
            thrift_read_timeout_ms=200,
        )
        storage = HBaseStorage(hbase_settings(cfg))
        px.delay_s = 0.6
        with pytest.raises(StorageTimeout):
            await storage.get(table, b"a")
        yield px, storage


@pytest.fixture
async def hbase_table(hbase_server: HBaseServer) -> AsyncIterator[str]:
    prefix = unique_prefix()
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    table = f"{prefix}pool"
    await storage.create_table(table, [FamilySpec("f")])
    await storage.put(table, [Put(b"a", "f", b"q", b"A"), Put(b"b", "f", b"q", b"B")])
    await storage.close()
    yield table
    if not hbase_server.owned:
        await drop_tables(hbase_server, prefix)


# -- without HBase -----------------------------------------------------------------------------


async def test_unreachable_gateway_raises_storage_unavailable() -> None:
    storage = HBaseStorage(HBaseSettings(host="127.0.0.1", port=closed_port()))
    with pytest.raises(StorageUnavailable):
        await storage.get("t", b"r")
    with pytest.raises(StorageUnavailable):
        await storage.list_tables()
    await storage.close()


@pytest.mark.slow  # waits out a real deadline
async def test_call_past_its_deadline_raises_storage_timeout_and_drops_the_connection() -> None:
    async with silent_server() as port:
        cfg = StorageConfig(thrift_host="127.0.0.1", thrift_port=port, thrift_timeout_ms=100)
        storage = HBaseStorage(hbase_settings(cfg))
        with pytest.raises(StorageTimeout):
            await storage.get("t", b"r")
        assert storage.pool.idle_count == 0
        with pytest.raises(StorageTimeout):
            await storage.list_tables()
        assert storage.pool.opened == 2
        await storage.close()


# -- with HBase --------------------------------------------------------------------------------


@pytest.mark.hbase
async def test_cancelled_call_never_hands_its_reply_to_the_next(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    async with DelayingProxy((hbase_server.thrift_host, hbase_server.thrift_port)).running() as px:
        cfg = StorageConfig(thrift_host="127.0.0.1", thrift_port=px.port, thrift_pool_size=1)
        storage = HBaseStorage(hbase_settings(cfg))
        assert await storage.get(hbase_table, b"a") is not None  # one pooled connection
        px.delay_s = 0.5
        call = asyncio.create_task(storage.get(hbase_table, b"a"))
        await asyncio.sleep(0.1)  # the request is out; its reply is held for 0.5 s
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        px.delay_s = 0.0
        # On the cancelled call's connection this would read row a's reply.
        assert await storage.get(hbase_table, b"b") == Row(b"b", (Cell("f", b"q", b"B"),))
        assert storage.pool.opened == 2
        await storage.close()


@pytest.mark.hbase
async def test_timed_out_call_never_hands_its_reply_to_the_next(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    async with timed_out_get(hbase_server, hbase_table) as (px, storage):
        px.delay_s = 0.0
        assert await storage.get(hbase_table, b"b") == Row(b"b", (Cell("f", b"q", b"B"),))
        await storage.close()


@pytest.mark.hbase
async def test_reads_writes_and_table_administration_have_their_own_deadlines(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    """A read gives up after the read deadline (200 ms here) while a write of the same wait
    goes through (1 s); createTable and deleteTable answer once the master has run them, so
    they get at least ADMIN_TIMEOUT_S, longer than either (each reply held 1.2 s)."""
    async with timed_out_get(hbase_server, hbase_table) as (px, storage):
        await storage.put(hbase_table, [Put(b"c", "f", b"q", b"C")])
        px.delay_s = 1.2
        table = f"{hbase_table}_admin"
        assert await storage.create_table(table, [FamilySpec("f")]) is True
        await storage.drop_table(table)
        px.delay_s = 0.0
        assert table not in await storage.list_tables()
        assert await storage.get(hbase_table, b"c") == Row(b"c", (Cell("f", b"q", b"C"),))
        await storage.close()


@pytest.mark.hbase
async def test_connection_idle_past_max_idle_is_not_reused(hbase_server: HBaseServer) -> None:
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config(thrift_max_idle_ms=0)))
    for _ in range(3):
        await storage.list_tables()
    assert storage.pool.opened == 3
    await storage.close()


@pytest.mark.hbase
async def test_pool_reuses_connections(hbase_server: HBaseServer, hbase_table: str) -> None:
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config(thrift_pool_size=4)))
    await asyncio.gather(*(storage.get(hbase_table, b"a") for _ in range(40)))
    assert storage.pool.opened <= 4
    await storage.close()


@pytest.mark.hbase
async def test_connection_the_gateway_dropped_while_idle_is_replaced(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    if not hbase_server.owned:
        pytest.skip("needs the harness's HBase, whose gateway drops idle connections quickly")
    # max_idle far above the gateway's timeout: the pool keeps the connection, the gateway
    # closes it, and the next call must notice and use a new one.
    storage = HBaseStorage(
        hbase_settings(hbase_server.storage_config(thrift_max_idle_ms=3_600_000))
    )
    assert await storage.get(hbase_table, b"a") is not None
    await asyncio.sleep(THRIFT_READ_TIMEOUT_MS / 1000 + 1.5)
    assert await storage.get(hbase_table, b"b") == Row(b"b", (Cell("f", b"q", b"B"),))
    assert storage.pool.opened == 2
    await storage.close()


@pytest.mark.hbase
async def test_call_on_a_connection_dropped_as_it_is_sent_is_retried_only_if_harmless(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    async with DelayingProxy((hbase_server.thrift_host, hbase_server.thrift_port)).running() as px:
        cfg = StorageConfig(thrift_host="127.0.0.1", thrift_port=px.port, thrift_pool_size=1)
        storage = HBaseStorage(hbase_settings(cfg))
        assert await storage.get(hbase_table, b"a") is not None  # one pooled connection
        px.drop_next_request = True
        # A read is repeated on a new connection, unseen by the caller.
        assert await storage.get(hbase_table, b"b") == Row(b"b", (Cell("f", b"q", b"B"),))
        assert storage.pool.opened == 2
        # So is a scanner's open (pinned to its gateway: the one there is)
        px.drop_next_request = True
        rows = [row.key async for row in storage.scan(hbase_table, ScanSpec())]
        assert rows == [b"a", b"b"]
        assert storage.pool.opened == 3
        # An increment is not: the caller learns it failed, and it was not applied.
        px.drop_next_request = True
        with pytest.raises(StorageUnavailable):
            await storage.increment(hbase_table, b"n", "f", b"q")
        assert await storage.get(hbase_table, b"n") is None
        assert await storage.increment(hbase_table, b"n", "f", b"q") == 1
        await storage.close()


@pytest.mark.hbase
async def test_pipelined_calls_answer_in_order_each_with_its_own_error(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    name = hbase_table.encode()
    scans = [
        {"tableName": name, "scan": HBASE_THRIFT.TScan(startRow=row, caching=10), "attributes": {}}
        for row in (b"a", b"b", b"c")
    ]
    async with storage.pool.connection() as conn:
        ids = await pipelined(conn.client, "scannerOpenWithScan", scans)
        assert len(set(ids)) == 3
        lists = await pipelined(
            conn.client, "scannerGetList", [{"id": i, "nbRows": 5} for i in ids]
        )
        assert [[r.row for r in rows] for rows in lists] == [[b"a", b"b"], [b"b"], []]
        closed = await pipelined(conn.client, "scannerClose", [{"id": i} for i in [*ids, ids[0]]])
        assert closed[:3] == [None, None, None]
        assert isinstance(closed[3], HBASE_THRIFT.IllegalArgument)  # closed already
        # the connection is still in step: the next call reads its own reply
        assert await conn.client.getTableNames()
    await storage.close()


class RecordingStorage(HBaseStorage):
    """Records the scanners it opens (to ask the gateway about them afterwards)."""

    opened: list[int]

    async def _open_scanner(
        self, table: str, spec: ScanSpec, filter_string: bytes | None = None
    ) -> Scanner:
        scanner = await super()._open_scanner(table, spec, filter_string)
        self.opened = [*getattr(self, "opened", []), scanner.id]
        return scanner


@pytest.mark.hbase
async def test_scanners_read_to_their_end_are_closed_in_the_background(
    hbase_server: HBaseServer, hbase_table: str
) -> None:
    storage = RecordingStorage(hbase_settings(hbase_server.storage_config()))

    async def rows(start: bytes) -> list[bytes]:
        spec = ScanSpec(start, b"", ("f",), None, None, 10)
        blocks = storage.scan_blocks(hbase_table, spec)
        async with contextlib.aclosing(blocks) as read:
            return [key async for block in read for key in block.keys]

    found = await asyncio.gather(rows(b"a"), rows(b"b"), rows(b"c"))
    assert list(found) == [[b"a", b"b"], [b"b"], []]
    await storage.close()  # waits for the closer
    other = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    async with other.pool.connection() as conn:
        answers = await pipelined(
            conn.client, "scannerGetList", [{"id": i, "nbRows": 1} for i in storage.opened]
        )
    assert len(answers) == 3
    assert all(isinstance(a, HBASE_THRIFT.IllegalArgument) for a in answers)
    await other.close()
