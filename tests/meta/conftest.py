"""Meta fixtures: the four tables on the shared ``storage`` fixture, a MetaService and a Writer
wired to its tracker, as the daemon wires them."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.write.points import add
from tsd.config import Config, StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.meta.service import MetaService
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.storage_setup import ensure_tables
from tsd.uid.service import UidService
from tsd.write.batch_writer import Writer
from tsd.write.ingest import IngestService

#: a fixed "now" for created times
NOW_S = 1_700_000_000


@dataclass
class MetaEnv:
    """A store with its tables, the UIDs, the meta service and a writer feeding it."""

    storage: Storage
    config: Config
    uids: UidService
    meta: MetaService
    ingest: IngestService

    @property
    def writer(self) -> Writer:
        return self.ingest.writer

    async def write(self, metric: str, ts: int, value: int | float, **tags: str) -> None:
        """Add one point and wait until storage (and the series index) hold it."""
        await add(self.ingest, DataPoint(metric, ts, value, make_tags(tags)))
        await self.writer.flush()
        await self.meta.tracker.flush()


MakeEnv = Callable[..., Awaitable[MetaEnv]]


@pytest.fixture
async def tables(storage: Storage, storage_config: StorageConfig) -> StorageConfig:
    await ensure_tables(storage, storage_config)
    return storage_config


@pytest.fixture
async def make_env(storage: Storage, tables: StorageConfig) -> AsyncIterator[MakeEnv]:
    """``await make_env(store=None, storage_cfg={...}, start_tracker=True, **core)``: core
    keys are CoreConfig attributes (``meta_enable_tsuid_tracking=True``); metrics are
    auto-created."""
    made: list[MetaEnv] = []

    async def make(
        store: Storage | None = None,
        storage_cfg: dict[str, Any] | None = None,
        start_tracker: bool = True,
        **core: Any,
    ) -> MetaEnv:
        base = Config()
        config = dataclasses.replace(
            base,
            storage=dataclasses.replace(tables, **(storage_cfg or {})),
            core=dataclasses.replace(base.core, auto_create_metrics=True, **core),
        )
        target = store if store is not None else storage
        uids = UidService(target, config)
        registry = StatsRegistry()
        meta = MetaService(target, uids, config, registry, wall_clock=lambda: float(NOW_S))
        writer = Writer(target, config.storage, registry)
        ingest = IngestService(
            writer, uids, config.storage, on_new_series=meta.tracker.on_new_series_many
        )
        writer.start()
        if start_tracker:
            meta.start()
        env = MetaEnv(target, config, uids, meta, ingest)
        made.append(env)
        return env

    yield make
    for env in made:
        await env.writer.close()
        await env.meta.close()
