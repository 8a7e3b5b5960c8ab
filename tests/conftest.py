"""Shared fixtures.

``storage`` is parametrised over the storage backends (``STORAGE_BACKENDS``):
each parameter yields a fresh, empty, isolated store. Backends that share one
server between tests (HBase) isolate by table-name prefix, so tests take table
names from ``table_prefix`` / ``storage_config``, never hard-coded.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

import tsd.native as native
from tests.hbase_harness import hbase_store
from tsd.config import StorageConfig
from tsd.storage.base import Storage
from tsd.storage.embedded import EmbeddedStorage

# Bytecode caches are written even where PYTHONDONTWRITEBYTECODE is set (this machine's
# shell sets it): without them pytest rewrites the asserts of every test module again in
# each run and each xdist worker (collecting the fast loop took 7.2-9.3 s a process, 3.3-4.6
# s with the caches), and every daemon or tool a test starts compiles tsd's modules again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

#: the real HBase, started once per run by scripts/hbase (tests/hbase_harness.py); the
#: session's guard that keeps every test off a user's data (tests/isolation.py)
pytest_plugins = ["tests.hbase_harness", "tests.isolation"]


@dataclasses.dataclass(frozen=True)
class StoreUnderTest:
    """A fresh store and the prefix that isolates its tables."""

    storage: Storage
    table_prefix: str


#: builds a fresh isolated store; gets the test's tmp_path
StoreFactory = Callable[[Path], AbstractAsyncContextManager[StoreUnderTest]]


@asynccontextmanager
async def embedded_store(tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    storage = EmbeddedStorage(tmp_path / "embedded-store")
    try:
        # A prefix even here, so a test that hard-codes "tsdb" fails on every backend.
        yield StoreUnderTest(storage, "test_")
    finally:
        await storage.close()


#: backend name -> factory; add a backend here and to STORAGE_PARAMS
STORAGE_BACKENDS: dict[str, StoreFactory] = {"embedded": embedded_store, "hbase": hbase_store}
STORAGE_PARAMS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("hbase", id="hbase", marks=pytest.mark.hbase),
]


@pytest.fixture(params=STORAGE_PARAMS)
async def store_under_test(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreUnderTest]:
    async with STORAGE_BACKENDS[request.param](tmp_path) as store:
        yield store


@pytest.fixture
def storage(store_under_test: StoreUnderTest) -> Storage:
    """A fresh empty store, once per backend."""
    return store_under_test.storage


@pytest.fixture
def table_prefix(store_under_test: StoreUnderTest) -> str:
    return store_under_test.table_prefix


@pytest.fixture
def storage_config(table_prefix: str) -> StorageConfig:
    """StorageConfig naming this test's isolated tables (made by storage_setup.ensure_tables)."""
    return StorageConfig(
        data_table=f"{table_prefix}tsdb",
        uid_table=f"{table_prefix}tsdb-uid",
        tree_table=f"{table_prefix}tsdb-tree",
        meta_table=f"{table_prefix}tsdb-meta",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """``TSD_REQUIRE_NATIVE=1`` (CI): stop at once when a compiled helper of setup.py did not
    build, rather than let its C-versus-Python tests turn into skips (tsd/native.py).
    ``TSD_DISABLE_NATIVE=1`` (scripts/test's fallback run) hides them on purpose: no check."""
    if native.required() and not native.disabled():
        missing = native.missing()
        if missing:
            reasons = "; ".join(f"{name}: {why}" for name, why in missing.items())
            raise pytest.UsageError(f"TSD_REQUIRE_NATIVE is set and helpers are missing: {reasons}")
