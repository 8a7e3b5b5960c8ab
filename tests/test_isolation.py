"""A user's daemon beside the test suite: nothing in its directory changes (issue 25).

A developer runs ``scripts/tsd`` in the checkout (its store: ``./data`` there) while the
tests run. This test builds that situation without touching the real checkout's data: a
copy of the checkout's test layout in a temporary directory, where

1. a daemon starts as ``scripts/tsd`` starts it (``tsdb tsd --auto-metric``, the working
   directory the copy's root, so its store is the copy's ``./data``) and takes points;
2. pytest runs, in the copy, the tests that start daemons and tools, in process and in
   subprocesses, on both backends (:data:`BESIDE`), on this run's HBase;
3. afterwards every file of the daemon's directory is as it was (inode, size, mtime,
   content), the daemon answers every point, and so does it after a restart.

The daemon keeps every point in its head and write-ahead log (``tsd.storage.head.grace`` of
a day): the state a test daemon taking the log would replay and delete, and a daemon that
writes nothing by itself meanwhile, so that any change in its directory is someone else's.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from tests.hbase.tsd_process import free_port, wait_ready
from tests.hbase_harness import ROOT, HBaseServer
from tests.isolation import CHECKOUT_DEFAULTS
from tsd.config import StorageConfig

#: run beside the daemon: a daemon in process on HBase that took the default data directory
#: before issue 25 (test_rollup_parity's module fixture, with OpenTSDB on the same tables;
#: test_interop's is the same), daemons in subprocesses on HBase (tests/hbase/tsd_process.py,
#: two on one directory), on the embedded store (test_lifecycle: kill -9, restarts;
#: test_startup_errors: the defaults in a fresh directory), tools beside a daemon
BESIDE = (
    "tests/hbase/test_two_tsds.py::test_a_second_tsd_on_the_same_data_directory_is_refused",
    "tests/hbase/test_rollup_parity.py::test_api_rollup_writes_the_cells_opentsdb_writes",
    "tests/server/test_lifecycle.py",
    "tests/server/test_startup_errors.py",
    "tests/server/test_tools_beside_daemon.py",
)
#: what the copy needs to run them (hbase/: OpenTSDB's jars, linked, never written here)
COPIED = ("tests", "config", "scripts", "pyproject.toml")
LINKED = ("hbase",)

HOUR = 3600
SERIES = 10
POINTS_PER_SERIES = 50


def checkout_copy(into: Path) -> Path:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, into / name)
    for name in LINKED:
        (into / name).symlink_to(ROOT / name)
    return into


def snapshot(directory: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``directory``: (inode, size, mtime, content hash) by path."""
    entries = {}
    for path in sorted(directory.rglob("*")):
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"
        entries[str(path.relative_to(directory))] = (
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            digest,
        )
    return entries


async def settled(directory: Path) -> dict[str, tuple[int, int, int, str]]:
    """The snapshot once two taken a second apart agree (the daemon is done writing)."""
    before = snapshot(directory)
    for _ in range(60):
        await asyncio.sleep(1.0)
        now = snapshot(directory)
        if now == before:
            return now
        before = now
    raise AssertionError(f"{directory} never settled")


def points(now: int) -> list[dict[str, object]]:
    """Points in this hour and the two before (none older than the daemon's grace)."""
    start = now - 2 * HOUR
    step = 2 * HOUR // POINTS_PER_SERIES
    return [
        {
            "metric": "user.data",
            "timestamp": start + i * step,
            "value": s * 1000 + i,
            "tags": {"host": f"h{s}"},
        }
        for s in range(SERIES)
        for i in range(POINTS_PER_SERIES)
    ]


async def read_back(
    http: aiohttp.ClientSession, port: int, now: int
) -> dict[str, dict[str, float]]:
    query = {
        "start": now - 3 * HOUR,
        "end": now + 60,
        "queries": [{"metric": "user.data", "aggregator": "none", "tags": {"host": "*"}}],
    }
    async with http.post(f"http://127.0.0.1:{port}/api/query", json=query) as reply:
        assert reply.status == 200, await reply.text()
        answer = await reply.json()
    return {series["tags"]["host"]: series["dps"] for series in answer}


