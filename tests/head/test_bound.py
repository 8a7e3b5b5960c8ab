"""``tsd.storage.head.max_bytes`` holds when new series come faster than rows are written
out: a burst of new series waits for the write-out instead of growing the head.

The shape of the run that passed the bound (a million new series, two points each, over
telnet: head.bytes about 355 MB against the default 256 MiB), scaled down: the smallest
bound (1 MiB), writer batches scaled down with it (500 cells, 2,000 pending), and series
whose rows take several times the bound. Through the real write path (ingest service,
writer, head) on a real embedded store; every point must be in storage afterwards (rows
written out early take their second point as a merge)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from tsd.codec.const import FAMILY
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.data_points import make_tags
from tsd.head import Head
from tsd.stats import StatsRegistry
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import opentsdb_tables
from tsd.uid.service import UidService
from tsd.wal.record import RowRun
from tsd.write.batch_writer import Writer, WriterLimits
from tsd.write.head_flush import build_head_sink
from tsd.write.ingest import IngestService

T0 = 1356998400  # an hour boundary
BOUND = 1 << 20
HOSTS, RACKS = 200, 100  # 20,000 series: about 4 MiB of rows


@pytest.mark.slow
@pytest.mark.fallbacks
async def test_a_burst_of_new_series_keeps_the_head_within_its_bound(tmp_path: Path) -> None:
    storage = EmbeddedStorage(tmp_path)
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True),
        storage=dataclasses.replace(
            StorageConfig(data_table="tsdb", uid_table="tsdb-uid"), head_max_bytes=BOUND
        ),
    )
    try:
        tables = opentsdb_tables(cfg.storage)
        for table in (cfg.storage.uid_table, cfg.storage.data_table):
            await storage.create_table(table, tables[table])
        sink = build_head_sink(
            storage, cfg.storage, StatsRegistry(), wal=None, wall_clock=lambda: T0
        )
        head: Head = sink.head
        # head.bytes after every batch, and what each batch added
        seen: list[tuple[int, int]] = []
        add_runs = head.add_runs

        def watched(runs: Sequence[RowRun], batch: int, now: float) -> int:
            before = head.bytes
            added = add_runs(runs, batch, now)
            seen.append((head.bytes, head.bytes - before))
            return added

        head.add_runs = watched  # type: ignore[method-assign]  # watched
        limits = WriterLimits(max_batch_cells=500, max_pending_cells=2000)
        writer = Writer(storage, cfg.storage, StatsRegistry(), limits=limits, head=sink)
        writer.start()
        ingest = IngestService(writer, UidService(storage, cfg), cfg.storage)
        try:
            refs = [
                await ingest.resolve("m", make_tags({"host": f"h{h}", "rack": f"r{r}"}))
                for h in range(HOSTS)
                for r in range(RACKS)
            ]
            # as fast as the writer takes them (a protocol's burst), not a point at a time
            for i in range(2):
                for n, ref in enumerate(refs):
                    writer.add_to(ref, T0 + 10 * i, n + i)
                    if n % limits.max_batch_cells == 0:
                        # as a protocol: reading stops while the writer is full
                        await writer.wait_writable()
                        await asyncio.sleep(0)
            await writer.flush()
            peak = max(total for total, _ in seen)
            assert sum(grown for _, grown in seen if grown > 0) > 3 * BOUND  # the shape
            # no slack: batches reserve their bytes before they go in (HeadSink.room)
            assert peak <= BOUND, (peak, BOUND)
            await sink.flush_all()
        finally:
            await writer.close()
        points = 0
        rows = 0
        async for row in storage.scan(cfg.storage.data_table, ScanSpec()):
            rows += 1
            cells = [c for c in row.cells if c.family == FAMILY]
            assert len(cells) == 1, row.key.hex()
            points += len(cells[0].qualifier) // 2
        assert (rows, points) == (HOSTS * RACKS, 2 * HOSTS * RACKS)
    finally:
        await storage.close()
