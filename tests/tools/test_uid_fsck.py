"""``tsdb uid fsck [fix] [delete_unknown]`` through the real command line on the embedded
store: UID table corruptions reported with OpenTSDB's lines, repaired with ``fix``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.toolkit import Target, make_target, open_target
from tsd.storage.base import Put, ScanSpec

pytestmark = pytest.mark.slow  # the CLI in subprocesses

HOUR = 1_356_998_400
POINTS = [f"sys.cpu.user {HOUR} 1 host=web01", f"sys.cpu.sys {HOUR} 2 host=web02"]


@pytest.fixture
def target(tmp_path: Path):
    yield from make_target("embedded", tmp_path)


async def corrupt_uids(target: Target) -> None:
    """Two metrics, one tagk, two tagvs; then a forward mapping without its reverse (beyond
    the counter), a reverse one without its forward, two names on one UID, an unknown
    qualifier."""
    (target.cwd / "points.txt").write_text("\n".join(POINTS) + "\n")
    done = await target.run("import", "--auto-metric", "points.txt")
    assert done.code == 0, done.err
    async with open_target(target) as store:
        puts = [
            Put(b"orphan.fwd", "id", b"metrics", b"\x00\x00\x09"),
            Put(b"\x00\x00\x05", "name", b"tagv", b"ghost"),
            Put(b"hostx", "id", b"tagk", b"\x00\x00\x01"),
            Put(b"x", "id", b"bogus", b"\x01"),
        ]
        await store.storage.put(store.cfg.storage.uid_table, puts)


async def uid_cells(target: Target) -> dict[tuple[bytes, str, bytes], bytes]:
    async with open_target(target) as store:
        table = store.cfg.storage.uid_table
        return {
            (row.key, cell.family, cell.qualifier): cell.value
            async for row in store.storage.scan(table, ScanSpec())
            for cell in row.cells
        }


EXPECTED = {
    "Running in log only mode",
    "Unknown qualifier 626F677573 in row 78",
    "Maximum ID for metrics: 2",
    "Maximum ID for tagk: 1",
    "Maximum ID for tagv: 2",
    "Forward metrics mapping is missing reverse mapping: orphan.fwd -> 000009",
    "We found an ID of 9 for metrics but the max ID is only 2!  Future IDs may be double-assigned!",
    "metrics: Found 2 errors.",
    "Forward tagk mapping hostx -> 000001 is different than reverse mapping: 000001 -> host",
    "Inconsistent forward tagk mapping hostx -> 000001 vs hostx -> host / host -> 000001",
    "tagk: Found 2 errors.",
    "Reverse tagv mapping is missing forward mapping: ghost -> 000005",
    "4 errors found.",
}


async def test_corruptions_are_reported_and_left_alone(target: Target) -> None:
    await corrupt_uids(target)
    before = await uid_cells(target)
    done = await target.run("uid", "fsck")
    assert done.code == 1, done.err
    lines = [line for line in done.out.splitlines() if not line.endswith(" KVs analyzed")]
    assert sorted(lines) == sorted(EXPECTED)
    assert await uid_cells(target) == before


async def test_fix_repairs_and_a_second_run_finds_nothing(target: Target) -> None:
    await corrupt_uids(target)
    done = await target.run("uid", "fsck", "fix", "delete_unknown")
    assert done.code == 1, done.err
    assert "FIX: Restoring metrics reverse mapping: 000009 -> orphan.fwd" in done.out
    assert "Corrupted UID [000001] renamed to [fsck.host.hostx]" in done.out
    assert "FIX: Removed tagv reverse mapping: 000005 -> ghost" in done.out
    assert "FIX: Updated max ID for metrics to 9" in done.out
    assert "FIX: Removed unknown qualifier 626F677573 in row 78" in done.out
    cells = await uid_cells(target)
    assert cells[b"\x00\x00\x09", "name", b"metrics"] == b"orphan.fwd"
    assert cells[b"fsck.host.hostx", "id", b"tagk"] == b"\x00\x00\x01"
    assert cells[b"\x00\x00\x01", "name", b"tagk"] == b"fsck.host.hostx"
    assert (b"host", "id", b"tagk") not in cells
    assert (b"hostx", "id", b"tagk") not in cells
    assert (b"\x00\x00\x05", "name", b"tagv") not in cells
    assert (b"x", "id", b"bogus") not in cells
    assert cells[b"\x00", "id", b"metrics"] == (9).to_bytes(8, "big")

    again = await target.run("uid", "fsck")
    assert again.code == 0, again.out
    assert again.out.splitlines()[-1] == "No errors found."
