"""MetaService: the meta stores, the series lookup and the tracker of one TSD, built once.

The daemon builds it after the UidService, hands :meth:`MetaTracker.on_new_series` to the
Writer, starts the tracker with the writer and closes it after the writer (so series queued
by the last points are written).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tsd.codec import KeyLayout
from tsd.config import Config
from tsd.meta.annotations import AnnotationStore
from tsd.meta.lookup import SeriesLookup
from tsd.meta.tracking import MetaTracker
from tsd.meta.tsmeta import TsMetaStore
from tsd.meta.uidmeta import UidMetaStore
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.uid.service import UidService


class MetaService:
    """UIDMeta, TSMeta, annotations, lookups and meta tracking over one store."""

    def __init__(
        self,
        storage: Storage,
        uids: UidService,
        config: Config,
        registry: StatsRegistry | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``wall_clock``: the time written as ``created`` by meta tracking."""
        cfg = config.storage
        self.layout = KeyLayout.from_storage_config(cfg)
        self.uids = uids
        self.uid_metas = UidMetaStore(storage, cfg.uid_table, uids)
        self.tsmetas = TsMetaStore(storage, cfg.meta_table, self.layout, uids, self.uid_metas)
        self.annotations = AnnotationStore(storage, cfg.data_table, self.layout)
        self.tracker = MetaTracker(
            storage,
            cfg.meta_table,
            self.layout,
            config.core,
            uids,
            self.tsmetas,
            self.uid_metas,
            registry,
            wall_clock=wall_clock,
        )
        self.lookup = SeriesLookup(
            storage, cfg.meta_table, self.layout, uids, before_read=self.tracker.flush
        )

    def start(self) -> None:
        self.tracker.start()

    async def close(self) -> None:
        await self.tracker.close()
