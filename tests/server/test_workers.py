"""Telnet on every core (tsd.network.worker_threads): connections served by a worker
process keep the daemon's replies, order and acknowledgements; a worker that dies is
replaced; with 1 the daemon serves every connection itself."""

from __future__ import annotations

import os
import signal

import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, eventually, stored
from tsd.daemon import Daemon
from tsd.server.worker_pool import RemoteTelnet, WorkerPool

T = 1_700_000_000


def _pool(daemon: Daemon) -> WorkerPool:
    pool = getattr(daemon, "_workers", None)
    assert isinstance(pool, WorkerPool)
    return pool


async def test_a_worker_serves_telnet_with_the_daemons_replies_in_order(
    make_tsd: MakeTsd,
) -> None:
    tsd = await make_tsd(**{"tsd.network.worker_threads": "2"})
    await eventually(_pool(tsd).all_ready, attempts=6000)
    client = await TelnetClient.connect(tsd.port)
    lines = [b"put w.m %d %d host=a\n" % (T + i, i) for i in range(2000)]
    lines[700] = b"put w.m %d x host=a\n" % T  # refused by the parser
    lines[1500] = b"put w.m %d 1\n" % T  # no tag
    await client.send(b"".join(lines))
    replies = await client.sync()
    assert replies == [
        b"put: invalid value: Invalid character 'x' in x",
        b"put: illegal argument: not enough arguments (need least 4, got 3)",
    ]
    (protocol,) = tsd.listener.telnet_protocols
    assert isinstance(protocol, RemoteTelnet)  # the connection lives in the worker
    # Every point taken is in the writer when the version reply comes back.
    assert _added(tsd) == 1998
    await client.close()


def _added(tsd: Daemon) -> int:
    (added,) = [s.value for s in tsd.registry.collect() if s.name == "datapoints.added"]
    return added


async def test_a_worker_encodes_the_points_of_series_it_was_taught_in_order(
    make_tsd: MakeTsd,
) -> None:
    """Once the daemon resolved a series for a worker's connection, the worker encodes its
    points itself and hands them over as parts of a log record: a later point of a cell
    still wins, a reply still comes after every put before it, the daemon's dropcaches
    makes the worker forget (and learn again), and every point is stored."""
    tsd = await make_tsd(**{"tsd.network.worker_threads": "2"})
    await eventually(_pool(tsd).all_ready, attempts=6000)
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put w.m %d 0 host=a\nput w.m %d 0 host=b\n" % (T, T))
    assert await client.sync() == []
    assert await client.sync() == []  # the worker was taught both series before this reply
    lines = [
        b"put w.m %d %d host=%s\n" % (T + i, i, b"ab"[i % 2 : i % 2 + 1]) for i in range(1, 3001)
    ]
    lines[1000] = b"put w.m %d 9999 host=a\n" % (T + 998)  # the same cell again: it wins
    lines[2000] = b"put w.m %d x host=a\n" % T  # refused: its reply comes in order
    await client.send(b"".join(lines[:1500]))
    await client.send(b"".join(lines[1500:]))
    assert await client.sync() == [b"put: invalid value: Invalid character 'x' in x"]
    assert _encoded(tsd) >= 2000  # most of them were encoded by the worker
    assert _added(tsd) == 3001
    await client.send(b"dropcaches\n")
    assert await client.sync() == [b"Caches dropped."]
    await client.send(b"".join(b"put w.m %d %d host=a\n" % (T + i, i) for i in range(4000, 4100)))
    assert await client.sync() == []
    await client.close()
    points = {
        (dict(p.tags)["host"], p.timestamp_ms // 1000 - T): p.value for p in await stored(tsd)
    }
    expected = {("a", 0): 0, ("b", 0): 0}
    for i, line in enumerate(lines, start=1):
        if i != 2001:
            expected[(line.split(b"=")[1].strip().decode(), int(line.split()[2]) - T)] = int(
                line.split()[3]
            )
    expected.update({("a", i): i for i in range(4000, 4100)})
    assert points == expected


def _encoded(tsd: Daemon) -> int:
    return sum(s.value for s in tsd.registry.collect() if s.name == "workers.points")


@pytest.mark.slow
async def test_a_worker_that_dies_is_replaced(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd(**{"tsd.network.worker_threads": "2"})
    pool = _pool(tsd)
    await eventually(pool.all_ready, attempts=6000)
    (first,) = pool.pids()
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put w.m %d 1 host=a\n" % T)
    assert await client.sync() == []
    os.kill(first, signal.SIGKILL)
    assert await client.reader.read() == b""  # its connections went with it
    await client.close()
    await eventually(lambda: pool.pids()[0] != first and pool.all_ready(), attempts=6000)
    other = await TelnetClient.connect(tsd.port)
    await other.send(b"put w.m %d 2 host=a\n" % (T + 1))
    assert await other.sync() == []
    await other.close()


async def test_one_process_when_worker_threads_is_1(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd(**{"tsd.network.worker_threads": "1"})
    assert tsd._workers is None
    client = await TelnetClient.connect(tsd.port)
    assert await client.sync() == []
    (protocol,) = tsd.listener.telnet_protocols
    assert not isinstance(protocol, RemoteTelnet)
    await client.close()


@pytest.mark.slow
async def test_a_worker_past_the_series_cache_bound_keeps_every_point_in_order(
    make_tsd: MakeTsd,
) -> None:
    """tsd.core.series_cache.size bounds the worker's refs too: with 100 series against
    a bound of 20 the refs it was taught are evicted (least recently taught first) and the
    points of evicted series go by key again; a later point of a cell still wins, and
    every point is stored."""
    tsd = await make_tsd(
        **{
            "tsd.network.worker_threads": "2",
            "tsd.core.series_cache.size": "20",
            "tsd.storage.fix_duplicates": "true",  # the later of two values at a time wins
        }
    )
    await eventually(_pool(tsd).all_ready, attempts=6000)
    client = await TelnetClient.connect(tsd.port)
    expected: dict[tuple[str, int], int] = {}
    for turn in range(4):
        lines: list[bytes] = []
        for s in [*range(100), *range(10)]:  # the first ten written again: the later wins
            value = turn * 1000 + s + (5000 if len(lines) >= 100 else 0)
            lines.append(b"put w.e %d %d host=h%d\n" % (T + turn, value, s))
            expected[(f"h{s}", turn)] = value
        await client.send(b"".join(lines))
        assert await client.sync() == []
    await client.close()
    assert tsd.ingest.cached_entries() <= 20
    points = {
        (dict(p.tags)["host"], p.timestamp_ms // 1000 - T): p.value
        for p in await stored(tsd)
        if p.metric == "w.e"
    }
    assert points == expected
