"""The daemon as a process: a graceful stop loses nothing accepted, sync survives kill -9."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import orjson
import pytest
import structlog

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient
from tests.tools.toolkit import tsdb
from tests.write.readback import StoredPoint, stored_points
from tsd import daemon as daemon_module
from tsd.config import build_config
from tsd.storage.embedded import EmbeddedStorage
from tsd.uid.service import UidService
from tsd.write.control import SOCKET_NAME, request_write_out

pytestmark = pytest.mark.slow  # daemons in subprocesses, signals, kill -9

T = 1_356_998_400


class TsdProcess:
    """``python -m tsd tsd`` on an ephemeral port; the port is read from its start-up log.
    Its stderr is read on (the log lines): a pipe left full would block the daemon's next
    log line, and with it the daemon. Every daemon a test leaves running (a failed
    assertion) is killed after it (``reap_daemons``): a running child kept the test's
    event loop from closing, and the run hung after the failure."""

    running: ClassVar[set[TsdProcess]] = set()

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()
        self._drain = asyncio.ensure_future(self._read_log())
        TsdProcess.running.add(self)

    async def _read_log(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self.lines.put_nowait(line)

    async def event(self) -> dict[str, Any]:
        """The daemon's next log line."""
        event: dict[str, Any] = orjson.loads(await self.lines.get())
        return event

    async def exited(self) -> int:
        await self._drain
        TsdProcess.running.discard(self)
        return await self.process.wait()

    @classmethod
    async def start(cls, data_dir: Path, *flags: str) -> TsdProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tsd",
            "tsd",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--auto-metric",
            "--data-dir",
            str(data_dir),
            "--set",
            "tsd.logging.format=json",
            "--set",
            "tsd.storage.flush_interval=3600000",  # only sync, size or a stop flush
            *flags,
            stderr=asyncio.subprocess.PIPE,
            cwd=data_dir.parent,
        )
        assert process.stderr is not None
        while line := await process.stderr.readline():
            event = orjson.loads(line)
            if event["event"] == "daemon.started":
                return cls(process, int(event["port"]))
        raise AssertionError(f"tsd exited with {await process.wait()} before starting")

    async def stop(self, signum: int) -> int:
        self.process.send_signal(signum)
        return await self.exited()


@pytest.fixture(autouse=True)
async def reap_daemons() -> AsyncIterator[None]:
    yield
    for tsd in list(TsdProcess.running):
        if tsd.process.returncode is None:
            await tsd.stop(signal.SIGKILL)
        TsdProcess.running.discard(tsd)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


async def read_store(data_dir: Path) -> list[StoredPoint]:
    config = build_config({"tsd.storage.data_dir": str(data_dir)})
    storage = EmbeddedStorage(data_dir)
    try:
        return await stored_points(storage, config.storage, UidService(storage, config))
    finally:
        await storage.close()


async def put_http(port: int, path: str, points: list[dict[str, object]]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}{path}", data=orjson.dumps(points)) as response,
    ):
        return response.status


def points(metric: str, count: int) -> list[dict[str, object]]:
    return [
        {"metric": metric, "timestamp": T + i, "value": i, "tags": {"host": "a"}}
        for i in range(count)
    ]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_graceful_stop_loses_nothing_accepted(data_dir: Path, signum: int) -> None:
    tsd = await TsdProcess.start(data_dir)
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"".join(b"put tel.m %d %d host=a\n" % (T + i, i) for i in range(500)))
    assert await client.sync() == []  # handled: buffered in the writer, not yet stored
    assert await put_http(tsd.port, "/api/put", points("http.m", 500)) == 204
    assert await tsd.stop(signum) == 0
    await client.close()
    stored = await read_store(data_dir)
    assert len([p for p in stored if p.metric == "tel.m"]) == 500
    assert len([p for p in stored if p.metric == "http.m"]) == 500
    # A restart reads the same store and keeps the same UIDs.
    tsd = await TsdProcess.start(data_dir)
    assert await put_http(tsd.port, "/api/put?sync", points("tel.m", 501)[500:]) == 204
    assert await tsd.stop(signal.SIGTERM) == 0
    assert len(await read_store(data_dir)) == 1001


