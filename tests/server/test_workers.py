"""Telnet on every core (tsd.network.worker_threads): connections served by a worker
process keep the daemon's replies, order and acknowledgements; a worker that dies is
replaced; with 1 the daemon serves every connection itself."""

from __future__ import annotations

import os
import signal

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, eventually
from tsd.daemon import Daemon
from tsd.server.workers import RemoteTelnet, WorkerPool

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
