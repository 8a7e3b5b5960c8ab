"""tsd's own rollups where points are stored as cells at once (HBase, or the embedded store
with appends): the row-hours stored are rolled up once closed, and a late point rolls its
row-hour up again; the cells are those the head's write-out computes for the same points.
(On HBase beside OpenTSDB: tests/hbase/test_rollup_parity.py.)"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from tests.write.points import add
from tests.write.readback import table_cells
from tsd.codec import KeyLayout
from tsd.config import Config, CoreConfig, RollupsConfig, StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.protocol.rollup_config import default_rollup_config
from tsd.query.rollup_compute import ComputedRollups
from tsd.stats import StatsRegistry
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.uid.service import UidService
from tsd.write.pipeline import WritePath

T0 = 1356998400
NOW = T0 + 10 * 3600  # every hour below is closed


async def _store(directory: Path, appends: bool, batches: list[list[Any]]) -> list[Any]:
    """Write ``batches`` (each flushed, then the closed hours rolled up), the rollup cells."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True),
        storage=StorageConfig(data_dir=str(directory), enable_appends=appends, wal_enable=False),
        rollups=RollupsConfig(compute_grace_s=0),
    )
    rollups = default_rollup_config("tsdb")
    storage = EmbeddedStorage(directory)
    try:
        await ensure_tables(storage, cfg.storage, rollups.tables())
        uids = UidService(storage, cfg)
        layout = KeyLayout.from_storage_config(cfg.storage)
        computed = ComputedRollups.from_config(rollups, rollups.intervals, layout)
        path = WritePath.build(storage, uids, cfg, StatsRegistry(), rollups=computed)
        writer = path.writer
        writer.start()
        tracker = writer._rollups  # noqa: SLF001 - the tracker the write path built
        assert (tracker is None) == (not appends)
        for points in batches:
            for ts, value in points:
                await add(path.ingest, DataPoint("m", ts, value, make_tags({"host": "a"})))
            await writer.flush()
            if tracker is not None:
                tracker._clock = lambda: float(NOW)  # noqa: SLF001 - the hours are closed
                await tracker.roll_due()
            else:
                sink = writer.head
                assert sink is not None
                await sink.flush_all()
        await writer.close()
        return await table_cells(storage, "tsdb-rollup-1h")
    finally:
        await storage.close()


async def test_rows_stored_as_cells_are_rolled_up_once_closed(tmp_path: Path) -> None:
    first = [(T0 + i * 60, i) for i in range(120)]  # two hours of integers
    late = [(T0 + 30, 2.5), (T0 + 3600 * 3 + 5, 7)]  # a late float in hour 0, a new hour
    cells = await _store(tmp_path / "appends", True, [first, late])
    # the head's write-out of the same points gives the same cells
    assert cells == await _store(tmp_path / "head", False, [first, late])
    assert len(cells) == 3 * 4  # hours 0, 1 and 3, four columns each
    sums = {int.from_bytes(q[1:], "big") >> 4: v for _, q, v in cells if q[0] == 0}
    # hour 0 became a float sum once the late float joined it (its integer cell replaced)
    assert sums == {
        0: struct.pack(">d", sum(range(60)) + 2.5),
        1: sum(range(60, 120)).to_bytes(2, "big"),
        3: bytes([7]),
    }
