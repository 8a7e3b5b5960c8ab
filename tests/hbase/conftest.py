"""Fixtures shared by the HBase parity tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.hbase.opentsdb import fresh_tables
from tests.hbase_harness import HBaseServer
from tsd.config import StorageConfig


@pytest.fixture
async def two_tables(hbase_server: HBaseServer) -> AsyncIterator[tuple[StorageConfig, ...]]:
    """Two fresh sets of OpenTSDB's tables: one for OpenTSDB's tool, one for tsd's."""
    async with fresh_tables(hbase_server) as first, fresh_tables(hbase_server) as second:
        yield first, second
