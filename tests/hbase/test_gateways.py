"""Several Thrift gateways in ``tsd.storage.hbase.thrift.host``: calls spread over the
gateways that answer, a gateway that fails is left out and probed back in, a scanner's
reads stay on the gateway that opened it (tsd/storage/hbase/pool.py, storage.py).

On the standalone HBase, each "gateway" a TCP proxy to its one Thrift gateway (so that
one can be stopped and started); the cluster's real gateways are in tests/cluster/.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tests.hbase.test_pool import DelayingProxy, closed_port
from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.errors import ConfigError
from tsd.storage.base import FamilySpec, Put, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.pool import PROBE_MAX_S, Gateway
from tsd.storage_setup import hbase_settings, thrift_gateways

# -- the key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "gateways"),
    [
        ("localhost", (("localhost", 9090),)),
        ("h1:9091,h2", (("h1", 9091), ("h2", 9090))),
        (" h1 , h2:1 ", (("h1", 9090), ("h2", 1))),
        ("[::1]:9095,::1", (("::1", 9095), ("::1", 9090))),
    ],
)
def test_thrift_host_names_one_gateway_or_several(
    value: str, gateways: tuple[tuple[str, int], ...]
) -> None:
    assert thrift_gateways(value, 9090) == gateways


@pytest.mark.parametrize("value", ["h1,,h2", "h1:0", "h1:x", ":9090", "h1:70000"])
def test_a_bad_gateway_list_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match=r"tsd\.storage\.hbase\.thrift\.host"):
        thrift_gateways(value, 9090)


# -- on the standalone HBase -------------------------------------------------------------------

ROWS = 300


@pytest.fixture
async def table(hbase_server: HBaseServer) -> AsyncIterator[str]:
    prefix = unique_prefix()
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    name = f"{prefix}gw"
    await storage.create_table(name, [FamilySpec("f")])
    await storage.put(name, [Put(b"r%04d" % i, "f", b"q", b"v") for i in range(ROWS)])
    await storage.close()
    yield name
    if not hbase_server.owned:
        await drop_tables(hbase_server, prefix)


def is_up(gateway: Gateway) -> bool:
    return gateway.up  # read anew each time (mypy narrows an attribute checked before)


def storage_on(hbase_server: HBaseServer, ports: list[int], pool_size: int = 4) -> HBaseStorage:
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    cfg = hbase_server.storage_config(thrift_host=hosts, thrift_pool_size=pool_size)
    return HBaseStorage(hbase_settings(cfg))


async def read_everything(storage: HBaseStorage, table: str) -> int:
    """A scan in small batches (several scannerGetList calls per scanner), gets, a put."""
    spec = ScanSpec(start=b"", stop=b"", families=("f",), batch_rows=7)
    rows = [row async for row in storage.scan(table, spec)]
    assert [row.key for row in rows] == [b"r%04d" % i for i in range(ROWS)]
    assert (await storage.get(table, b"r0001")) is not None
    await storage.put(table, [Put(b"r0001", "f", b"q", b"v")])
    return len(rows)


@pytest.mark.hbase
@pytest.mark.slow
async def test_calls_spread_over_every_gateway_and_scanners_stay_on_theirs(
    hbase_server: HBaseServer, table: str
) -> None:
    upstream = (hbase_server.thrift_host, hbase_server.thrift_port)
    first, second = DelayingProxy(upstream), DelayingProxy(upstream)
    async with first.running(), second.running():
        storage = storage_on(hbase_server, [first.port, second.port])
        try:
            # several scans at once: each scanner's reads go to the gateway that opened it
            # (another gateway does not know its id: the scan would fail)
            counts = await asyncio.gather(*(read_everything(storage, table) for _ in range(6)))
            assert counts == [ROWS] * 6
            gateways = storage.pool.gateways
            assert [g.endpoint for g in gateways] == [
                f"127.0.0.1:{first.port}",
                f"127.0.0.1:{second.port}",
            ]
            assert all(g.calls > 10 and g.errors == 0 and g.up for g in gateways), gateways
        finally:
            await storage.close()


@pytest.mark.hbase
@pytest.mark.slow
async def test_a_dead_gateway_is_left_out_and_taken_back_when_it_answers(
    hbase_server: HBaseServer, table: str
) -> None:
    upstream = (hbase_server.thrift_host, hbase_server.thrift_port)
    live = DelayingProxy(upstream)
    dead_port = closed_port()
    async with live.running():
        storage = storage_on(hbase_server, [dead_port, live.port])
        try:
            for _ in range(3):  # every call answers, none fails
                assert await read_everything(storage, table) == ROWS
            dead, alive = storage.pool.gateways
            assert not dead.up
            assert dead.errors >= 1
            assert alive.up
            assert alive.errors == 0
            calls_while_down = dead.calls
            # probes only: at most one every PROBE_FIRST_S..PROBE_MAX_S
            assert calls_while_down <= dead.errors + 1
            back = DelayingProxy(upstream)
            async with back.running(port=dead_port):
                deadline = time.monotonic() + PROBE_MAX_S * 3
                while not is_up(dead) and time.monotonic() < deadline:
                    await read_everything(storage, table)
                    await asyncio.sleep(0.2)
                assert is_up(dead)
                before = dead.calls
                await read_everything(storage, table)
                assert dead.calls > before  # carries calls again
        finally:
            await storage.close()
