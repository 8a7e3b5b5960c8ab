"""``tsdb check-store`` and ``tsdb compact-store`` through the real command line."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.tools.toolkit import tsdb
from tsd.codec import compact_row, encode_point
from tsd.storage.base import Delete, FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.embedded.keys import packed_key

pytestmark = pytest.mark.slow
BASE = 1356998400


def cell(seed: int) -> tuple[bytes, bytes]:
    found = compact_row([encode_point(BASE + 10 * i, (i * seed) % 977)[1:] for i in range(360)])
    assert found is not None
    return found


async def fill(path: Path, rows: int) -> list[bytes]:
    storage = EmbeddedStorage(path)
    keys = [b"\x00\x00\x01" + struct.pack(">I", BASE) + struct.pack(">I", i) for i in range(rows)]
    try:
        await storage.create_table("tsdb", [FamilySpec("t")])
        await storage.put("tsdb", [Put(key, "t", *cell(i)) for i, key in enumerate(keys)])
    finally:
        await storage.close()
    return keys


async def read_all(path: Path) -> list[tuple[bytes, list[tuple[str, bytes, bytes]]]]:
    storage = EmbeddedStorage(path, read_only=True)
    try:
        return [
            (row.key, [tuple(c) for c in row.cells])  # type: ignore[misc]
            async for row in storage.scan("tsdb", ScanSpec())
        ]
    finally:
        await storage.close()


async def test_check_store_reports_and_fixes_undecodable_rows(tmp_path: Path) -> None:
    path = tmp_path / "data"
    keys = await fill(path, 20)
    result = await tsdb(tmp_path, "check-store", "--data-dir", str(path))
    assert (result.code, result.out) == (0, "")
    storage = EmbeddedStorage(path)
    try:
        with storage._env.begin(write=True, db=storage._tables["tsdb"].packed) as txn:
            stored = txn.get(packed_key(keys[3], "t"))
            assert stored is not None
            txn.put(packed_key(keys[3], "t"), stored[:-7])  # torn
    finally:
        await storage.close()
    result = await tsdb(tmp_path, "check-store", "--data-dir", str(path))
    assert result.code == 1
    table, key, reason = result.out.strip().split("\t")
    assert (table, key) == ("tsdb", packed_key(keys[3], "t").hex().upper())
    assert "corrupt embedded packed value" in reason
    result = await tsdb(tmp_path, "check-store", "--fix", "--data-dir", str(path))
    assert result.code == 0
    assert "1 undecodable entries deleted" in result.err
    assert [key for key, _ in await read_all(path)] == keys[:3] + keys[4:]
    result = await tsdb(tmp_path, "check-store", "--data-dir", str(path))
    assert (result.code, result.out) == (0, "")


async def test_compact_store_gives_space_back_and_keeps_every_cell(tmp_path: Path) -> None:
    path = tmp_path / "data"
    keys = await fill(path, 3000)
    storage = EmbeddedStorage(path)
    try:
        await storage.delete("tsdb", [Delete(key) for key in keys[:2500]])
        # the daemon holds the store: refused, nothing touched
        held = (path / "data.mdb").stat().st_size
        result = await tsdb(tmp_path, "compact-store", "--data-dir", str(path))
        assert result.code == 3
        assert "held by a running daemon" in result.err
        assert (path / "data.mdb").stat().st_size == held
    finally:
        await storage.close()
    before = await read_all(path)
    result = await tsdb(tmp_path, "compact-store", "--data-dir", str(path))
    assert result.code == 0, result.err
    after = (path / "data.mdb").stat().st_size
    assert after < held / 3
    assert await read_all(path) == before
    storage = EmbeddedStorage(path)  # still a working store
    try:
        await storage.put("tsdb", [Put(keys[0], "t", *cell(0))])
        assert await storage.get("tsdb", keys[0]) is not None
    finally:
        await storage.close()