async def test_synced_points_survive_kill_9(data_dir: Path) -> None:
    tsd = await TsdProcess.start(data_dir)
    assert await put_http(tsd.port, "/api/put?sync", points("sync.m", 300)) == 204
    # acknowledged with sync: visible to queries at once (in the head)
    assert await query_count(tsd.port, "sync.m") == 300
    assert await tsd.stop(signal.SIGKILL) == -signal.SIGKILL
    # the head's points are in the log: the restart replays them (and answers them) ...
    tsd = await TsdProcess.start(data_dir)
    assert await query_count(tsd.port, "sync.m") == 300
    assert await tsd.stop(signal.SIGTERM) == 0
    # ... and a clean stop writes them out, one compacted cell per row
    stored = await read_store(data_dir)
    assert [p.value for p in stored] == list(range(300))
    assert not any((data_dir / "wal").glob("*.wal"))


async def query_count(port: int, metric: str) -> int:
    """The points /api/query answers for ``metric`` (every series summed) since T."""
    url = f"http://127.0.0.1:{port}/api/query?start={T}&m=sum:{metric}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        answer = orjson.loads(await response.read())
    return sum(len(series["dps"]) for series in answer)


async def stat(port: int, metric: str) -> int:
    """The sum of a counter over its tags (the daemon's /api/stats)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/api/stats") as response,
    ):
        records = orjson.loads(await response.read())
    return sum(int(r["value"]) for r in records if r["metric"] == metric)


async def logged_cells(port: int) -> int:
    """The cells the daemon's write-ahead log has written and fsynced (its /api/stats)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/api/stats") as response,
    ):
        records = orjson.loads(await response.read())
    return sum(
        int(r["value"])
        for r in records
        if r["metric"] == "tsd.wal.cells" and r["tags"].get("type") == "synced"
    )


@pytest.mark.parametrize("workers", [1, 3], ids=["one process", "telnet workers"])
async def test_acknowledged_points_survive_kill_9_through_the_log(
    data_dir: Path, workers: int
) -> None:
    """Acknowledged without sync and logged (at most tsd.storage.wal.sync_interval after
    the put; here waited for through /api/stats), or acknowledged with sync: all there
    after kill -9 and a restart, which replays the log. With telnet workers (every core),
    the telnet points arrive encoded by the worker, and the same holds."""
    tsd = await TsdProcess.start(
        data_dir,
        "--set",
        "tsd.storage.wal.sync_interval=50",
        "--set",
        f"tsd.network.worker_threads={workers}",
    )
    if workers > 1:
        while (await tsd.event())["event"] != "workers.ready":
            pass
    client = await TelnetClient.connect(tsd.port)
    lines = [b"put tel.m %d %d host=a\n" % (T + i, i) for i in range(500)]
    await client.send(lines[0])
    assert await client.sync() == []
    assert await client.sync() == []  # a worker has learnt the series by now
    await client.send(b"".join(lines[1:]))
    assert await client.sync() == []
    if workers > 1:
        assert await stat(tsd.port, "tsd.workers.points") == 499
    for _ in range(2000):  # the log's next group commit takes them (an event, polled)
        if await logged_cells(tsd.port) >= 500:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the log never took the points")
    assert await put_http(tsd.port, "/api/put?sync", points("sync.m", 300)) == 204
    assert await tsd.stop(signal.SIGKILL) == -signal.SIGKILL
    await client.close()
    tsd = await TsdProcess.start(data_dir)
    assert await tsd.stop(signal.SIGTERM) == 0
    stored = await read_store(data_dir)
    assert sorted(p.value for p in stored if p.metric == "tel.m") == list(range(500))
    assert sorted(p.value for p in stored if p.metric == "sync.m") == list(range(300))
    assert not any((data_dir / "wal").glob("*.wal"))  # replayed, stored, dropped


