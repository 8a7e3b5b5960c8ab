"""The daemon as a process: a graceful stop loses nothing accepted, sync survives kill -9."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
import structlog

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient
from tests.write.readback import StoredPoint, stored_points
from tsd import daemon as daemon_module
from tsd.config import build_config
from tsd.storage.embedded import EmbeddedStorage
from tsd.uid.service import UidService

pytestmark = pytest.mark.slow  # daemons in subprocesses, signals, kill -9

T = 1_356_998_400


class TsdProcess:
    """``python -m tsd tsd`` on an ephemeral port; the port is read from its start-up log."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

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
        assert self.process.stderr is not None
        await self.process.stderr.read()
        return await self.process.wait()


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


async def test_acknowledged_points_survive_kill_9_through_the_log(data_dir: Path) -> None:
    """Acknowledged without sync and logged (at most tsd.storage.wal.sync_interval after
    the put; here waited for through /api/stats), or acknowledged with sync: all there
    after kill -9 and a restart, which replays the log."""
    tsd = await TsdProcess.start(data_dir, "--set", "tsd.storage.wal.sync_interval=50")
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"".join(b"put tel.m %d %d host=a\n" % (T + i, i) for i in range(500)))
    assert await client.sync() == []
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


async def test_diediedie_stops_the_process_cleanly(data_dir: Path) -> None:
    tsd = await TsdProcess.start(data_dir)
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put die.m %d 7 host=a\ndiediedie\n" % T)
    assert await client.line() == b"Cleaning up and exiting now."
    assert tsd.process.stderr is not None
    await tsd.process.stderr.read()
    assert await tsd.process.wait() == 0
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
    assert tsd.process.stderr is not None
    dump = orjson.loads(await tsd.process.stderr.readline())
    while dump["event"] != "daemon.task_dump":  # lines logged before the signal
        dump = orjson.loads(await tsd.process.stderr.readline())
    tasks = [orjson.loads(await tsd.process.stderr.readline()) for _ in range(dump["tasks"])]
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
