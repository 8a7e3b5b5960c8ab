"""Writer fixtures: the four tables on the shared ``storage`` fixture and a writer factory."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tmpfs import small_tmpfs
from tsd.config import Config, StorageConfig
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.storage_setup import opentsdb_tables
from tsd.uid.service import UidService
from tsd.wal import WriteAheadLog
from tsd.write.ingest import IngestService
from tsd.write.schedule import CompactionSchedule
from tsd.write.writer import Writer, WriterLimits


@pytest.fixture
async def tables(storage: Storage, storage_config: StorageConfig) -> StorageConfig:
    """The data and UID tables (the write path uses no other; each HBase table costs ~1 s)."""
    wanted = (storage_config.uid_table, storage_config.data_table)
    for table, families in opentsdb_tables(storage_config).items():
        if table in wanted:
            await storage.create_table(table, families)
    return storage_config


MakeWriter = Callable[..., IngestService]


@pytest.fixture
async def make_writer(storage: Storage, tables: StorageConfig) -> AsyncIterator[MakeWriter]:
    """``make_writer(store=None, limits=None, schedule=None, wall_clock=None, wal=None,
    spool_max_bytes=None, **storage_cfg)``:
    a started Writer behind its ingest service (``.writer``).

    Metrics are auto-created unless ``auto_create_metrics=False`` is given.
    """
    made: list[Writer] = []

    def make(
        store: Storage | None = None,
        *,
        limits: WriterLimits | None = None,
        schedule: CompactionSchedule | None = None,
        wall_clock: Callable[[], float] | None = None,
        wal: WriteAheadLog | None = None,
        spool_max_bytes: int | None = None,
        auto_create_metrics: bool = True,
        **storage_cfg: Any,
    ) -> IngestService:
        base = Config()
        cfg = dataclasses.replace(
            base,
            storage=dataclasses.replace(tables, **storage_cfg),
            core=dataclasses.replace(base.core, auto_create_metrics=auto_create_metrics),
        )
        target = store if store is not None else storage
        extra: dict[str, Any] = {}
        if wall_clock is not None:
            extra["wall_clock"] = wall_clock
        writer = Writer(
            target,
            cfg.storage,
            StatsRegistry(),
            limits=limits,
            schedule=schedule,
            wal=wal,
            spool_max_bytes=spool_max_bytes,
            **extra,
        )
        writer.start()
        made.append(writer)
        return IngestService(writer, UidService(target, cfg), cfg.storage)

    yield make
    for writer in made:
        await writer.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (skipped where mounting is not allowed): a disk that fills up."""
    with small_tmpfs(tmp_path / "small", "256k") as mount_point:
        yield mount_point
