"""``tsdb uid metasync`` and ``tsdb uid metapurge`` beside OpenTSDB 2.4.1's UidManager
(MetaSync, MetaPurge) on the same HBase data: the meta cells each writes, and what each
leaves after purging.

Both tables get the same points with ``tsdb import`` (which writes tsd's own ``tsd_series``
index cell, so both meta tables hold it before either tool runs). The tools run with the
default tracking settings, then again with ``enable_realtime_ts``, where a new counter
brings a TSMeta whose ``created`` is the wall clock: those fields are compared as "recent".

Output lines are not compared: OpenTSDB's are log lines of one thread per core (two per
core for metasync), in thread order; tsd prints one summary line.
"""

from __future__ import annotations

import json
import time
from contextlib import aclosing
from pathlib import Path

import pytest

from tests.hbase.test_cli_parity import HOUR, POINTS, Clis
from tests.hbase_harness import HBaseServer
from tsd.config import StorageConfig
from tsd.meta.tracking import INDEX_QUALIFIER
from tsd.storage.base import ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

pytestmark = pytest.mark.hbase

#: (table role, row, qualifier) -> value, ``created`` of a JSON value read as "recent" when
#: within the test's run
Cells = dict[tuple[str, bytes, bytes], object]

#: the UID rows above the metric counter: OpenTSDB's MetaPurge scans the UID table from UID
#: 1 to the metric counter only (MetaPurge.getScanner), so tag UIDs beyond it keep their
#: UIDMeta; tsd purges them all (README, departures)
BEYOND_METRICS = {(b"\x00\x00\x03", b"tagv_meta"), (b"\x00\x00\x04", b"tagv_meta")}


async def meta_cells(cfg: StorageConfig, since_s: int) -> Cells:
    """The UID table's ``name`` family and the meta table, the wall-clock times (``created``
    fields and tsd's index cell, when not before ``since_s``) replaced by "recent"."""
    storage = HBaseStorage(hbase_settings(cfg))
    out: Cells = {}
    try:
        for role, table in (("uid", cfg.uid_table), ("meta", cfg.meta_table)):
            async with aclosing(storage.scan(table, ScanSpec(families=("name",)))) as rows:
                async for row in rows:
                    for cell in row.cells:
                        value: object = cell.value
                        if cell.value.startswith(b"{"):
                            document = json.loads(cell.value)
                            if document.get("created", 0) >= since_s:
                                document["created"] = "recent"
                            value = document
                        elif cell.qualifier == INDEX_QUALIFIER:  # first seen, wall clock
                            seen = int.from_bytes(cell.value, "big")
                            value = "recent" if seen >= since_s else seen
                        elif cell.qualifier == b"ts_ctr":
                            # OpenTSDB's MetaSync sometimes counts a series twice (1 or 2
                            # in CI runs of the same data): compared as "counted" (>= 1).
                            counted = int.from_bytes(cell.value, "big") >= 1
                            value = "counted" if counted else cell.value
                        out[(role, row.key, cell.qualifier)] = value
    finally:
        await storage.close()
    return out


async def test_metasync_and_metapurge_leave_what_opentsdb_leaves(
    hbase_server: HBaseServer, two_tables: tuple[StorageConfig, ...], tmp_path: Path
) -> None:
    since_s = int(time.time())
    clis = []
    for i, cfg in enumerate(two_tables):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        cli = Clis(hbase_server, cfg, workdir)
        (workdir / "points.txt").write_text("\n".join(POINTS) + "\n")
        await cli.tsd("import", "--auto-metric", "points.txt")
        clis.append(cli)
    theirs_cli, ours_cli = clis
    theirs_cfg, ours_cfg = two_tables

    async def both(*words: str) -> tuple[Cells, Cells]:
        await theirs_cli.opentsdb("UidManager", *words)
        await ours_cli.tsd("uid", *words)
        return await meta_cells(theirs_cfg, since_s), await meta_cells(ours_cfg, since_s)

    # Default settings: a UIDMeta per UID created at its first hour, a counter per series.
    theirs, ours = await both("metasync")
    assert ours == theirs
    kinds = sorted(q for (role, _, q) in ours if role == "uid" and q.endswith(b"_meta"))
    assert kinds == [b"metric_meta"] * 2 + [b"tagk_meta"] * 2 + [b"tagv_meta"] * 4
    assert {v["created"] for v in ours.values() if isinstance(v, dict)} == {HOUR}
    assert sorted(q for (role, _, q) in ours if role == "meta") == sorted(
        [b"ts_ctr", b"tsd_series"] * 4
    )

    # Run again: the counters exist, the TSMeta not: one created at the series' first hour.
    theirs, ours = await both("metasync")
    assert ours == theirs
    tsmetas = [v for (_, _, q), v in ours.items() if q == b"ts_meta"]
    assert len(tsmetas) == 4
    assert all(isinstance(v, dict) and v["created"] == HOUR for v in tsmetas)

    # Purged: every UIDMeta and TSMeta cell goes, tsd's index stays (and, in OpenTSDB, the
    # UIDMeta of the UIDs beyond the metric counter).
    theirs, ours = await both("metapurge")
    left_over = {(key, q) for (role, key, q) in theirs if role == "uid" and q.endswith(b"_meta")}
    assert left_over == BEYOND_METRICS
    assert ours == {k: v for k, v in theirs.items() if (k[1], k[2]) not in BEYOND_METRICS}
    assert sorted(q for (role, _, q) in ours if role == "meta") == [b"tsd_series"] * 4

    # With enable_realtime_ts (both configurations): a new counter brings a TSMeta created now.
    for cli in clis:
        with cli.opentsdb_conf.open("a") as conf:
            conf.write("tsd.core.meta.enable_realtime_ts = true\n")
        with cli.tsd_conf.open("a") as conf:
            conf.write("tsd.core.meta.enable_realtime_ts = true\n")
    theirs, ours = await both("metasync")
    ours_tsmetas = {k: v for k, v in ours.items() if k[2] == b"ts_meta"}
    theirs_tsmetas = {k: v for k, v in theirs.items() if k[2] == b"ts_meta"}
    assert ours_tsmetas == theirs_tsmetas
    assert len(ours_tsmetas) == 4
    assert all(isinstance(v, dict) and v["created"] == "recent" for v in ours_tsmetas.values())
    assert {k: v for k, v in ours.items() if (k[1], k[2]) not in BEYOND_METRICS} == {
        k: v for k, v in theirs.items() if (k[1], k[2]) not in BEYOND_METRICS
    }
