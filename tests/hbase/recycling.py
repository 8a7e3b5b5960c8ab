"""Fresh-looking HBase stores for every test, without creating tables for every test.

Creating an HBase table takes about 0.5 s and most tests create four
(OpenTSDB's), so a new table-name prefix per test would spend minutes of the
suite in ``createTable``. Instead a prefix is reused: after a test, every table
under it is emptied (its rows deleted) and remembered with its families; the
next test that gets the prefix sees those tables as absent until it creates
them, and creating one with the same families just reveals the emptied table.
Everything else is the real :class:`HBaseStorage` on the real server, and the
tables keep their real names, so another process given the same configuration
(a daemon, a command-line tool) sees the same tables.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tsd.config import StorageConfig
from tsd.errors import TableNotFound
from tsd.storage.base import Delete, FamilySpec, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.pool import Gateway
from tsd.storage_setup import hbase_settings

T = TypeVar("T")

#: HBase reports "forever" as this TTL
FOREVER_S = 2**31 - 1

#: table name -> its families, for the emptied tables under a prefix
Leftovers = dict[str, tuple[FamilySpec, ...]]


class RecyclingHBaseStorage(HBaseStorage):
    """HBaseStorage for one test, under a prefix whose ``leftovers`` look absent until created."""

    def __init__(self, cfg: StorageConfig, prefix: str, leftovers: Leftovers) -> None:
        super().__init__(hbase_settings(cfg))
        self._prefix = prefix
        self._leftovers = dict(leftovers)
        self._created: set[str] = set()

    def _hidden(self, table: str) -> bool:
        return table in self._leftovers and table not in self._created

    async def _call(
        self,
        operation: str,
        table: str | None,
        call: Callable[[Any], Awaitable[T]],
        *,
        idempotent: bool,
        gateway: Gateway | None = None,
        read: bool = False,
        admin: bool = False,
    ) -> T:
        if table is not None and self._hidden(table):
            raise TableNotFound(table)
        return await super()._call(
            operation, table, call, idempotent=idempotent, gateway=gateway, read=read, admin=admin
        )

    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        if self._hidden(table):
            if self._leftovers[table] == as_leftover(families):
                self._created.add(table)
                return True
            del self._leftovers[table]  # visible again, to drop it
            await super().drop_table(table)
        created = await super().create_table(table, families)
        self._created.add(table)
        return created

    async def list_tables(self) -> list[str]:
        return [table for table in await super().list_tables() if not self._hidden(table)]

    async def drop_table(self, table: str) -> None:
        await super().drop_table(table)
        self._created.discard(table)
        self._leftovers.pop(table, None)


def as_leftover(families: Sequence[FamilySpec]) -> tuple[FamilySpec, ...]:
    """Families as HBase reports them: by name, option names upper-case, no TTL as None."""
    normalized = (
        FamilySpec(
            spec.name,
            spec.max_versions,
            spec.compression.upper(),
            spec.bloom_filter.upper(),
            spec.block_cache,
            spec.ttl_s or None,
        )
        for spec in families
    )
    return tuple(sorted(normalized, key=lambda spec: spec.name))


def family_spec(name: str, descriptor: Any) -> FamilySpec:
    """The FamilySpec a Thrift ColumnDescriptor was created from."""
    ttl = descriptor.timeToLive
    return FamilySpec(
        name,
        descriptor.maxVersions,
        descriptor.compression.decode(),
        descriptor.bloomFilterType.decode(),
        descriptor.blockCacheEnabled,
        None if ttl in (-1, FOREVER_S) else ttl,
    )


async def empty_tables(cfg: StorageConfig, prefix: str) -> Leftovers:
    """Delete every row of every table under ``prefix``; those tables and their families."""
    admin = HBaseStorage(hbase_settings(cfg))
    leftovers: Leftovers = {}
    try:
        for table in await admin.list_tables():
            if not table.startswith(prefix):
                continue
            families = await admin.families(table)
            deletes = [
                Delete(row.key, family)
                async for row in admin.scan(table, ScanSpec(batch_rows=5000))
                for family in families
            ]
            await admin.delete(table, deletes)
            leftovers[table] = as_leftover([family_spec(name, d) for name, d in families.items()])
    finally:
        await admin.close()
    # The next test's writes must land in a later millisecond than these delete markers.
    await asyncio.sleep(0.002)
    return leftovers
