"""The tools on the embedded store of a daemon that is running and writing to it.

A real daemon (in this process) takes points over /api/put, creating new metrics, for as long
as a tool runs in its own process on the same data directory. Each test checks the tool's
result in storage and in the daemon's answers, that every point the daemon acknowledged is
stored, and that UIDs assigned by the two processes at once never collide.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.server.conftest import MakeTsd, make_tsd  # noqa: F401 - the fixture
from tests.tools.toolkit import Result, tsdb
from tsd.codec import KeyLayout, base_time_for, encode_row_key
from tsd.codec.qualifier import encode_ms_qualifier
from tsd.daemon import Daemon
from tsd.storage.base import Put

pytestmark = pytest.mark.slow  # the CLI in subprocesses

T0 = 1_700_000_000
LIVE = 8  # metrics the daemon's writer creates while a tool runs


class LiveWriter:
    """Puts points through the daemon (new metrics included) until stopped."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.acked = 0
        self.stop = asyncio.Event()
        self.rounds = asyncio.Event()  # set once a round has been acknowledged

    async def run(self) -> None:
        async with aiohttp.ClientSession() as http:
            i = 0
            while not self.stop.is_set():
                points = [
                    {"metric": f"live.m{(i + j) % LIVE}", "timestamp": T0 + i + j,
                     "value": i + j, "tags": {"host": "a"}}
                    for j in range(20)
                ]  # fmt: skip
                async with http.post(self.base + "/api/put?sync", json=points) as reply:
                    assert reply.status == 204, await reply.text()
                self.acked += len(points)
                i += len(points)
                self.rounds.set()


@asynccontextmanager
async def writing_daemon(make_tsd: MakeTsd) -> AsyncIterator[tuple[Daemon, LiveWriter]]:  # noqa: F811
    daemon = await make_tsd()
    writer = LiveWriter(f"http://127.0.0.1:{daemon.port}")
    task = asyncio.create_task(writer.run())
    await writer.rounds.wait()  # the daemon is writing before the tool starts
    try:
        yield daemon, writer
    finally:
        writer.stop.set()
        await task


def data_dir(daemon: Daemon) -> str:
    return daemon.config.storage.data_dir


async def tool(daemon: Daemon, cwd: Path, *args: str, stdin: bytes | None = None) -> Result:
    return await tsdb(cwd, *args, "--data-dir", data_dir(daemon), stdin=stdin)


async def get(daemon: Daemon, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{daemon.port}{path}") as reply,
    ):
        return reply.status, await reply.json(content_type=None)


async def live_points_stored(daemon: Daemon) -> int:
    total = 0
    for m in range(LIVE):
        status, body = await get(daemon, f"/api/query?start={T0 - 1}&m=sum:live.m{m}")
        assert status == 200, body
        total += sum(len(series["dps"]) for series in body)
    return total


async def uid_rows(daemon: Daemon) -> dict[tuple[str, bytes], bytes]:
    """(kind, uid) -> name, from the reverse map (read by ``tsdb dump`` in its own process:
    LMDB allows one opener per process), and a check that the forward map agrees."""
    dumped = await tsdb(Path(data_dir(daemon)).parent, "dump", "--table", "tsdb-uid",
                        "--data-dir", data_dir(daemon))  # fmt: skip
    assert dumped.code == 0, dumped.err
    forward: dict[tuple[str, bytes], bytes] = {}
    reverse: dict[tuple[str, bytes], bytes] = {}
    for line in dumped.out.splitlines():
        _, key, family, qualifier, value = (
            part if i in (0, 2) else bytes.fromhex(part) for i, part in enumerate(line.split("\t"))
        )
        assert isinstance(key, bytes)
        assert isinstance(qualifier, bytes)
        assert isinstance(value, bytes)
        kind = qualifier.decode()
        if family == "id" and key != b"\x00":
            assert (kind, value) not in forward, f"UID {value!r} given twice"
            forward[kind, value] = key
        elif family == "name":
            reverse[kind, key] = value
    assert forward == reverse
    return reverse


async def test_import_beside_a_writing_daemon(make_tsd: MakeTsd, tmp_path: Path) -> None:  # noqa: F811
    lines = "".join(f"imported.m{i % 5} {T0 + i} {i} host=b\n" for i in range(2000))
    (tmp_path / "points.txt").write_text(lines)
    async with writing_daemon(make_tsd) as (daemon, writer):
        done = await tool(daemon, tmp_path, "import", "points.txt", "--auto-metric")
        # The daemon answers with what the tool stored, while both run.
        status, body = await get(daemon, f"/api/query?start={T0 - 1}&m=sum:imported.m0")
    assert done.code == 0, done.err
    assert status == 200
    assert [len(series["dps"]) for series in body] == [400]
    assert await live_points_stored(daemon) == writer.acked
    names = await uid_rows(daemon)
    assert {name for (kind, _), name in names.items() if kind == "metrics"} == {
        *(f"imported.m{i}".encode() for i in range(5)),
        *(f"live.m{i}".encode() for i in range(LIVE)),
    }


async def test_mkmetric_and_uid_assign_beside_a_writing_daemon(
    make_tsd: MakeTsd,  # noqa: F811
    tmp_path: Path,
) -> None:
    metrics = [f"tool.m{i}" for i in range(30)]
    async with writing_daemon(make_tsd) as (daemon, writer):
        made = await tool(daemon, tmp_path, "mkmetric", *metrics)
        tagks = await tool(daemon, tmp_path, "uid", "assign", "tagk", "rack", "row")
        status, suggested = await get(daemon, "/api/suggest?type=metrics&q=tool.&max=100")
    assert made.code == 0, made.err
    assert len(made.out.splitlines()) == len(metrics)
    assert tagks.code == 0, tagks.err
    assert status == 200
    assert sorted(suggested) == sorted(metrics)
    assert await live_points_stored(daemon) == writer.acked
    names = await uid_rows(daemon)  # no UID given twice, forward and reverse maps agree
    assert {name.decode() for (kind, _), name in names.items() if kind == "metrics"} >= {
        *metrics,
        *(f"live.m{i}" for i in range(LIVE)),
    }


