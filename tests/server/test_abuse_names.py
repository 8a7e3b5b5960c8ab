"""One name too long for the store is refused alone (issue 25, held-out abuse): the points
beside it, on the same request, the same telnet connection or another one, are stored."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.server.support import TelnetClient, stored
from tsd.daemon import Daemon

BASE = 1700000000
LONG = "n" * 600  # past the embedded store's 511-byte key


def _points(prefix: str, count: int) -> list[dict[str, object]]:
    return [
        {"metric": f"{prefix}.m", "timestamp": BASE + i, "value": i, "tags": {"host": "a"}}
        for i in range(count)
    ]


def _bad(count: int, long: str = LONG) -> list[dict[str, object]]:
    return [
        {"metric": f"{long}{i}", "timestamp": BASE, "value": 1, "tags": {"host": "a"}}
        for i in range(count)
    ]


@pytest.mark.each_backend
async def test_http_put_refuses_long_names_alone(tsd: Daemon) -> None:
    # past the backend's own limit: 506 on the embedded store, 32,767 on HBase
    long = "n" * tsd.storage.max_row_length("id")
    body = _points("good", 1000) + _bad(10, long)
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{tsd.port}/api/put?details&sync"
        async with http.post(url, json=body) as resp:
            reply = await resp.json()
            status = resp.status
    assert status == 400
    assert reply["success"] == 1000
    assert reply["failed"] == 10
    assert len(reply["errors"]) == 10
    for error in reply["errors"]:
        assert error["datapoint"]["metric"].startswith(long)
        assert error["error"].startswith('Invalid metric name ("nnnn')
        assert error["error"].endswith(f"at most {len(long)} in this store")
    points = [p for p in await stored(tsd) if p.metric == "good.m"]
    assert len(points) == 1000


async def test_telnet_refuses_long_names_alone_and_spares_other_connections(tsd: Daemon) -> None:
    bad = await TelnetClient.connect(tsd.port)
    victim = await TelnetClient.connect(tsd.port)
    lines = []
    for i in range(1000):
        lines.append(f"put mixed.m {BASE + i} {i} host=a\n")
        if i % 100 == 0:
            lines.append(f"put {LONG}{i} {BASE} 1 host=a\n")
    victim_lines = "".join(f"put victim.m {BASE + i} {i} host=b\n" for i in range(1000))
    await asyncio.gather(bad.send("".join(lines).encode()), victim.send(victim_lines.encode()))
    errors = await bad.sync()
    victim_errors = await victim.sync()
    await bad.close()
    await victim.close()
    assert len(errors) == 10, errors[:3]
    assert all(line.startswith(b"put: illegal argument: ") for line in errors), errors[:3]
    assert all(b"too long" in line for line in errors)
    assert victim_errors == []
    points = await stored(tsd)
    assert sum(p.metric == "mixed.m" for p in points) == 1000
    assert sum(p.metric == "victim.m" for p in points) == 1000
