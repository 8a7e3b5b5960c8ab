"""The write path as the daemon and ``tsdb import`` both build it: a Writer, the ingest
service in front of it (whose new series reach meta tracking, tsd.core.meta.*), started
and closed in the right order."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tsd.codec import KeyLayout
from tsd.codec.const import TIMESTAMP_BYTES
from tsd.config import Config
from tsd.head import Head
from tsd.meta.service import MetaService
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.uid.service import UidService
from tsd.wal import WriteAheadLog
from tsd.write.batch_writer import Writer, WriterLimits
from tsd.write.cell_store import CellStore
from tsd.write.head_flush import RollupHook, build_head_sink
from tsd.write.ingest import IngestService
from tsd.write.retention import RetainedInterval
from tsd.write.rollup_tracker import RollupTracker

#: the log's directory under tsd.storage.data_dir
WAL_DIRECTORY = "wal"


@dataclass(slots=True)
class WritePath:
    writer: Writer
    ingest: IngestService
    meta: MetaService
    #: the embedded engine's in-memory head (None on HBase, or with appends)
    head: Head | None = None

    @classmethod
    def build(
        cls,
        storage: Storage,
        uids: UidService,
        config: Config,
        registry: StatsRegistry,
        limits: WriterLimits | None = None,
        *,
        logged: bool = True,
        rollups: RollupHook | None = None,
        rollup_intervals: Sequence[RetainedInterval] = (),
        cells: CellStore | None = None,
    ) -> WritePath:
        """``logged``: keep the write-ahead log (``tsd.storage.wal.enable``); ``tsdb
        import`` does not (it runs beside a daemon on the same data directory, whose log
        is the daemon's, and an interrupted import is simply run again). ``rollups``:
        tsd's own rollups, computed as rows are written (tsd.rollups.compute).
        ``rollup_intervals``: the rollup configuration in force (its tables are under
        retention with the data table). ``cells``: the stores of rollup and histogram
        puts (the daemon's; ``tsdb import`` takes neither)."""
        meta = MetaService(storage, uids, config, registry)
        wal = None
        if logged and config.storage.wal_enable:
            wal = WriteAheadLog(
                Path(config.storage.data_dir) / WAL_DIRECTORY,
                registry,
                segment_bytes=config.storage.wal_segment_bytes,
            )
        cfg = config.storage
        # On HBase the log also spools what HBase cannot take (an outage): tsd.write.spool.
        spool_max_bytes = cfg.wal_max_bytes if cfg.backend == "hbase" else None
        # On the embedded store, points wait in the in-memory head: tsd.head.
        sink = None
        if cfg.backend == "embedded" and not cfg.enable_appends:
            sink = build_head_sink(
                storage, cfg, registry, wal=wal, wall_clock=time.time, rollups=rollups
            )
        # Where rows are stored as cells at once, their rollups are computed once closed.
        tracker = None
        if rollups is not None and sink is None:
            layout = KeyLayout.from_storage_config(cfg)
            tracker = RollupTracker(
                storage,
                cfg.data_table,
                rollups,
                registry,
                time_at=layout.tags_start - TIMESTAMP_BYTES,
                fix_duplicates=cfg.fix_duplicates,
                grace_s=config.rollups.compute_grace_s,
                wall_clock=time.time,
            )
        writer = Writer(
            storage,
            cfg,
            registry,
            limits=limits,
            wal=wal,
            spool_max_bytes=spool_max_bytes,
            head=sink,
            rollups=tracker,
            rollup_intervals=rollup_intervals,
        )
        ingest = IngestService(
            writer,
            uids,
            config.storage,
            max_series=config.core.series_cache_size,
            on_new_series=meta.tracker.on_new_series_many,
            new_series_room=meta.tracker.wait_room,
            registry=registry,
            cells=cells,
        )
        return cls(writer, ingest, meta, sink.head if sink is not None else None)

    async def start(self) -> None:
        """Replay the write-ahead log left by the last run, then start taking points."""
        await self.writer.recover()
        self.writer.start()
        self.meta.start()

    async def close(self) -> None:
        """Drain and close the writer (it compacts closed hours), then meta tracking,
        so the writer's last new series still get their meta rows."""
        await self.writer.close()
        await self.meta.close()
