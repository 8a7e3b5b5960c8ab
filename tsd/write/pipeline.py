"""The write path as the daemon and ``tsdb import`` both build it: a Writer, the ingest
service in front of it (whose new series reach meta tracking, tsd.core.meta.*), started
and closed in the right order."""

from __future__ import annotations

from dataclasses import dataclass

from tsd.config import Config
from tsd.meta.service import MetaService
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService
from tsd.write.writer import Writer, WriterLimits


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
    ) -> WritePath:
        meta = MetaService(storage, uids, config, registry)
        writer = Writer(storage, config.storage, registry, limits=limits)
        ingest = IngestService(
            writer, uids, config.storage, on_new_series=meta.tracker.on_new_series
        )
        return cls(writer, ingest, meta)

    def start(self) -> None:
        self.writer.start()
        self.meta.start()

    async def close(self) -> None:
        """Drain and close the writer (it compacts closed hours), then meta tracking,
        so the writer's last new series still get their meta rows."""
        await self.writer.close()
        await self.meta.close()
