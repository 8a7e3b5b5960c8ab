"""``tsdb copy`` through the real command line: every cell of every table moved, in steps
(--max-rows, as an interrupted copy resumes), embedded -> embedded and embedded -> HBase ->
embedded, and refusals."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.tools.toolkit import Target, make_target, open_target, tsdb
from tsd.storage.base import ScanSpec
from tsd.tools.copy import ROLES, table_of

pytestmark = pytest.mark.slow  # dozens of tool runs in subprocesses

HOUR = 1_356_998_400
#: two metrics, several series and hours, ints and floats: UID, data and meta rows
POINTS = "\n".join(
    f"sys.{metric} {HOUR + 600 * i} {i if i % 3 else i / 4} host=web{i % 4} dc=d{i % 2}"
    for metric in ("cpu.user", "mem.free")
    for i in range(40)
)

Cells = dict[str, list[tuple[bytes, tuple[tuple[str, bytes, bytes], ...]]]]


async def every_cell(target: Target) -> Cells:
    """Per role, every row with its cells, in key order."""
    out: Cells = {}
    async with open_target(target) as store:
        for role in ROLES:
            table = table_of(store.cfg.storage, role)
            out[role] = [
                (row.key, tuple((c.family, c.qualifier, c.value) for c in row.cells))
                async for row in store.storage.scan(table, ScanSpec())
            ]
    return out


@contextlib.contextmanager
def targets(tmp_path: Path, *backends: str):
    with contextlib.ExitStack() as stack:
        made = []
        for index, backend in enumerate(backends):
            where = tmp_path / f"store{index}"
            where.mkdir()
            made.append(stack.enter_context(contextlib.contextmanager(make_target)(backend, where)))
        yield made


async def filled(target: Target) -> Cells:
    (target.cwd / "points.txt").write_text(POINTS + "\n")
    assert (await target.run("import", "--auto-metric", "points.txt")).code == 0
    assert (await target.run("meta-sync")).code == 0
    cells = await every_cell(target)
    assert all(cells[role] for role in ("uid", "data", "meta"))
    return cells


async def copy_in_steps(source: Target, destination: Target, state: Path, step: int) -> list[str]:
    """Run ``tsdb copy --max-rows step`` until it verifies; its output lines."""
    lines: list[str] = []
    for _ in range(200):
        done = await tsdb(
            source.cwd,
            "copy",
            "--from",
            str(source.config),
            "--to",
            str(destination.config),
            "--state",
            str(state),
            "--max-rows",
            str(step),
        )
        assert done.code == 0, done.err
        lines += done.out.splitlines()
        if "verify" in done.out:
            return lines
        assert done.out.endswith("run again to continue\n")
    raise AssertionError("the copy never finished")


async def test_copy_in_steps_moves_every_cell(tmp_path: Path) -> None:
    with targets(tmp_path, "embedded", "embedded") as (source, destination):
        original = await filled(source)
        lines = await copy_in_steps(source, destination, tmp_path / "state", step=7)
        assert await every_cell(destination) == original
    verified = [line for line in lines if line.startswith("verify ")]
    assert len(verified) == 4
    assert all(line.endswith(": equal") for line in verified)
    assert any(line.startswith("data: tsdb -> tsdb: ") for line in lines)  # progress


async def test_copy_reports_a_destination_that_differs(tmp_path: Path) -> None:
    with targets(tmp_path, "embedded", "embedded") as (source, destination):
        await filled(source)
        (destination.cwd / "other.txt").write_text(f"other.metric {HOUR} 1 host=x\n")
        assert (await destination.run("import", "--auto-metric", "other.txt")).code == 0
        done = await tsdb(
            tmp_path, "copy", "--from", str(source.config), "--to", str(destination.config)
        )
    assert done.code == 1
    assert "DIFFERENT" in done.out


async def test_copy_refuses_stores_with_other_row_keys(tmp_path: Path) -> None:
    with targets(tmp_path, "embedded", "embedded") as (source, destination):
        destination.write_config("tsd.storage.salt.width = 1\n")
        done = await tsdb(
            tmp_path, "copy", "--from", str(source.config), "--to", str(destination.config)
        )
    assert done.code == 2
    assert "salt_width" in done.err


@pytest.mark.hbase
async def test_embedded_to_hbase_and_back(tmp_path: Path) -> None:
    with targets(tmp_path, "embedded", "hbase", "embedded") as (first, hbase, last):
        original = await filled(first)
        await copy_in_steps(first, hbase, tmp_path / "there", step=25)
        assert await every_cell(hbase) == original
        await copy_in_steps(hbase, last, tmp_path / "back", step=1000)
        assert await every_cell(last) == original
