"""Embedded-engine behaviour beyond the contract: key encoding, limits, locking, group commit."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tsd.errors import StorageError, StorageUnavailable
from tsd.storage.base import FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.embedded.cells import MAX_BATCH_CELLS, ScanCursor, scan_batch
from tsd.storage.embedded.keys import (
    KEY_LIMIT,
    cell_key,
    cell_prefix,
    decode_bucket,
    encode_bucket,
    row_after,
    row_start,
    split_row,
)


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[EmbeddedStorage]:
    storage = EmbeddedStorage(tmp_path / "store")
    await storage.create_table("t", [FamilySpec("f"), FamilySpec("fam")])
    yield storage
    await storage.close()


def random_rows(n: int) -> list[bytes]:
    rng = random.Random(11)
    alphabet = b"\x00\x01\xfe\xffa"
    return [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))) for _ in range(n)]


def test_row_encoding_preserves_memcmp_order() -> None:
    rows = sorted(set(random_rows(3000)))
    encoded = [row_start(row) + b"f\x00q" for row in rows]
    assert sorted(encoded) == encoded
    for row, key in zip(rows, encoded, strict=True):
        assert split_row(key) == (row, len(row_start(row)))
        assert row_start(row) < row_after(row)


def test_row_after_sits_between_a_row_and_the_next() -> None:
    rows = sorted(set(random_rows(3000)))
    for row, following in zip(rows, rows[1:], strict=False):
        last_cell = row_start(row) + b"\xff" * 40
        assert last_cell < row_after(row) <= row_start(following)


def test_long_qualifiers_share_a_full_length_bucket_key() -> None:
    prefix = cell_prefix(b"row", "f")
    room = KEY_LIMIT - len(prefix)
    assert cell_key(prefix, b"q" * (room - 1)) == (prefix + b"q" * (room - 1), False)
    key, bucket = cell_key(prefix, b"q" * room + b"tail")
    assert bucket
    assert len(key) == KEY_LIMIT
    assert cell_key(prefix, b"q" * room) == (key, True)


def test_bucket_values_round_trip_sorted() -> None:
    pairs = {b"b" * 600: b"", b"a" * 700: b"\x00" * 5, b"a" * 600: b"x"}
    assert decode_bucket(encode_bucket(pairs)) == sorted(pairs.items())


async def test_row_too_long_for_a_key_is_rejected(embedded: EmbeddedStorage) -> None:
    fits = b"r" * (KEY_LIMIT - len(b"\x00\x00f\x00"))
    await embedded.put("t", [Put(fits, "f", b"q" * 40, b"v")])
    row = await embedded.get("t", fits)
    assert row is not None
    assert row.value("f", b"q" * 40) == b"v"
    with pytest.raises(StorageError, match="too long"):
        await embedded.put("t", [Put(fits, "fam", b"q", b"v")])
    with pytest.raises(StorageError, match="too long"):
        await embedded.put("t", [Put(b"\x00" * 300, "f", b"q", b"v")])


async def test_a_bad_mutation_fails_alone_in_a_group(embedded: EmbeddedStorage) -> None:
    good = [embedded.put("t", [Put(b"%03d" % i, "f", b"q", b"v")]) for i in range(30)]
    bad = embedded.put("t", [Put(b"bad", "nosuchfamily", b"q", b"v")])
    results = await asyncio.gather(*good[:15], bad, *good[15:], return_exceptions=True)
    assert [type(r) for r in results].count(StorageError) == 1
    assert isinstance(results[15], StorageError)
    keys = [row.key async for row in embedded.scan("t", ScanSpec())]
    assert keys == [b"%03d" % i for i in range(30)]


async def test_concurrent_puts_share_commits(embedded: EmbeddedStorage) -> None:
    before = embedded._env.info()["last_txnid"]
    await asyncio.gather(
        *(embedded.put("t", [Put(b"%d" % i, "f", b"q", b"v")]) for i in range(200))
    )
    commits = embedded._env.info()["last_txnid"] - before
    assert commits < 100, f"{commits} commits for 200 concurrent puts: no group commit"


async def test_second_writer_is_refused(embedded: EmbeddedStorage) -> None:
    with pytest.raises(StorageUnavailable, match="another process"):
        EmbeddedStorage(embedded.path)


async def test_read_only_open_reads_and_refuses_writes(tmp_path: Path) -> None:
    writer = EmbeddedStorage(tmp_path)
    await writer.create_table("t", [FamilySpec("f")])
    await writer.put("t", [Put(b"r", "f", b"q", b"v")])
    await writer.close()
    reader = EmbeddedStorage(tmp_path, read_only=True)
    try:
        assert await reader.list_tables() == ["t"]
        assert await reader.get("t", b"r") is not None
        with pytest.raises(StorageError, match="read-only"):
            await reader.put("t", [Put(b"r", "f", b"q", b"w")])
        with pytest.raises(StorageError, match="read-only"):
            await reader.create_table("u", [FamilySpec("f")])
    finally:
        await reader.close()


def test_read_only_open_of_a_missing_store_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable):
        EmbeddedStorage(tmp_path / "nothing-here", read_only=True)
    assert not (tmp_path / "nothing-here").exists()


@pytest.mark.parametrize(
    ("table", "family"),
    [
        pytest.param("bad name", "f", id="space_in_table"),
        pytest.param("", "f", id="empty_table"),
        pytest.param("t2", "", id="empty_family"),
        pytest.param("t2", "a:b", id="colon_in_family"),
        pytest.param("t2", ".hidden", id="family_starts_with_dot"),
    ],
)
async def test_illegal_names_are_rejected(embedded: EmbeddedStorage, table, family) -> None:
    with pytest.raises(StorageError, match="illegal"):
        await embedded.create_table(table, [FamilySpec(family)])


@pytest.mark.slow
async def test_scan_batches_end_at_a_row_boundary_past_the_cell_cap(
    embedded: EmbeddedStorage,
) -> None:
    per_row = 3000
    n_rows = MAX_BATCH_CELLS // per_row + 3
    await embedded.put(
        "t",
        [
            Put(b"%03d" % r, "f", q.to_bytes(2, "big"), b"v")
            for r in range(n_rows)
            for q in range(per_row)
        ],
    )
    info = embedded._tables["t"]
    position = ScanCursor(next_key=row_start(b""), stop_key=None, remaining=None)
    with embedded._env.begin() as txn:
        first = scan_batch(txn, info, position, frozenset(), None, max_rows=1024)
    assert len(first) == MAX_BATCH_CELLS // per_row + 1
    assert position.next_key == row_start(b"%03d" % len(first))
    rows = [row async for row in embedded.scan("t", ScanSpec())]
    assert [(row.key, len(row.cells)) for row in rows] == [
        (b"%03d" % r, per_row) for r in range(n_rows)
    ]
