"""The write path as the daemon and ``tsdb import`` both build it: a Writer, the ingest
service in front of it (whose new series reach meta tracking, tsd.core.meta.*), started
and closed in the right order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsd.config import Config
from tsd.meta.service import MetaService
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.uid.service import UidService
from tsd.wal import WriteAheadLog
from tsd.write.ingest import IngestService
from tsd.write.writer import Writer, WriterLimits

#: the log's directory under tsd.storage.data_dir
WAL_DIRECTORY = "wal"


@dataclass(slots=True)
class WritePath:
    writer: Writer
    ingest: IngestService
    meta: MetaService

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
    ) -> WritePath:
        """``logged``: keep the write-ahead log (``tsd.storage.wal.enable``); ``tsdb
        import`` does not (it runs beside a daemon on the same data directory, whose log
        is the daemon's, and an interrupted import is simply run again)."""
        meta = MetaService(storage, uids, config, registry)
        wal = None
        if logged and config.storage.wal_enable:
            wal = WriteAheadLog(
                Path(config.storage.data_dir) / WAL_DIRECTORY,
                registry,
                segment_bytes=config.storage.wal_segment_bytes,
            )
        # On HBase the log also spools what HBase cannot take (an outage): tsd.write.spool.
        spool_max_bytes = (
            config.storage.wal_max_bytes if config.storage.backend == "hbase" else None
        )
        writer = Writer(
            storage,
            config.storage,
            registry,
            limits=limits,
            wal=wal,
            spool_max_bytes=spool_max_bytes,
        )
        ingest = IngestService(
            writer,
            uids,
            config.storage,
            on_new_series=meta.tracker.on_new_series,
            registry=registry,
        )
        return cls(writer, ingest, meta)

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
