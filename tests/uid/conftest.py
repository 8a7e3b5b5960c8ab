"""UID fixtures: the UID table on the shared ``storage`` fixture, configs and UniqueIds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tsd.config import Config, StorageConfig
from tsd.storage.base import Storage
from tsd.storage_setup import opentsdb_tables
from tsd.uid.cache import UidCache
from tsd.uid.uniqueid import UniqueId


@pytest.fixture
async def uid_table(storage: Storage, storage_config: StorageConfig) -> str:
    """The (isolated) UID table, created."""
    table = storage_config.uid_table
    # only the UID table: creating a table on HBase takes about a second
    await storage.create_table(table, opentsdb_tables(storage_config)[table])
    return table


@pytest.fixture
def make_config(storage_config: StorageConfig, uid_table: str) -> Callable[..., Config]:
    """``make_config(auto_create_metrics=True, ...)``: a Config on this test's tables
    (created)."""

    def make(**core: Any) -> Config:
        base = Config()
        return dataclasses.replace(
            base, storage=storage_config, core=dataclasses.replace(base.core, **core)
        )

    return make


@pytest.fixture
def make_uid(storage: Storage, uid_table: str) -> Callable[..., UniqueId]:
    """``make_uid(kind="tagk", width=3, auto_create=True, max_entries=1000, store=None,
    block_size=4096, random_ids=False)``."""

    def make(
        kind: str = "tagk",
        width: int = 3,
        *,
        auto_create: bool = True,
        max_entries: int = 1000,
        store: Storage | None = None,
        block_size: int = 4096,
        random_ids: bool = False,
    ) -> UniqueId:
        return UniqueId(
            store if store is not None else storage,
            uid_table,
            kind,
            width,
            UidCache(max_entries),
            auto_create=auto_create,
            block_size=block_size,
            random_ids=random_ids,
        )

    return make