async def test_acknowledged_points_survive_kill_9_between_two_head_write_outs(
    data_dir: Path,
) -> None:
    """Rows written out (a tool asked, through the control socket), then more points for
    the same rows and others, acknowledged with sync, then kill -9: after the restart
    (which replays the log, records already written out included) every point is there
    once."""
    tsd = await TsdProcess.start(data_dir)
    assert await put_http(tsd.port, "/api/put?sync", points("a.m", 200)[:100]) == 204
    assert await put_http(tsd.port, "/api/put?sync", points("b.m", 50)) == 204
    assert await request_write_out(data_dir, 30, lambda: True) == 2  # first write-out
    assert len(await read_store_beside(data_dir)) == 150
    assert await put_http(tsd.port, "/api/put?sync", points("a.m", 200)[100:]) == 204
    assert await put_http(tsd.port, "/api/put?sync", points("c.m", 70)) == 204
    assert await tsd.stop(signal.SIGKILL) == -signal.SIGKILL
    assert (data_dir / SOCKET_NAME).exists()  # left behind
    tsd = await TsdProcess.start(data_dir)
    assert await query_count(tsd.port, "a.m") == 200
    # Second write-out: a.m and c.m, and b.m again when the replay read its record (the
    # log releases a record once written out, but deletes only whole segments): the
    # stored cell and the same points again fold into one.
    assert await request_write_out(data_dir, 30, lambda: True) in (2, 3)
    assert await tsd.stop(signal.SIGTERM) == 0
    stored = await read_store(data_dir)
    for metric, count in (("a.m", 200), ("b.m", 50), ("c.m", 70)):
        assert [p.value for p in stored if p.metric == metric] == list(range(count)), metric
    assert not (data_dir / SOCKET_NAME).exists()


async def test_a_tool_works_on_the_store_of_a_killed_daemon(data_dir: Path) -> None:
    """kill -9 leaves the daemon's socket file; a tool then finds nobody listening and
    nobody holding the store, and reads the store alone (what the daemon wrote out)."""
    tsd = await TsdProcess.start(data_dir)
    assert await put_http(tsd.port, "/api/put?sync", points("a.m", 20)) == 204
    assert await request_write_out(data_dir, 30, lambda: True) == 1
    assert await tsd.stop(signal.SIGKILL) == -signal.SIGKILL
    assert (data_dir / SOCKET_NAME).exists()
    query = await tsdb(
        data_dir.parent, "query", "--data-dir", str(data_dir), str(T), str(T + 60), "sum", "a.m"
    )
    assert query.code == 0, query.err
    assert len(query.out.splitlines()) == 20


async def read_store_beside(data_dir: Path) -> list[StoredPoint]:
    """The store's points, read while a daemon (another process) holds it."""
    config = build_config({"tsd.storage.data_dir": str(data_dir)})
    storage = EmbeddedStorage(data_dir, read_only=True)
    try:
        return await stored_points(storage, config.storage, UidService(storage, config))
    finally:
        await storage.close()


async def test_diediedie_stops_the_process_cleanly(data_dir: Path) -> None:
    tsd = await TsdProcess.start(data_dir)
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put die.m %d 7 host=a\ndiediedie\n" % T)
    assert await client.line() == b"Cleaning up and exiting now."
    assert await tsd.exited() == 0
    await client.close()
    assert [p.value for p in await read_store(data_dir)] == [7]


async def test_bad_config_exits_2(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tsd",
        "tsd",
        "--set",
        "tsd.mode=sideways",
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    _, err = await process.communicate()
    assert process.returncode == 2
    assert b"tsd.mode" in err


async def test_sigquit_logs_where_every_task_waits_and_the_daemon_goes_on(
    data_dir: Path,
) -> None:
    tsd = await TsdProcess.start(data_dir)
    tsd.process.send_signal(signal.SIGQUIT)
    dump = await tsd.event()
    while dump["event"] != "daemon.task_dump":  # lines logged before the signal
        dump = await tsd.event()
    tasks = [await tsd.event() for _ in range(dump["tasks"])]
    assert {task["event"] for task in tasks} == {"daemon.task"}
    # the writer's flush loop is one of them, waiting for its next batch
    assert any("_flush_loop" in task["stack"] for task in tasks), tasks
    assert await put_http(tsd.port, "/api/put?sync", points("after.quit", 3)) == 204
    assert await tsd.stop(signal.SIGTERM) == 0


async def test_a_stop_that_takes_long_logs_where_every_task_waits(
    make_tsd: MakeTsd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_module, "STOP_WATCHDOG_S", 0.0)
    tsd = await make_tsd()
    client = await TelnetClient.connect(tsd.port)  # open: the stop waits for it to go
    with structlog.testing.capture_logs() as logs:
        await tsd.stop()
    await client.close()
    events = [entry["event"] for entry in logs]
    assert events[0] == "daemon.stopping"
    assert events[-1] == "daemon.stopped"
    assert "daemon.task_dump" in events
    stacks = [entry["stack"] for entry in logs if entry["event"] == "daemon.task"]
    assert any("_stop_in_order" in stack for stack in stacks), stacks
