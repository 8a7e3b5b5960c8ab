"""/api/serializers and /api/stats/{query,threads,jvm,region_clients}: OpenTSDB's shapes
(StatsRpc, QueryStats, HttpQuery's serializer status), 404 for other sub-paths."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.uid.hooked_storage import HookedStorage
from tsd.config import build_config
from tsd.daemon import Daemon
from tsd.errors import StorageUnavailable
from tsd.server.http.stats_detail import region_client_stats
from tsd.stats import StatsRegistry
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.hbase import HBaseStorage
from tsd.storage.instrumented import InstrumentedStorage
from tsd.storage_setup import hbase_settings

T = 1_795_237_078

#: the getters of OpenTSDB's QueryStats that Jackson writes for a completed query
COMPLETED_KEYS = {
    "user",
    "requestHeaders",
    "numRunningQueries",
    "exception",
    "httpResponse",
    "executed",
    "query",
    "queryStartTimestamp",
    "queryCompletedTimestamp",
    "sentToClient",
    "stats",
}
#: QueryStats.getRunningAndCompleteStats' running entries
RUNNING_KEYS = {"query", "remote", "user", "headers", "queryStart", "elapsed"}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get_json(http: aiohttp.ClientSession, daemon: Daemon, path: str, **headers: str) -> Any:
    async with http.get(f"http://127.0.0.1:{daemon.port}{path}", headers=headers) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == "application/json; charset=UTF-8"
        return orjson.loads(await response.read())


async def put(http: aiohttp.ClientSession, daemon: Daemon, *points: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{daemon.port}/api/put?sync"
    async with http.post(url, data=orjson.dumps(list(points))) as response:
        assert response.status == 204


async def test_serializers(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    body = await get_json(http, tsd, "/api/serializers")
    assert len(body) == 1
    (json,) = body
    assert set(json) == {
        "class",
        "serializer",
        "request_content_type",
        "response_content_type",
        "parsers",
        "formatters",
    }
    assert json["serializer"] == "json"
    assert json["request_content_type"] == "application/json"
    assert json["response_content_type"] == "application/json; charset=UTF-8"
    assert {"PutV1", "QueryV1", "SuggestV1"} <= set(json["parsers"])
    assert {"QueryStatsV1", "JVMStatsV1", "SerializersV1"} <= set(json["formatters"])
    async with http.put(f"http://127.0.0.1:{tsd.port}/api/serializers") as response:
        assert response.status == 405


async def test_query_stats_completed(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    assert await get_json(http, tsd, "/api/stats/query") == {"completed": [], "running": []}
    await put(http, tsd, {"metric": "q.m", "timestamp": T, "value": 1, "tags": {"h": "a"}})
    ok = f"/api/query?start={T - 10}&end={T + 10}&m=sum:q.m"
    for _ in range(2):
        await get_json(http, tsd, ok, Authorization="Basic c2VjcmV0OnNlY3JldA==")
    async with http.get(f"http://127.0.0.1:{tsd.port}/api/query?start={T}&m=sum:no.such") as r:
        assert r.status == 400
        message = orjson.loads(await r.read())["error"]["message"]

    stats = await get_json(http, tsd, "/api/stats/query")
    assert list(stats) == ["completed", "running"]
    assert stats["running"] == []
    by_code = {entry["httpResponse"]["code"]: entry for entry in stats["completed"]}
    assert set(by_code) == {200, 400}
    done = by_code[200]
    assert set(done) == COMPLETED_KEYS
    assert done["executed"] == 2  # the same query from the same client: one entry
    assert done["httpResponse"] == {"code": 200, "reasonPhrase": "OK"}
    assert done["exception"] == "null"
    assert done["sentToClient"] is True
    assert done["query"]["start"] == str(T - 10)
    assert done["query"]["queries"][0]["metric"] == "q.m"
    assert done["query"]["queries"][0]["aggregator"] == "sum"
    assert done["stats"]["emittedDPs"] == 1
    assert done["stats"]["totalTime"] >= done["stats"]["processingPreWriteTime"] > 0
    assert done["queryCompletedTimestamp"] >= done["queryStartTimestamp"]
    assert "Host" in done["requestHeaders"]
    assert done["requestHeaders"]["Authorization"] == "********"  # never shown
    failed = by_code[400]
    assert failed["exception"] == message
    assert failed["sentToClient"] is False
    assert failed["executed"] == 1


async def test_query_stats_running(make_tsd: MakeTsd, tmp_path: Path) -> None:
    store = EmbeddedStorage(tmp_path / "store")
    hooked = HookedStorage(store)
    scanning = asyncio.Event()
    release = asyncio.Event()

    async def hold(*_: object) -> None:
        scanning.set()
        await release.wait()

    try:
        daemon = await make_tsd(storage=hooked)
        async with aiohttp.ClientSession() as http:
            await put(
                http, daemon, {"metric": "r.m", "timestamp": T, "value": 1, "tags": {"h": "a"}}
            )
            hooked.hooks["scan"] = hold
            url = f"http://127.0.0.1:{daemon.port}/api/query?start={T - 10}&m=sum:r.m"
            query = asyncio.ensure_future(http.get(url))
            await scanning.wait()
            stats = await get_json(http, daemon, "/api/stats/query")
            assert len(stats["running"]) == 1
            (running,) = stats["running"]
            assert set(running) == RUNNING_KEYS
            assert running["query"]["queries"][0]["metric"] == "r.m"
            assert running["remote"].startswith("127.0.0.1:")
            assert running["elapsed"] >= 0
            records = await get_json(http, daemon, "/api/stats")
            count = [r for r in records if r["metric"] == "tsd.query.count"]
            assert count[0]["value"] == "1"
            assert count[0]["tags"]["type"] == "running"
            release.set()
            response = await query
            assert response.status == 200
            response.release()
            stats = await get_json(http, daemon, "/api/stats/query")
            assert stats["running"] == []
            assert [e["httpResponse"]["code"] for e in stats["completed"]] == [200]
        await daemon.stop()
    finally:
        await store.close()


async def test_threads(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    body = await get_json(http, tsd, "/api/stats/threads")
    assert {t["threadID"] for t in body} == {t.ident for t in threading.enumerate()}
    for thread in body:
        assert set(thread) == {"threadID", "name", "state", "interrupted", "priority", "stack"}
        assert thread["state"] == "RUNNABLE"
    main = next(t for t in body if t["threadID"] == threading.get_ident())
    # the event loop's thread is answering: its stack passes through the handler
    assert any("stats" in frame and "handle_stats" in frame for frame in main["stack"])


async def test_jvm(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    body = await get_json(http, tsd, "/api/stats/jvm")
    assert set(body) == {"runtime", "memory", "gc", "pools", "os"}
    assert set(body["runtime"]) == {"startTime", "uptime", "vmName", "vmVendor", "vmVersion"}
    assert body["runtime"]["vmName"] == "CPython"
    heap = body["memory"]["heapMemoryUsage"]
    assert set(heap) == {"init", "used", "committed", "max"}
    assert heap["used"] > 10_000_000  # numpy and aiohttp alone take more
    assert {"collectionCount", "collectionTime"} == set(body["gc"]["generation0"])
    assert body["pools"]["eventLoop"]["tasks"] >= 1
    assert isinstance(body["os"]["systemLoadAverage"], float)


async def test_region_clients_on_the_embedded_store(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    assert await get_json(http, tsd, "/api/stats/region_clients") == []


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_region_clients_are_the_gateways_with_their_calls() -> None:
    down = [closed_port(), closed_port()]  # nothing listens: every call fails
    config = build_config(
        {
            "tsd.storage.backend": "hbase",
            "tsd.storage.hbase.thrift.host": f"127.0.0.1:{down[0]},127.0.0.1:{down[1]}",
        }
    )
    store = HBaseStorage(hbase_settings(config.storage))
    instrumented = InstrumentedStorage(store, StatsRegistry())
    for _ in range(3):
        with pytest.raises(StorageUnavailable):
            await instrumented.list_tables()
    await store.close()
    clients = region_client_stats(config, instrumented)
    assert [client["endpoint"] for client in clients] == [f"127.0.0.1:{port}" for port in down]
    assert sum(client["rpcsSent"] for client in clients) >= 3
    assert all(client["rpcsFailed"] >= 1 and client["dead"] for client in clients)
    assert all(client["rpcsInFlight"] == 0 for client in clients)
    assert {"pendingRPCs", "rpcid", "rpcsTimedout", "writesBlocked"} <= set(clients[0])


@pytest.mark.parametrize("sub", ["nope", "query/extra/x", "JVMx"])
async def test_unknown_stats_subpaths_are_404(
    tsd: Daemon, http: aiohttp.ClientSession, sub: str
) -> None:
    async with http.get(f"http://127.0.0.1:{tsd.port}/api/stats/{sub}") as response:
        if sub.startswith("query/"):  # OpenTSDB looks at the first segment only
            assert response.status == 200
        else:
            assert response.status == 404
            assert orjson.loads(await response.read())["error"]["code"] == 404


async def test_legacy_stats_keeps_its_list(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(f"http://127.0.0.1:{tsd.port}/stats?json") as response:
        assert response.status == 200
        lines = orjson.loads(await response.read())
    assert any(line.startswith("tsd.rpc.received ") for line in lines)
