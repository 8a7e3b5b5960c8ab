"""The daemon's control socket (tsd.write.control): a real daemon, its real Unix socket.

A tool beside the daemon asks it to write out every point it acknowledged; the daemon's
head is then empty and the store holds the rows, as compacted cells. The subprocess side
(a killed daemon's socket left behind) is in test_lifecycle.py.
"""

from __future__ import annotations

import asyncio
import socket
import stat
from pathlib import Path

import aiohttp
import pytest

from tests.server.conftest import MakeTsd
from tests.tools.toolkit import tsdb
from tsd.codec.const import FAMILY
from tsd.daemon import Daemon
from tsd.errors import StorageUnavailable
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.write.control import SOCKET_NAME, request_write_out

HOUR = 1_356_998_400


async def put_sync(daemon: Daemon, body: list[dict[str, object]]) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=body) as response,
    ):
        assert response.status == 204, await response.text()


def points(metric: str, start: int, count: int) -> list[dict[str, object]]:
    return [
        {"metric": metric, "timestamp": HOUR + i, "value": i, "tags": {"h": "a"}}
        for i in range(start, start + count)
    ]


async def stored_cells(daemon: Daemon) -> list[tuple[bytes, bytes]]:
    """(row key, qualifier) of every data cell the store holds."""
    table = daemon.config.storage.data_table
    return [
        (row.key, cell.qualifier)
        async for row in daemon.storage.scan(table, ScanSpec(families=(FAMILY,)))
        for cell in row.cells
    ]


async def test_flush_writes_the_head_out_as_compacted_cells(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    data_dir = daemon.config.storage.data_dir
    await put_sync(daemon, points("a.m", 0, 30) + points("b.m", 0, 5))
    head = daemon.writer.head
    assert head is not None
    assert len(head.head) == 2  # acknowledged: in the head, not in the store
    assert await stored_cells(daemon) == []
    path = Path(data_dir) / SOCKET_NAME
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    assert await request_write_out(data_dir, 10, lambda: True) == 2
    assert len(head.head) == 0
    cells = await stored_cells(daemon)
    assert len(cells) == 2  # one compacted cell per row
    assert sorted(len(q) for _, q in cells) == [5 * 2, 30 * 2]
    # Nothing left: the next request writes nothing; a late point then merges into the
    # stored cell when it is written out, as any late point does.
    assert await request_write_out(data_dir, 10, lambda: True) == 0
    await put_sync(daemon, points("a.m", 30, 1))
    assert await request_write_out(data_dir, 10, lambda: True) == 1
    cells = await stored_cells(daemon)
    assert sorted(len(q) for _, q in cells) == [5 * 2, 31 * 2]
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{daemon.port}/api/query?start={HOUR}&m=sum:a.m") as reply,
    ):
        answer = await reply.json()
    assert answer[0]["dps"] == {str(HOUR + i): i for i in range(31)}


async def test_unknown_requests_are_answered_and_the_channel_goes_on(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    path = Path(daemon.config.storage.data_dir) / SOCKET_NAME
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(b"compact\nflush\n" + b"x" * 1000 + b"\n")
    assert await reader.readline() == b"error unknown request: compact\n"
    assert await reader.readline() == b"ok 0\n"
    assert await reader.readline() == b""  # a line past the limit: the connection is closed
    writer.close()
    assert await request_write_out(daemon.config.storage.data_dir, 10, lambda: True) == 0


async def test_the_socket_goes_with_a_clean_stop(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    data_dir = daemon.config.storage.data_dir
    await daemon.stop()
    assert not (Path(data_dir) / SOCKET_NAME).exists()
    assert await request_write_out(data_dir, 10, lambda: False) is None


async def test_no_daemon_and_a_stale_socket_file(tmp_path: Path) -> None:
    """A socket file nobody listens on (a killed daemon's) and nobody holding the store:
    no daemon runs, the tool goes on alone."""
    sock_path = tmp_path / SOCKET_NAME
    stale_socket(sock_path)
    assert sock_path.exists()
    assert await request_write_out(tmp_path, 10, lambda: False) is None


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on, as a killed daemon leaves it."""
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))  # bound, never listening, then closed: refused


@pytest.mark.slow  # the CLI in a subprocess
async def test_a_store_held_by_a_silent_daemon_stops_the_tool(tmp_path: Path) -> None:
    """The store's lock held (as a daemon holds it) and a socket file nobody answers on (a
    daemon stopping, or started over a killed one's file and stuck before binding): the
    tool waits its timeout, then exits 3 without touching the store."""
    data_dir = tmp_path / "data"
    config = tmp_path / "opentsdb.conf"
    config.write_text(f"tsd.storage.data_dir = {data_dir}\ntsd.storage.head.flush_timeout = 1\n")
    holder = EmbeddedStorage(data_dir)  # takes the lock, as the daemon does
    stale_socket(data_dir / SOCKET_NAME)
    try:
        done = await tsdb(tmp_path, "query", "--config", str(config), f"{HOUR}", "sum", "a.m")
        with pytest.raises(StorageUnavailable, match="did not write out"):
            await request_write_out(data_dir, 0.2, lambda: True)
    finally:
        await holder.close()
    assert done.code == 3, done.err
    assert "did not write out its points within 1 s (tsd.storage.head.flush_timeout)" in done.err


async def test_a_store_held_without_a_control_socket_is_shared(tmp_path: Path) -> None:
    """The lock held by a process without a control socket (an older tsd; compact-store):
    the tool goes on, as before there was a socket (tests/tools/test_import.py
    test_a_store_held_by_a_daemon_is_shared runs the CLI so)."""
    assert await request_write_out(tmp_path, 10, lambda: True) is None


async def test_a_data_dir_too_deep_for_a_socket_address(make_tsd: MakeTsd, tmp_path: Path) -> None:
    """sun_path holds 107 bytes: a deeper data directory is reached through
    /proc/self/fd, by the daemon binding and by the tool connecting."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "data"
    assert len(str(deep / SOCKET_NAME)) > 108
    daemon = await make_tsd(**{"tsd.storage.data_dir": str(deep)})
    await put_sync(daemon, points("deep.m", 0, 3))
    assert stat.S_ISSOCK((deep / SOCKET_NAME).stat().st_mode)
    assert await request_write_out(deep, 10, lambda: True) == 1
    assert len(await stored_cells(daemon)) == 1
