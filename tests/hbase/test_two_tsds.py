"""Two tsd processes assigning UIDs at once on one HBase (issue 4, item 8).

Both daemons (``python -m tsd tsd`` with the hbase backend, on the same tables) receive
the same put lines at the same moment: 200 new metrics, 200 new tag keys and 200 new tag
values, plus one tag pair every line shares. Each process resolves new names
concurrently, so both race for every name: an increment of the counter row (a block of
IDs), a plain put of the reverse row, a check-and-put of the forward row; the loser of the
forward check-and-put reads the winner's UID and deletes the reverse row of its own ID (a
gap in the counter; OpenTSDB leaves it). On this machine 60 to 190 of the 200 names of each
kind were lost races in a run.

Afterwards tsdb-uid must give every name exactly one UID and every UID at most one name,
every forward row's UID must map back to its name, no reverse row may be left without its
forward row (``tsdb uid fsck`` and OpenTSDB's ``uid fsck`` both clean), and the data rows
both processes wrote must use only the UIDs the forward rows hold: one row per series,
written identically by both.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tests.hbase.opentsdb import fresh_tables, put_telnet, read_uid_table
from tests.hbase.test_uid_blocks import Fscks
from tests.hbase.tsd_process import START_TIMEOUT_S, free_port, tsd_argv, tsd_process
from tests.hbase_harness import HBaseServer
from tsd.storage.base import ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

pytestmark = pytest.mark.hbase

H0 = 1356998400
NAMES = 200


def put_lines() -> list[str]:
    return [f"put race.metric.{i} {H0 + i} {i} racek{i}=racev{i} shared=both" for i in range(NAMES)]


async def test_two_tsds_assigning_the_same_names_at_once_agree_on_every_uid(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    lines = put_lines()
    async with fresh_tables(hbase_server) as cfg:
        async with (
            tsd_process(cfg, tmp_path / "tsd1.log") as first,
            tsd_process(cfg, tmp_path / "tsd2.log") as second,
        ):
            replies = await asyncio.gather(put_telnet(first, lines), put_telnet(second, lines))
            assert list(replies) == [[], []]
        # Both have stopped, having written every point they accepted.
        storage = HBaseStorage(hbase_settings(cfg))
        try:
            uids = await read_uid_table(storage, cfg)
            async with contextlib.aclosing(storage.scan(cfg.data_table, ScanSpec())) as scan:
                rows = [row async for row in scan]
        finally:
            await storage.close()
        # both fsck tools find nothing: no orphan reverse mapping, no missing one
        fscks = Fscks(hbase_server, cfg, tmp_path / "fsck")
        ours = await fscks.tsd()
        assert ours.code == 0, ours.out
        assert "missing" not in ours.out
        code, theirs = await fscks.opentsdb()
        assert code == 0, theirs
        assert "missing" not in theirs

    assert uids.problems() == []
    gaps = 0
    for kind, names in [
        ("metrics", {f"race.metric.{i}" for i in range(NAMES)}),
        ("tagk", {f"racek{i}" for i in range(NAMES)} | {"shared"}),
        ("tagv", {f"racev{i}" for i in range(NAMES)} | {"both"}),
    ]:
        assert {name.decode() for name in uids.forward[kind]} == names
        # an ID of a lost race is a gap: its reverse mapping removed by the loser
        assert uids.leaked(kind) == {}, kind
        assert uids.counters[kind] >= len(names), kind
        gaps += uids.counters[kind] - len(names)
    assert gaps > 0, "no race was lost: nothing was checked"

    def row_key(i: int) -> bytes:
        pairs = sorted(
            [
                uids.uid("tagk", f"racek{i}") + uids.uid("tagv", f"racev{i}"),
                uids.uid("tagk", "shared") + uids.uid("tagv", "both"),
            ]
        )
        return uids.uid("metrics", f"race.metric.{i}") + H0.to_bytes(4, "big") + b"".join(pairs)

    def cell(i: int) -> list[bytes]:  # point i: offset i s, the integer i on 1 or 2 bytes
        width = 1 if i < 128 else 2
        return [((i << 4) | (width - 1)).to_bytes(2, "big"), i.to_bytes(width, "big")]

    expected = sorted((row_key(i), cell(i)) for i in range(NAMES))
    got = [(row.key, [cell.qualifier, cell.value]) for row in rows for cell in row.cells]
    assert got == expected


BATCH_SERIES = 3000
BODY_POINTS = 500


def batch_points() -> list[tuple[str, int, int, dict[str, str]]]:
    """Many new series in a burst: 30 new metrics, and one new tag value per series."""
    return [
        (f"burst.metric.{i % 30}", H0 + i, i, {"host": f"burst{i}", "dc": "both"})
        for i in range(BATCH_SERIES)
    ]


async def put_http(port: int, points: list[tuple[str, int, int, dict[str, str]]]) -> None:
    """The points as /api/put bodies of BODY_POINTS, one after another (each body's new
    names resolved in one UID batch)."""
    async with aiohttp.ClientSession() as http:
        for start in range(0, len(points), BODY_POINTS):
            body = [
                {"metric": m, "timestamp": ts, "value": v, "tags": tags}
                for m, ts, v, tags in points[start : start + BODY_POINTS]
            ]
            async with http.post(f"http://127.0.0.1:{port}/api/put", json=body) as reply:
                assert reply.status == 204, await reply.text()


async def test_two_tsds_assigning_the_same_names_in_batches_agree_on_every_uid(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    """The same burst of 3,000 new series to both daemons at once: one over telnet (new
    series resolved a batch at a time), the other as /api/put bodies (one batch per
    body), so that batched increments and check-and-puts of both processes interleave."""
    points = batch_points()
    lines = [
        f"put {m} {ts} {v} " + " ".join(f"{k}={t}" for k, t in tags.items())
        for m, ts, v, tags in points
    ]
    async with fresh_tables(hbase_server) as cfg:
        async with (
            tsd_process(cfg, tmp_path / "tsd1.log") as first,
            tsd_process(cfg, tmp_path / "tsd2.log") as second,
        ):
            replies, _ = await asyncio.gather(put_telnet(first, lines), put_http(second, points))
            assert replies == []
        storage = HBaseStorage(hbase_settings(cfg))
        try:
            uids = await read_uid_table(storage, cfg)
            async with contextlib.aclosing(storage.scan(cfg.data_table, ScanSpec())) as scan:
                rows = [row async for row in scan]
        finally:
            await storage.close()

    assert uids.problems() == []
    for kind, names in [
        ("metrics", {f"burst.metric.{i}" for i in range(30)}),
        ("tagk", {"host", "dc"}),
        ("tagv", {f"burst{i}" for i in range(BATCH_SERIES)} | {"both"}),
    ]:
        assert {name.decode() for name in uids.forward[kind]} == names
        assert uids.leaked(kind) == {}, kind
        assert uids.counters[kind] >= len(names), kind
    # one row per series (both daemons wrote the same cell), under the agreed UIDs
    expected_keys = sorted(
        uids.uid("metrics", m)
        + H0.to_bytes(4, "big")
        + b"".join(sorted(uids.uid("tagk", k) + uids.uid("tagv", t) for k, t in tags.items()))
        for m, _, _, tags in points
    )
    assert sorted(row.key for row in rows) == expected_keys


async def test_a_second_tsd_on_the_same_data_directory_is_refused(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    """Two daemons on one write-ahead log would replay and delete each other's segments:
    the second exits 3 (cannot open its store) and says why."""
    async with fresh_tables(hbase_server) as cfg, tsd_process(cfg, tmp_path / "tsd1.log"):
        done = await asyncio.to_thread(
            subprocess.run,
            tsd_argv(cfg, free_port(), tmp_path / "tsd1"),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
    assert done.returncode == 3, done.stderr
    assert "is in use by another process" in done.stderr
