"""A full disk (issue 13 item 9): clear errors per protocol, nothing acknowledged lost,
recovery without a restart, and every acknowledged point back after kill -9.

Two ways to fill the disk: a real 24 MiB tmpfs under a daemon process (needs ``mount``,
i.e. root with CAP_SYS_ADMIN; skipped otherwise), and, always, injected faults: the
write-ahead log's file writes failing with ENOSPC or EROFS (the log is where the embedded
engine's points are durable before the head writes them out), and the embedded store with
LMDB's own ENOSPC error injected at its put (py-lmdb raises ``lmdb.DiskError`` for ENOSPC,
``lmdb.MapFullError`` for a full map; both are mapped to :class:`StorageFull`) under the
head's write-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
import lmdb
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, stored
from tests.server.test_lifecycle import TsdProcess, read_store
from tests.tmpfs import small_tmpfs
from tsd.errors import StorageFull, StorageReadOnly
from tsd.storage.base import Mutation, Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.embedded.storage import map_lmdb_error
from tsd.wal import log as wal_log
from tsd.write.batch_writer import WriterLimits

T0 = 1_700_000_000


def batch(metric: str, start: int, count: int) -> list[dict[str, object]]:
    return [
        {"metric": metric, "timestamp": T0 + start + i, "value": start + i, "tags": {"h": "a"}}
        for i in range(count)
    ]


async def put(port: int, path: str, points: list[dict[str, object]]) -> tuple[int, object]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}{path}", data=orjson.dumps(points)) as reply,
    ):
        body = await reply.read()
        return reply.status, orjson.loads(body) if body else None


# -- LMDB's errors, mapped ----------------------------------------------------------------------


def _lmdb(kind: type[lmdb.Error], code: int) -> lmdb.Error:
    """The error as py-lmdb's C extension raises it: one "what: strerror" text."""
    return kind(f"mdb_txn_commit: {os.strerror(code)}")


@pytest.mark.parametrize(
    ("raised", "mapped", "status"),
    [
        pytest.param(_lmdb(lmdb.DiskError, errno.ENOSPC), StorageFull, 507, id="enospc"),
        pytest.param(lmdb.MapFullError("mdb_put: MDB_MAP_FULL"), StorageFull, 507, id="map"),
        pytest.param(_lmdb(lmdb.Error, errno.EDQUOT), StorageFull, 507, id="quota"),
        pytest.param(_lmdb(lmdb.Error, errno.EROFS), StorageReadOnly, 503, id="erofs"),
        pytest.param(_lmdb(lmdb.ReadonlyError, errno.EACCES), StorageReadOnly, 503, id="eacces"),
    ],
)
def test_lmdb_errors_map_to_clear_storage_errors(
    raised: lmdb.Error, mapped: type[Exception], status: int
) -> None:
    error = map_lmdb_error(raised)
    assert type(error) is mapped
    assert getattr(error, "status", None) == status


# -- fault injection: every protocol, in process ------------------------------------------------