def expected(written: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    series: dict[str, dict[str, float]] = {}
    for point in written:
        tags = point["tags"]
        assert isinstance(tags, dict)
        series.setdefault(tags["host"], {})[str(point["timestamp"])] = point["value"]  # type: ignore[assignment]
    return series


@asynccontextmanager
async def users_daemon(checkout: Path, port: int, log: Path) -> AsyncIterator[int]:
    """``scripts/tsd``'s daemon (its ``exec`` line) in ``checkout``, on ``port``."""
    tsdb = Path(sys.executable).parent / "tsdb"
    argv = [str(tsdb), "tsd", "--auto-metric", "--bind", "127.0.0.1", "--port", str(port)]
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, "--set", "tsd.storage.head.grace=86400", cwd=checkout, stdout=out, stderr=out
        )
    try:
        await wait_ready(process, port, log)
        yield port
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        status = await asyncio.wait_for(process.wait(), 120)
        assert status == 0, (await asyncio.to_thread(log.read_text))[-5000:]


@pytest.mark.hbase
@pytest.mark.timeout(1200)
async def test_a_users_daemon_keeps_its_data_while_the_tests_run(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    checkout = checkout_copy(tmp_path / "checkout")
    users_data = checkout / "data"  # scripts/tsd's default store
    port, log = free_port(), tmp_path / "users-tsd.log"
    now = int(time.time())
    written = points(now)
    async with aiohttp.ClientSession() as http:
        async with users_daemon(checkout, port, log):
            url = f"http://127.0.0.1:{port}/api/put?sync"
            async with http.post(url, json=written) as reply:
                assert reply.status == 204, await reply.text()
            before = await settled(users_data)
            assert "wal" in {Path(name).parts[0] for name in before}, sorted(before)

            env = {
                **os.environ,
                "TSD_HBASE_THRIFT": f"{hbase_server.thrift_host}:{hbase_server.thrift_port}",
                "TSD_HBASE_ZK_PORT": str(hbase_server.zk_port),
                "TSD_REQUIRE_HBASE": "1",
            }
            inner = await asyncio.create_subprocess_exec(
                *[sys.executable, "-m", "pytest", *BESIDE, "-q", "-p", "no:cacheprovider"],
                *["--basetemp", str(tmp_path / "inner")],
                cwd=checkout,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            output = (await inner.communicate())[0].decode(errors="replace")
            assert inner.returncode == 0, output[-8000:]
            assert " passed" in output, output[-3000:]
            assert " skipped" not in output, output[-3000:]

            assert snapshot(users_data) == before
            assert await read_back(http, port, now) == expected(written)
        # and after a restart: the log and the store still hold every point
        async with users_daemon(checkout, port, log):
            assert await read_back(http, port, now) == expected(written)


# -- the session's guard (tests/isolation.py) -------------------------------------------------


def test_the_session_runs_where_the_default_data_directory_cannot_be_made() -> None:
    here = Path.cwd()
    assert here != ROOT
    assert Path(StorageConfig().data_dir).resolve() == here / "data"
    assert (here / "data").is_file()  # so a store or log there fails at once
    with pytest.raises(OSError, match="Not a directory"):
        (Path(StorageConfig().data_dir) / "wal").mkdir(parents=True)


def connect(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))


@pytest.mark.parametrize(
    "touch",
    [
        pytest.param(lambda path: os.listdir(path), id="list"),
        pytest.param(lambda path: path.open("rb"), id="open"),
        pytest.param(lambda path: path.mkdir(), id="mkdir"),
        pytest.param(lambda path: os.remove(path), id="remove"),
        pytest.param(lambda path: os.rename(path, path.with_name("x")), id="rename"),
        pytest.param(lambda path: shutil.rmtree(path), id="rmtree"),
        pytest.param(connect, id="control-socket"),
    ],
)
def test_the_checkouts_data_directory_is_refused(touch: Callable[[Path], object]) -> None:
    """Refused before anything happens. On a path that is not there (under a directory
    that is not there), so that a broken guard gets FileNotFoundError, never a change."""
    data = ROOT / StorageConfig().data_dir
    assert str(data) in CHECKOUT_DEFAULTS
    absent = data / uuid.uuid4().hex / "absent"
    with pytest.raises(PermissionError, match="test isolation: .* refused"):
        touch(absent)