async def test_uid_rename_and_delete_beside_a_writing_daemon(
    make_tsd: MakeTsd,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with writing_daemon(make_tsd) as (daemon, writer):
        assert (await tool(daemon, tmp_path, "mkmetric", "old.name", "doomed")).code == 0
        renamed = await tool(daemon, tmp_path, "uid", "rename", "metrics", "old.name", "new.name")
        deleted = await tool(daemon, tmp_path, "uid", "delete", "metrics", "doomed")
        # The daemon's cached names go with its caches, as OpenTSDB's TSDs' do.
        assert (await get(daemon, "/api/dropcaches"))[0] == 200
        new_status, _ = await get(daemon, f"/api/query?start={T0}&m=sum:new.name")
        old_status, old = await get(daemon, f"/api/query?start={T0}&m=sum:old.name")
        gone_status, gone = await get(daemon, f"/api/query?start={T0}&m=sum:doomed")
    assert renamed.code == 0, renamed.err
    assert deleted.code == 0, deleted.err
    assert new_status == 200
    assert old_status == 400
    assert old["error"]["message"] == "No such name for 'metrics': 'old.name'"
    assert gone_status == 400
    assert gone["error"]["message"] == "No such name for 'metrics': 'doomed'"
    names = await uid_rows(daemon)
    metric_names = {name for (kind, _), name in names.items() if kind == "metrics"}
    assert b"new.name" in metric_names
    assert not metric_names & {b"old.name", b"doomed"}
    assert await live_points_stored(daemon) == writer.acked


async def test_a_second_daemon_on_the_store_is_still_refused(make_tsd: MakeTsd) -> None:  # noqa: F811
    daemon = await make_tsd()
    second = await tsdb(
        Path(data_dir(daemon)).parent, "tsd", "--port", "0", "--data-dir", data_dir(daemon)
    )
    assert second.code == 3
    assert "is open for writing by another process" in second.err


async def test_query_and_scan_delete_beside_a_writing_daemon(
    make_tsd: MakeTsd,  # noqa: F811
    tmp_path: Path,
) -> None:
    stamps = [T0 + 60 * i for i in range(50)]
    fixed = [
        {"metric": "fixed.m", "timestamp": t, "value": i, "tags": {"host": "c"}}
        for i, t in enumerate(stamps)
    ]
    async with writing_daemon(make_tsd) as (daemon, writer):
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=fixed) as reply,
        ):
            assert reply.status == 204
        span = [str(T0 - 1), str(T0 + 3600)]
        queried = await tool(daemon, tmp_path, "query", *span, "sum", "fixed.m")
        scanned = await tool(daemon, tmp_path, "scan", "--delete", *span, "sum", "fixed.m")
        status, after = await get(daemon, f"/api/query?start={T0 - 1}&m=sum:fixed.m")
    assert queried.code == 0, queried.err
    assert [line.split()[1:3] for line in queried.out.splitlines()] == [
        [str(t * 1000), str(i)]
        for i, t in enumerate(stamps)  # in ms, as OpenTSDB's
    ]
    assert scanned.code == 0, scanned.err
    assert len(scanned.out.splitlines()) == len(fixed)  # --delete prints import lines
    assert status == 200
    assert after == []  # the daemon reads the rows the tool deleted as gone
    assert await live_points_stored(daemon) == writer.acked


async def test_fsck_fix_beside_a_writing_daemon(
    make_tsd: MakeTsd,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with writing_daemon(make_tsd) as (daemon, writer):
        # Corruptions stored through the daemon's own storage (LMDB: one opener a process):
        # a point written twice (seconds and millisecond qualifiers), an orphan row.
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{daemon.port}/api/put?sync",
                json=[{"metric": "fixed.m", "timestamp": T0, "value": 1, "tags": {"host": "c"}}],
            ) as reply,
        ):
            assert reply.status == 204
        layout = KeyLayout.from_storage_config(daemon.config.storage)
        tags = ((await daemon.uids.tagk.get_id("host"), await daemon.uids.tagv.get_id("c")),)
        metric = await daemon.uids.metrics.get_id("fixed.m")
        base = base_time_for(T0)
        key = encode_row_key(layout, metric, base, tags)
        orphan = encode_row_key(layout, b"\x00\x0f\xff", base, tags)
        table = daemon.config.storage.data_table
        await daemon.storage.put(
            table,
            [
                Put(key, "t", encode_ms_qualifier((T0 - base) * 1000, 0), b"\x02"),
                Put(orphan, "t", encode_ms_qualifier(0, 0), b"\x03"),
            ],
        )
        done = await tool(daemon, tmp_path, "fsck", "--full-scan", "--fix-all")
        status, after = await get(daemon, f"/api/query?start={T0 - 1}&m=sum:fixed.m")
        again = await tool(daemon, tmp_path, "fsck", "--full-scan")
    assert done.code == 1, done.err  # it found errors, and fixed them
    assert "Duplicate Datapoints Resolved: 1\n" in done.out
    assert "Orphaned UID Rows Deleted: 1\n" in done.out
    assert status == 200
    assert [series["dps"] for series in after] == [{str(T0): 1}]  # the first stored kept
    assert again.code == 0, again.out
    assert "Total Errors: 0\n" in again.out
    assert await live_points_stored(daemon) == writer.acked
    assert await daemon.storage.get(table, orphan) is None
