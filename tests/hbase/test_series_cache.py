"""On HBase, the per-series memory of the write path (the series refs the ingest service and
its protocols keep, meta tracking's written TSUIDs) is bounded by
``tsd.core.series_cache.size``, the least recently used evicted (tsd/recent.py): a daemon
on a real HBase with a small bound, fed many more series over real telnet sockets, twice
(the second round finds most of its series evicted and resolves them again from the UID
caches), keeps its cache at the bound, stores every point, and assigns no UID twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest

from tests.hbase.opentsdb import fresh_tables, read_uid_table, started_tsd
from tests.hbase_harness import HBaseServer
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

pytestmark = pytest.mark.hbase  # a real HBase: slow, after the fast tests (tests/hbase_harness.py)

CAP = 500
SERIES = 3000
CONNECTIONS = 2
T0 = 1356998400
STEP_S = 10


async def send(port: int, lines: list[bytes]) -> None:
    """Write ``lines`` over one telnet connection; return once ``version`` answers (every
    line before it is taken by then)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for start in range(0, len(lines), 500):
        writer.write(b"".join(lines[start : start + 500]))
        await writer.drain()
    writer.write(b"version\n")
    assert b"built at revision" in await asyncio.wait_for(reader.readline(), 60)
    writer.close()
    await writer.wait_closed()


async def stats(http: aiohttp.ClientSession, port: int) -> dict[str, int]:
    """tsd.ingest.series_* from /api/stats."""
    async with http.get(f"http://127.0.0.1:{port}/api/stats") as reply:
        records = await reply.json()
    return {
        r["metric"]: int(r["value"])
        for r in records
        if r["metric"] in ("tsd.ingest.series_cached", "tsd.ingest.series_evicted")
    }


async def read_back(http: aiohttp.ClientSession, port: int) -> dict[str, tuple[int, int]]:
    """Per timestamp: how many series had a point then, and the sum of their values."""
    got: dict[str, tuple[int, int]] = {}
    for aggregator in ("count", "sum"):
        url = f"http://127.0.0.1:{port}/api/query?start={T0}&end={T0 + 60}&m={aggregator}:sc.m"
        async with http.get(url) as reply:
            assert reply.status == 200, await reply.text()
            (result,) = json.loads(await reply.text())
        for stamp, value in result["dps"].items():
            count, total = got.get(stamp, (0, 0))
            got[stamp] = (int(value), total) if aggregator == "count" else (count, int(value))
    return got


async def test_the_series_cache_stays_at_its_bound_on_hbase(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        cfg = await stack.enter_async_context(fresh_tables(hbase_server))
        keys = {"tsd.core.series_cache.size": str(CAP)}
        daemon = await started_tsd(stack, cfg, tmp_path / "tsd", **keys)
        port = daemon.port
        http = await stack.enter_async_context(aiohttp.ClientSession())
        sampled: list[int] = []

        async def sample() -> None:
            while True:
                sampled.append((await stats(http, port))["tsd.ingest.series_cached"])
                await asyncio.sleep(0.02)

        sampler = asyncio.get_running_loop().create_task(sample())
        for step in range(2):  # the second round: most series were evicted meanwhile
            stamp = T0 + step * STEP_S
            shares = [
                [b"put sc.m %d %d host=h%d\n" % (stamp, n + step, n) for n in range(c, SERIES, 2)]
                for c in range(CONNECTIONS)
            ]
            await asyncio.gather(*(send(port, share) for share in shares))
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        final = await stats(http, port)
        assert len(sampled) >= 5, sampled
        assert max(sampled) <= CAP, max(sampled)
        assert final["tsd.ingest.series_cached"] == CAP
        # every series of the first round but the last CAP was evicted, and again
        assert final["tsd.ingest.series_evicted"] >= 2 * (SERIES - CAP), final
        tracker = daemon.meta.tracker
        assert tracker.remembered() <= CAP
        # every point, read back (the last batch is stored within a flush interval)
        expected = {str(T0 + s * STEP_S): (SERIES, sum(range(s, SERIES + s))) for s in range(2)}
        await daemon.writer.flush()
        assert await read_back(http, port) == expected
        # one UID per name: the evicted series were resolved again, not assigned again
        storage = HBaseStorage(hbase_settings(cfg))
        stack.push_async_callback(storage.close)
        table = await read_uid_table(storage, cfg)
        assert table.problems() == []
        assert {kind: len(names) for kind, names in table.forward.items()} == {
            "metrics": 1,
            "tagk": 1,
            "tagv": SERIES,
        }
        assert all(not table.leaked(kind) for kind in ("metrics", "tagk", "tagv"))