class LogDisk:
    """The write-ahead log's file writes failing as a full (or read-only) disk fails them,
    on demand: the fault is injected at the one function that writes a segment's bytes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failure: int | None = None
        real = wal_log._write_all

        def write_all(fd: int, data: bytes) -> None:
            if self.failure is not None:
                raise OSError(self.failure, os.strerror(self.failure))
            real(fd, data)

        monkeypatch.setattr(wal_log, "_write_all", write_all)


@pytest.fixture
def log_disk(monkeypatch: pytest.MonkeyPatch) -> LogDisk:
    return LogDisk(monkeypatch)


class DiskThatFills(EmbeddedStorage):
    """The embedded store whose data writes fail as LMDB fails on a full disk (or on a
    filesystem gone read-only), on demand."""

    full = False
    failure: lmdb.Error = _lmdb(lmdb.DiskError, errno.ENOSPC)

    async def put(self, table: str, puts: Sequence[Put]) -> None:
        if self.full and table == "tsdb":
            raise map_lmdb_error(self.failure)
        await super().put(table, puts)

    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        if self.full and table == "tsdb":
            raise map_lmdb_error(self.failure)
        await super().mutate(table, mutations)


@pytest.mark.slow
async def test_full_disk_sequence_with_injected_enospc(
    make_tsd: MakeTsd, log_disk: LogDisk
) -> None:
    daemon = await make_tsd(writer_limits=WriterLimits(retry_delays_s=()))
    port = daemon.port
    assert await put(port, "/api/put?sync", batch("m", 0, 100)) == (204, None)
    log_disk.failure = errno.ENOSPC
    # sync: the refusal is the status, with or without a summary
    status, body = await put(port, "/api/put?sync", batch("m", 100, 50))
    assert status == 507, ("nosync", status)
    assert isinstance(body, dict)
    assert body["error"]["message"] == "Storage refused the write: 50 data points not stored"
    assert "No space left" in body["error"]["details"]
    assert await put(port, "/api/put?sync&summary", batch("m", 150, 50)) == (
        507,
        {"success": 0, "failed": 50},
    )
    # without sync: no 204 for points that cannot be stored while the disk is full
    status, body = await put(port, "/api/put", batch("m", 200, 50))
    assert status == 507, ("nosync", status)
    # telnet: an error line per failed batch, naming the full disk and how many of the
    # connection's points it lost (no "HBase error" on the embedded store)
    client = await TelnetClient.connect(port)
    await client.send(b"".join(b"put m %d 1 h=a\n" % (T0 + 250 + i) for i in range(30)))
    lost = 0
    while lost < 30:
        line = await client.line()
        match = re.fullmatch(
            rb"put: storage error: write-ahead log: No space left on device: "
            rb"(\d+) data points? not stored",
            line,
        )
        assert match is not None, line
        lost += int(match[1])
    assert lost == 30
    await client.close()
    assert daemon.registry.counter("datapoints.dropped", type="storage_errors").value >= 180
    # space returns: the next put is logged and stored, no restart
    log_disk.failure = None
    assert await put(port, "/api/put?sync", batch("m", 300, 10)) == (204, None)
    assert daemon.writer.storage_refusal is None
    assert await put(port, "/api/put", batch("m", 310, 10)) == (204, None)
    values = sorted(int(p.value) for p in await stored(daemon))
    assert values == list(range(100)) + list(range(300, 320))
    await daemon.stop()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_full_store_keeps_points_in_the_head_and_log_until_space_returns(
    make_tsd: MakeTsd, tmp_path: Path
) -> None:
    """The store refuses the head's write-out: the rows stay in the head (queries see
    them) and in the log; past the head's bound new points are refused (507) rather
    than held in memory; once space returns the rows are written out."""
    disk = DiskThatFills(tmp_path / "store")
    try:
        daemon = await make_tsd(storage=disk, **{"tsd.storage.head.max_bytes": str(1 << 20)})
        sink = daemon.writer.head
        assert sink is not None
        assert await put(daemon.port, "/api/put?sync", batch("m", 0, 100)) == (204, None)
        disk.full = True
        with pytest.raises(StorageFull):
            await sink.flush_all()
        assert len(sink.head) == 1  # still there, and still answered
        query = f"http://127.0.0.1:{daemon.port}/api/query?start={T0}&m=sum:m"
        async with aiohttp.ClientSession() as http, http.get(query) as reply:
            assert len((await reply.json())[0]["dps"]) == 100
        # Fill the head past its bound while the store refuses: then puts are refused.
        start, status = 100, 204
        while status == 204:
            status, _ = await put(daemon.port, "/api/put?sync", big_batch(start, 5000))
            start += 5000
            with contextlib.suppress(StorageFull):
                await sink.flush_due()
        assert status == 507, ("nosync", status)
        disk.full = False
        await sink.flush_all()
        assert not len(sink.head)
        assert status == 507, ("nosync", status)
        assert await put(daemon.port, "/api/put?sync", batch("m", 100, 10)) == (204, None)
        values = sorted(int(p.value) for p in await stored(daemon) if p.metric == "m")
        assert values == list(range(110))
        await daemon.stop()
    finally:
        await disk.close()


def big_batch(start: int, count: int) -> list[dict[str, object]]:
    """Points of many series (each a row of the head)."""
    return [
        {"metric": "big", "timestamp": T0, "value": i, "tags": {"h": f"h{start + i}"}}
        for i in range(count)
    ]


# -- a real full tmpfs under a daemon process, then kill -9 ------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "24m") as mount_point:
        yield mount_point


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file."""
    filler = disk / "filler"
    free = os.statvfs(disk)
    with filler.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, free.f_bavail * free.f_frsize)
    assert os.statvfs(disk).f_bavail == 0
    return filler


@pytest.mark.slow  # a daemon process, a real tmpfs, kill -9
async def test_full_tmpfs_then_kill_9_keeps_every_acknowledged_point(small_disk: Path) -> None:
    data_dir = small_disk / "data"
    tsd = await TsdProcess.start(data_dir)
    assert tsd.process.stderr is not None
    drain = asyncio.create_task(tsd.process.stderr.read())  # the daemon logs each failure
    acknowledged: list[int] = []
    port = tsd.port
    assert await put(port, "/api/put?sync", batch("m", 0, 1000)) == (204, None)
    acknowledged += range(1000)
    filler = fill(small_disk)
    # Puts that need new pages of the LMDB file are refused; retry until one is (the file
    # may still have free pages for the first ones).
    start = 1000
    for _ in range(50):
        status, _ = await put(port, "/api/put?sync", batch("m", start, 5000))
        if status == 204:
            acknowledged += range(start, start + 5000)
        else:
            assert status == 507
            break
        start += 5000
    else:
        raise AssertionError("a full disk never refused a put")
    start += 5000
    # no sync: refused too (more than the log's last page has room for)
    status, _ = await put(port, "/api/put", batch("m", start, 5000))
    assert status == 507
    start += 5000
    # Space returns: stored again without a restart.
    filler.unlink()
    assert await put(port, "/api/put?sync", batch("m", start, 1000)) == (204, None)
    acknowledged += range(start, start + 1000)
    tsd.process.send_signal(signal.SIGKILL)
    assert await tsd.process.wait() == -signal.SIGKILL
    drain.cancel()
    # The points are in the log (the head held them): a restart replays it, a clean stop
    # writes the head's rows out.
    tsd = await TsdProcess.start(data_dir)
    assert await tsd.stop(signal.SIGTERM) == 0
    values = sorted(int(p.value) for p in await read_store(data_dir))
    assert values == sorted(acknowledged)


async def test_read_only_filesystem_answers_503_and_recovers(
    make_tsd: MakeTsd, log_disk: LogDisk
) -> None:
    daemon = await make_tsd(writer_limits=WriterLimits(retry_delays_s=()))
    log_disk.failure = errno.EROFS
    status, body = await put(daemon.port, "/api/put?sync", batch("m", 0, 10))
    assert status == 503
    assert isinstance(body, dict)
    assert "Read-only file system" in body["error"]["details"]
    log_disk.failure = None
    assert await put(daemon.port, "/api/put?sync", batch("m", 10, 10)) == (204, None)
    assert [int(p.value) for p in await stored(daemon)] == list(range(10, 20))
    await daemon.stop()
