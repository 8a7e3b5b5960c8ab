"""``tsdb rollup-backfill``: the rollups of data stored without them are the cells the
head's write-out computes for the same points, for the hours of the range asked only;
progress on stdout; running it again changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.query.tsdb_harness import embedded_harness
from tests.tools.toolkit import tsdb
from tests.write.readback import table_cells
from tsd.protocol.rollup_config import default_rollup_config
from tsd.storage.embedded import EmbeddedStorage

T0 = 1356998400  # 2013-01-01 00:00:00 UTC
POINTS = [
    ("m", {"host": host}, T0 + i * 97 + (k * 13), (i * 7 + k) % 50 if k else i / 4)
    for k, host in enumerate("abc")
    for i in range(200)  # about five hours and a half
]

Cells = list[tuple[bytes, bytes, bytes]]


async def _rollup_cells(directory: Path) -> Cells:
    storage = EmbeddedStorage(directory)
    try:
        return await table_cells(storage, "tsdb-rollup-1h")
    finally:
        await storage.close()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_backfill_writes_the_cells_the_write_out_computes(tmp_path: Path) -> None:
    # the same points: once rolled up as the head writes them out, once stored bare
    async with embedded_harness(
        tmp_path / "live", remove=False, rollups=default_rollup_config("tsdb")
    ) as live:
        await live.load(POINTS)
        await live.write_out()
    async with embedded_harness(tmp_path / "bare", remove=False) as bare:
        await bare.load(POINTS)
        await bare.write_out()
    expected = await _rollup_cells(tmp_path / "live")
    assert len(expected) == 3 * 6 * 4  # three series, six hours, four columns

    data_dir = str(tmp_path / "bare")
    # the range's hours only: 01:00 up to 03:00
    result = await tsdb(
        tmp_path, "rollup-backfill", "--data-dir", data_dir, str(T0 + 3600), str(T0 + 3 * 3600)
    )
    assert result.code == 0, result.err
    assert result.out.startswith("rollup-backfill: done: 18 rows read, 6 rolled up")
    assert "(last hour 2013-01-01T02:00Z), 24 rollup cells written" in result.out
    partial = await _rollup_cells(tmp_path / "bare")
    offsets = {(c[1][1] << 8 | c[1][2]) >> 4 for c in partial}
    assert offsets == {1, 2}  # hours 01 and 02 of the day's row
    assert set(partial) <= set(expected)

    for _ in range(2):  # everything, then again: idempotent
        result = await tsdb(tmp_path, "rollup-backfill", "--data-dir", data_dir, str(T0))
        assert result.code == 0, result.err
        assert "18 rolled up" in result.out
        assert await _rollup_cells(tmp_path / "bare") == expected


@pytest.mark.slow
async def test_backfill_refuses_bad_ranges(tmp_path: Path) -> None:
    result = await tsdb(
        tmp_path, "rollup-backfill", "--data-dir", str(tmp_path), str(T0 + 10), str(T0)
    )
    assert result.code == 2
    assert "START must be before END" in result.err
    result = await tsdb(tmp_path, "rollup-backfill", "--data-dir", str(tmp_path), "yesterday")
    assert result.code == 2
    assert "bad time" in result.err


async def test_import_computes_the_rollups_the_daemon_computes(tmp_path: Path) -> None:
    async with embedded_harness(
        tmp_path / "live", remove=False, rollups=default_rollup_config("tsdb")
    ) as live:
        await live.load(POINTS)
        await live.write_out()
    lines = "".join(
        f"{metric} {ts} {value} host={tags['host']}\n" for metric, tags, ts, value in POINTS
    )
    (tmp_path / "points.txt").write_text(lines)
    result = await tsdb(
        tmp_path, "import", "--auto-metric", "--data-dir", str(tmp_path / "imported"),
        str(tmp_path / "points.txt"),
    )  # fmt: skip
    assert result.code == 0, result.err
    assert await _rollup_cells(tmp_path / "imported") == await _rollup_cells(tmp_path / "live")
