"""``tsdb copy`` through the real command line: every cell of every table arrives, a stopped or
killed copy resumes to the same result, and the safety refusals."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.toolkit import Result, Target, make_target, open_target, tsdb
from tsd.storage.base import FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage

pytestmark = pytest.mark.slow  # the CLI in subprocesses

SERIES = 6
HOURS = 30  # SERIES * HOURS data rows
T0 = 1_700_000_000 - 1_700_000_000 % 3600
# Cells no tool writes, with the bytes a copy must keep: NUL and 0xFF in keys, empty values.
RAW: dict[str, list[Put]] = {
    "tree": [
        Put(b"\x00\x01", "t", b"tree", b'{"name":"t"}'),
        Put(b"\x00\x01\xff", "t", b"branch", b""),
    ],
    "meta": [Put(b"\x00\x00\x01\x00\x00\x01\x00\x00\x01", "name", b"ts_meta", b"{}")],
    "data": [Put(b"\xff" * 13, "t", b"\x01\x00\x00", b'{"description":"note"}')],
    "uid": [Put(b"\x00\x00\xff", "name", b"metrics", b"odd\x00name")],
}


def roles(target: Target) -> dict[str, str]:
    storage = target.cfg().storage
    return {
        "uid": storage.uid_table,
        "data": storage.data_table,
        "tree": storage.tree_table,
        "meta": storage.meta_table,
    }


async def every_cell(target: Target) -> dict[str, list[tuple[bytes, str, bytes, bytes]]]:
    """Role -> every (row, family, qualifier, value) of that table, in storage order."""
    cells: dict[str, list[tuple[bytes, str, bytes, bytes]]] = {}
    async with open_target(target) as store:
        for role, table in roles(target).items():
            cells[role] = [
                (row.key, cell.family, cell.qualifier, cell.value)
                async for row in store.storage.scan(table, ScanSpec())
                for cell in row.cells
            ]
    return cells


async def fill(target: Target) -> dict[str, list[tuple[bytes, str, bytes, bytes]]]:
    """Points through ``tsdb import`` (with realtime TSMeta), raw cells in every table."""
    target.write_config("tsd.core.meta.enable_realtime_ts = true\n")
    lines = [
        f"sys.cpu.user {T0 + 3600 * h + 7} {h * 10 + s} host=web{s:02d}\n"
        for h in range(HOURS)
        for s in range(SERIES)
    ]
    (target.cwd / "points.txt").write_text("".join(lines))
    done = await target.run("import", "points.txt", "--auto-metric")
    assert done.code == 0, done.err
    async with open_target(target) as store:
        for role, puts in RAW.items():
            await store.storage.put(roles(target)[role], puts)
    cells = await every_cell(target)
    assert len(cells["data"]) >= SERIES * HOURS
    assert all(cells[role] for role in RAW)
    return cells


def new_target(backend: str, where: Path) -> Iterator[Target]:
    where.mkdir()
    return make_target(backend, where)


async def copy(cwd: Path, source: Target, target: Target, *args: str) -> Result:
    return await tsdb(cwd, "copy", "--from", str(source.config), "--to", str(target.config), *args)


def assert_verified(done: Result) -> None:
    assert done.code == 0, done.err
    verified = [line for line in done.out.splitlines() if line.startswith("verified ")]
    assert len(verified) == 4
    assert all(line.endswith(": equal") for line in verified)


async def test_embedded_to_embedded_copies_every_cell(tmp_path: Path) -> None:
    with_source, with_target = (
        new_target("embedded", tmp_path / "a"),
        new_target("embedded", tmp_path / "b"),
    )
    source, target = next(with_source), next(with_target)
    target.write_config(  # other table names on the target: tables are matched by role
        "tsd.storage.hbase.data_table = d\ntsd.storage.hbase.uid_table = u\n"
        "tsd.storage.hbase.tree_table = t\ntsd.storage.hbase.meta_table = m\n"
    )
    cells = await fill(source)

    done = await copy(tmp_path, source, target)

    assert_verified(done)
    assert f"copied tsdb -> d: {SERIES * HOURS + 1} rows" in done.out
    assert await every_cell(target) == cells


async def test_a_copy_stopped_by_a_row_limit_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    source, target = (
        next(new_target("embedded", tmp_path / "a")),
        next(new_target("embedded", tmp_path / "b")),
    )
    cells = await fill(source)
    uid_rows = len({key for key, *_ in cells["uid"]})

    # The first run ends inside the UID table, the second inside the data table.
    first = await copy(tmp_path, source, target, "--limit-rows", "5", "--batch-rows", "2")
    assert first.code == 5, first.err
    saved = json.loads((tmp_path / "tsdb-copy.checkpoint.json").read_text())["tables"]
    assert saved["uid"]["rows"] == 5
    assert not saved["uid"]["done"]
    second = await copy(tmp_path, source, target, "--limit-rows", str(uid_rows + 10))
    assert second.code == 5, second.err
    saved = json.loads((tmp_path / "tsdb-copy.checkpoint.json").read_text())["tables"]
    assert saved["uid"]["done"]
    assert saved["data"]["rows"] == 15
    partial = await every_cell(target)
    assert partial["uid"] == cells["uid"]
    assert len({key for key, *_ in partial["data"]}) == 15

    last = await copy(tmp_path, source, target)

    assert_verified(last)
    assert await every_cell(target) == cells
    # Once done, running it again copies nothing and verifies again.
    again = await copy(tmp_path, source, target)
    assert_verified(again)
    assert "tsdb copy:" not in again.err


async def test_a_killed_copy_restarted_ends_with_the_same_store(tmp_path: Path) -> None:
    source, target = (
        next(new_target("embedded", tmp_path / "a")),
        next(new_target("embedded", tmp_path / "b")),
    )
    cells = await fill(source)
    args = ["--from", str(source.config), "--to", str(target.config)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tsd", "copy", *args, "--batch-rows", "4",
        "--rows-per-second", "40",  # ~5 s for the store: ample time to kill it mid-way
        cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    # Kill it when it reports progress in the data table (a checkpoint saved there).
    while True:
        line = (await proc.stderr.readline()).decode()
        assert line, "the copy ended without reporting progress in the data table"
        if line.startswith("tsdb copy: tsdb -> tsdb:") and "copying" in line:
            break
    proc.send_signal(signal.SIGKILL)
    assert await proc.wait() == -signal.SIGKILL
    saved = json.loads((tmp_path / "tsdb-copy.checkpoint.json").read_text())["tables"]
    assert saved["uid"]["done"]
    assert not saved["data"]["done"]

    done = await copy(tmp_path, source, target)

    assert_verified(done)
    assert await every_cell(target) == cells


async def test_copy_refuses_a_full_target_a_foreign_checkpoint_and_itself(tmp_path: Path) -> None:
    source, target = (
        next(new_target("embedded", tmp_path / "a")),
        next(new_target("embedded", tmp_path / "b")),
    )
    await fill(source)
    other = next(new_target("embedded", tmp_path / "c"))
    (tmp_path / "c" / "points.txt").write_text(f"x.y {T0} 1 a=b\n")
    assert (await other.run("import", "points.txt", "--auto-metric")).code == 0

    full = await copy(tmp_path, source, other)
    assert full.code == 2
    assert "the target already holds rows in tsdb-uid, tsdb" in full.err

    itself = await copy(tmp_path, source, source)
    assert itself.code == 2
    assert "the source and the target are the same store" in itself.err

    assert (await copy(tmp_path, source, target, "--limit-rows", "1")).code == 5
    foreign = await copy(tmp_path, other, target)
    assert foreign.code == 2
    assert "belongs to another copy" in foreign.err
    fresh = next(new_target("embedded", tmp_path / "d"))
    assert_verified(await copy(tmp_path, other, fresh, "--restart"))


@pytest.mark.hbase
async def test_embedded_to_hbase_and_back_keeps_every_cell(tmp_path: Path) -> None:
    source = next(new_target("embedded", tmp_path / "a"))
    with_hbase = new_target("hbase", tmp_path / "h")
    hbase = next(with_hbase)
    back = next(new_target("embedded", tmp_path / "b"))
    try:
        cells = await fill(source)

        there = await copy(tmp_path, source, hbase, "--checkpoint", "to-hbase.json")
        assert_verified(there)
        assert await every_cell(hbase) == cells

        # Back, stopped once by a row limit and resumed.
        stopped = await copy(
            tmp_path, hbase, back, "--checkpoint", "back.json", "--limit-rows", "50"
        )
        assert stopped.code == 5, stopped.err
        home = await copy(tmp_path, hbase, back, "--checkpoint", "back.json")
        assert_verified(home)
        assert await every_cell(back) == cells
    finally:
        next(with_hbase, None)  # drops the test tables of an external HBase


async def test_copy_reads_a_source_a_daemon_holds(tmp_path: Path) -> None:
    source, target = (
        next(new_target("embedded", tmp_path / "a")),
        next(new_target("embedded", tmp_path / "b")),
    )
    cells = await fill(source)
    held = EmbeddedStorage(source.cfg().storage.data_dir)  # the daemon's exclusive opener
    try:
        done = await copy(tmp_path, source, target)
    finally:
        await held.close()
    assert_verified(done)
    assert await every_cell(target) == cells


ROLLUPS = (
    '{"aggregationIds": {"sum": 0, "count": 1}, "intervals": [{"table": "tsdb-rollup-1h",'
    ' "preAggregationTable": "tsdb-agg-1h", "interval": "1h", "rowSpan": "1d",'
    ' "defaultInterval": true}]}'
)


async def test_rollup_tables_named_by_the_rollup_config_are_copied(tmp_path: Path) -> None:
    source, target = (
        next(new_target("embedded", tmp_path / "a")),
        next(new_target("embedded", tmp_path / "b")),
    )
    # rollups an outside job wrote (tsd computes none of its own here: docs/rollups.md)
    for side in (source, target):
        side.write_config("tsd.rollups.compute = false\n")
    cells = await fill(source)
    rollup_cells = {
        "tsdb-rollup-1h": [Put(b"\x00\x00\x01\x65\x5d\x00\x00", "t", b"sum:\x00\x00", b"\x2a")],
        "tsdb-agg-1h": [Put(b"\x00\x00\x01\x65\x5d\x00\x00", "t", b"count:\x00\x10", b"\x07")],
    }
    async with open_target(source) as store:
        for table, puts in rollup_cells.items():
            await store.storage.create_table(table, [FamilySpec("t")])
            await store.storage.put(table, puts)
    (tmp_path / "rollups.json").write_text(ROLLUPS)

    done = await copy(tmp_path, source, target, "--rollups", str(tmp_path / "rollups.json"))

    assert done.code == 0, done.err
    verified = [line for line in done.out.splitlines() if line.startswith("verified ")]
    assert len(verified) == 6
    assert all(line.endswith(": equal") for line in verified)
    assert await every_cell(target) == cells
    async with open_target(target) as store:
        for table, puts in rollup_cells.items():
            copied = [
                Put(row.key, c.family, c.qualifier, c.value)
                async for row in store.storage.scan(table, ScanSpec())
                for c in row.cells
            ]
            assert copied == puts
