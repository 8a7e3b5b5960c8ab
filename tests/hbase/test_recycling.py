"""The harness's recycled stores look fresh: emptied tables stay hidden until created again."""

from __future__ import annotations

import pytest

from tests.hbase.recycling import RecyclingHBaseStorage, empty_tables
from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.errors import TableNotFound
from tsd.storage.base import Cell, FamilySpec, Put, Row

pytestmark = pytest.mark.hbase


async def test_recycled_prefix_looks_like_a_fresh_store(hbase_server: HBaseServer) -> None:
    cfg, prefix = hbase_server.storage_config(), unique_prefix()
    first = RecyclingHBaseStorage(cfg, prefix, {})
    for name, families in (("a", ["f"]), ("b", ["f", "g"])):
        assert await first.create_table(f"{prefix}{name}", [FamilySpec(f) for f in families])
    await first.put(f"{prefix}a", [Put(b"r", "f", b"q", b"old")])
    await first.close()

    leftovers = await empty_tables(cfg, prefix)
    assert sorted(leftovers) == [f"{prefix}a", f"{prefix}b"]
    second = RecyclingHBaseStorage(cfg, prefix, leftovers)
    try:
        assert [t for t in await second.list_tables() if t.startswith(prefix)] == []
        with pytest.raises(TableNotFound):
            await second.get(f"{prefix}a", b"r")
        # Same families: the emptied table comes back, empty.
        assert await second.create_table(f"{prefix}a", [FamilySpec("f")]) is True
        assert await second.create_table(f"{prefix}a", [FamilySpec("f")]) is False
        assert await second.get(f"{prefix}a", b"r") is None
        await second.put(f"{prefix}a", [Put(b"r", "f", b"q", b"new")])
        assert await second.get(f"{prefix}a", b"r") == Row(b"r", (Cell("f", b"q", b"new"),))
        # Other families: a new table.
        assert await second.create_table(f"{prefix}b", [FamilySpec("h")]) is True
        assert set(await second.families(f"{prefix}b")) == {"h"}
        assert [t for t in await second.list_tables() if t.startswith(prefix)] == [
            f"{prefix}a",
            f"{prefix}b",
        ]
    finally:
        await second.close()
        await drop_tables(hbase_server, prefix)
