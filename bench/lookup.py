"""Series lookup from the meta table against OpenTSDB's other way, a scan of the data table.

Data: ``--series`` series of one metric (``host=h<i>``, ``dc`` one of 4), ``--hours`` rows
each, written by the real Writer with meta tracking off (so the only meta rows are tsd's
series index cells, one per series). Measured, in the same run, on the embedded store:

* lookup: ``SeriesLookup.lookup`` of ``m=sys.cpu.user{dc=dc1}`` (the meta table scan tsd
  does for every /api/search/lookup and Grafana template variable);
* baseline: what OpenTSDB does with ``useMeta: false`` (and what a TSD without an index must
  do): scan every data row of the metric, decode the row keys, keep the distinct TSUIDs
  matching dc=dc1;
* ingest: points/s through the Writer with and without the tracker's hook, UIDs assigned
  beforehand (the cost of tracking new series on the write path, meta writes included).

Run: ``python -m bench.lookup [--series N] [--hours N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from contextlib import aclosing
from pathlib import Path

from tsd.codec import KeyLayout, decode_row_key
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.meta.lookup import LookupQuery
from tsd.meta.service import MetaService
from tsd.stats import StatsRegistry
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.uid.service import UidService
from tsd.write.batch_writer import Writer
from tsd.write.ingest import IngestService, IngestSession, Put

T0 = 1_700_000_000 - 1_700_000_000 % 3600


def points(n_series: int, hours: int) -> list[DataPoint]:
    return [
        DataPoint(
            "sys.cpu.user", T0 + 3600 * h, h, make_tags({"host": f"h{s}", "dc": f"dc{s % 4}"})
        )
        for h in range(hours)
        for s in range(n_series)
    ]


async def ingest(
    path: Path, data: list[DataPoint], hooked: bool
) -> tuple[float, EmbeddedStorage, MetaService]:
    storage = EmbeddedStorage(path)
    config = Config(core=CoreConfig(auto_create_metrics=True), storage=StorageConfig())
    await ensure_tables(storage, config.storage)
    uids = UidService(storage, config)
    meta = MetaService(storage, uids, config)
    hook = meta.tracker.on_new_series_many if hooked else None
    writer = Writer(storage, config.storage, StatsRegistry())
    ingest = IngestService(writer, uids, config.storage, on_new_series=hook)
    writer.start()
    meta.start()
    # UIDs first, untimed: assigning them (durable increments and check-and-puts) would
    # dominate both runs and hide what the hook costs.
    for point in data[: len(data) // max(1, len({p.timestamp for p in data}))]:
        await uids.resolve_for_write(point.metric, point.tags)
    started = time.perf_counter()
    session: IngestSession[None] = ingest.session()
    for point in data:  # one at a time, each series resolved before the next point
        if session.put(point) is not Put.BUFFERED:
            await session.settle()
    await writer.flush()
    await meta.tracker.flush()
    elapsed = time.perf_counter() - started
    await writer.close()
    return elapsed, storage, meta


async def scan_data_table(storage: EmbeddedStorage, dc_uid: bytes, dc_key: bytes) -> int:
    """OpenTSDB's useMeta=false lookup: every row of the metric, distinct matching TSUIDs."""
    layout = KeyLayout()
    found: set[bytes] = set()
    spec = ScanSpec(start=b"\x00\x00\x01", stop=b"\x00\x00\x02", families=("t",))
    async with aclosing(storage.scan("tsdb", spec)) as rows:
        async for row in rows:
            parts = decode_row_key(layout, row.key)
            if (dc_key, dc_uid) in parts.tags:
                found.add(parts.metric_uid + b"".join(k + v for k, v in parts.tags))
    return len(found)


async def main(n_series: int, hours: int) -> None:
    data = points(n_series, hours)
    root = Path(tempfile.mkdtemp(prefix="tsd-bench-lookup-"))
    try:
        # Best of 3 alternating runs each: the machine may be shared.
        plain_s = tracked_s = float("inf")
        for run in range(3):
            for hooked in (False, True):
                elapsed, store, meta = await ingest(root / f"{hooked}{run}", data, hooked)
                await meta.close()
                await store.close()
                if hooked:
                    tracked_s = min(tracked_s, elapsed)
                else:
                    plain_s = min(plain_s, elapsed)
        _, storage, meta = await ingest(root / "lookup", data, True)
        print(f"ingest {len(data):,} points, {n_series:,} series (best of 3):")
        print(f"  without tracking hook {len(data) / plain_s:12,.0f} points/s")
        print(f"  with tracking hook    {len(data) / tracked_s:12,.0f} points/s"
              f"  (ratio {plain_s / tracked_s:.2f})")  # fmt: skip
        query = LookupQuery("sys.cpu.user", (("dc", "dc1"),), 0)
        dc_key = await meta.uids.tagk.get_id("dc")
        dc_uid = await meta.uids.tagv.get_id("dc1")
        best_lookup = best_scan = float("inf")
        result, scanned = await meta.lookup.lookup(query), 0
        for _ in range(3):
            started = time.perf_counter()
            result = await meta.lookup.lookup(query)
            best_lookup = min(best_lookup, time.perf_counter() - started)
            started = time.perf_counter()
            scanned = await scan_data_table(storage, dc_uid, dc_key)
            best_scan = min(best_scan, time.perf_counter() - started)
        assert len(result.tsuids) == scanned == n_series // 4
        rows = n_series * hours
        print(f"lookup m=sys.cpu.user{{dc=dc1}} -> {scanned:,} series ({rows:,} data rows):")
        print(f"  meta table (tsd)        {best_lookup * 1000:9.1f} ms")
        print(f"  data table scan (base)  {best_scan * 1000:9.1f} ms"
              f"  (tsd is {best_scan / best_lookup:.1f}x faster)")  # fmt: skip
        await meta.close()
        await storage.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--hours", type=int, default=24)
    args = parser.parse_args()
    asyncio.run(main(args.series, args.hours))
