"""The embedded store's bulk read (blocks.py, _blocks.c) on entries it cannot read: the same
error as a scan, from the C helper and from the Python loop."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest

from tsd.errors import StorageError
from tsd.storage.base import FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage, blocks
from tsd.storage.embedded.keys import KEY_LIMIT, cell_prefix


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "python"])
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (b"no-row-end", "no row end"),
        (b"row\x00\x00zz\x00q", "unknown family"),
        (None, "bucket"),  # a bucket key whose value is cut short
    ],
    ids=["no_row_end", "unknown_family", "bucket"],
)
async def test_unreadable_entries_fail_as_scan_does(
    tmp_path: Path,
    entry: bytes | None,
    message: str,
    compiled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not compiled:
        monkeypatch.setattr(blocks, "_C", None)
    elif blocks._C is None:
        pytest.skip("tsd.storage.embedded._blocks not built (no C compiler)")
    storage = EmbeddedStorage(tmp_path / "store")
    try:
        await storage.create_table("t", [FamilySpec("f")])
        await storage.put("t", [Put(b"a", "f", b"q", b"before")])
        info = storage._tables["t"]
        if entry is None:
            prefix = cell_prefix(b"row", "f")
            key, value = prefix + b"x" * (KEY_LIMIT - len(prefix)), b"\x00\x00\x00\x05ab"
        else:
            key, value = entry, b"v"
        with storage._env.begin(write=True) as txn:
            txn.put(key, value, db=info.db)
        with pytest.raises(StorageError) as by_scan:
            async with aclosing(storage.scan("t", ScanSpec())) as rows:
                _ = [row async for row in rows]
        with pytest.raises(StorageError) as by_blocks:
            async with aclosing(storage.scan_blocks("t", ScanSpec())) as found:
                _ = [block async for block in found]
        assert message in str(by_scan.value)
        assert str(by_blocks.value) == str(by_scan.value)
    finally:
        await storage.close()
