"""The storage contract: every backend passes this one suite (see tsd/storage/base.py)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncGenerator
from contextlib import aclosing

import pytest

from tests.storage.conftest import MakeTable
from tsd.errors import StorageError, StorageUnavailable, TableNotFound
from tsd.storage.base import (
    Block,
    BlockWork,
    Cell,
    CellBlock,
    CellColumn,
    CheckAndPut,
    Delete,
    FamilySpec,
    PointBlock,
    Put,
    Row,
    RowFilter,
    ScanSpec,
    Storage,
)
from tsd.storage.embedded import EmbeddedStorage


async def scan_all(storage: Storage, table: str, spec: ScanSpec | None = None) -> list[Row]:
    return [row async for row in storage.scan(table, spec or ScanSpec())]


async def scan_keys(storage: Storage, table: str, spec: ScanSpec | None = None) -> list[bytes]:
    return [row.key for row in await scan_all(storage, table, spec)]


async def put_rows(storage: Storage, table: str, rows: list[bytes]) -> None:
    shuffled = list(rows)
    random.Random(3).shuffle(shuffled)
    await storage.put(table, [Put(row, "f", b"q", row) for row in shuffled])


# Rows chosen to break naive encodings: every single byte, runs of 00 and FF,
# and keys that are prefixes of each other on both sides of 00 and FF.
BINARY_ROWS = sorted(
    {bytes([b]) for b in range(256)}
    | {
        b"\x00\x00",
        b"\x00\x00\x00",
        b"\x00\x01",
        b"\x00\xff",
        b"\x00\xff\x00",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\xff",
        b"\xff\x00\x00",
        b"a\x00",
        b"a\x00\x00",
        b"a\x00\xff",
        b"a\x00b",
        b"a\x01",
        b"a\xff",
        b"ab",
        b"ab\x00",
        bytes(range(256)),
        bytes(range(255, -1, -1)),
    }
)


# -- tables ------------------------------------------------------------------------------------


async def test_create_table_is_idempotent(storage: Storage, table_prefix: str) -> None:
    name = f"{table_prefix}idem"
    assert await storage.create_table(name, [FamilySpec("f")]) is True
    assert await storage.create_table(name, [FamilySpec("f")]) is False
    assert name in await storage.list_tables()


async def test_concurrent_create_table_creates_once(storage: Storage, table_prefix: str) -> None:
    name = f"{table_prefix}race"
    results = await asyncio.gather(
        *(storage.create_table(name, [FamilySpec("f")]) for _ in range(5))
    )
    assert sorted(results) == [False, False, False, False, True]


async def test_create_table_keeps_existing_data(storage: Storage, table: str) -> None:
    await storage.put(table, [Put(b"r", "f", b"q", b"v")])
    await storage.create_table(table, [FamilySpec("f"), FamilySpec("g")])
    assert await storage.get(table, b"r") == Row(b"r", (Cell("f", b"q", b"v"),))


async def test_list_tables_is_sorted(storage: Storage, table_prefix: str) -> None:
    for name in ("tsdb-uid", "tsdb", "tsdb-meta"):
        await storage.create_table(f"{table_prefix}{name}", [FamilySpec("f")])
    ours = [name for name in await storage.list_tables() if name.startswith(table_prefix)]
    assert ours == [f"{table_prefix}tsdb", f"{table_prefix}tsdb-meta", f"{table_prefix}tsdb-uid"]


MISSING_TABLE_CALLS = [
    pytest.param(lambda s, t: s.put(t, [Put(b"r", "f", b"q", b"v")]), id="put"),
    pytest.param(lambda s, t: s.delete(t, [Delete(b"r")]), id="delete"),
    pytest.param(lambda s, t: s.get(t, b"r"), id="get"),
    pytest.param(lambda s, t: s.get_many(t, [b"r"]), id="get_many"),
    pytest.param(lambda s, t: scan_all(s, t), id="scan"),
    pytest.param(lambda s, t: s.increment(t, b"r", "f", b"q"), id="increment"),
    pytest.param(
        lambda s, t: s.check_and_put(t, b"r", "f", b"q", None, Put(b"r", "f", b"q", b"v")),
        id="check_and_put",
    ),
    pytest.param(lambda s, t: s.append(t, b"r", "f", b"q", b"v"), id="append"),
    pytest.param(
        lambda s, t: s.check_and_put_many(
            t, [CheckAndPut("f", b"q", None, Put(b"r", "f", b"q", b"v"))]
        ),
        id="check_and_put_many",
    ),
    pytest.param(
        lambda s, t: s.put_if_absent_column(t, CellColumn("f", b"q", [b"r"], [b"v"])),
        id="put_if_absent_column",
    ),
    pytest.param(
        lambda s, t: s.put_column(t, CellColumn("f", b"q", [b"r"], [b"v"])), id="put_column"
    ),
    pytest.param(lambda s, t: s.get_column(t, "f", b"q", [b"r"]), id="get_column"),
]


@pytest.mark.parametrize("call", MISSING_TABLE_CALLS)
async def test_missing_table_raises_table_not_found(storage: Storage, table_prefix, call) -> None:
    with pytest.raises(TableNotFound):
        await call(storage, f"{table_prefix}nosuchtable")


# -- cells and rows ----------------------------------------------------------------------------


async def test_get_missing_row_returns_none(storage: Storage, table: str) -> None:
    await storage.put(table, [Put(b"a", "f", b"q", b"v"), Put(b"ab", "f", b"q", b"v")])
    assert await storage.get(table, b"aa") is None
    assert await storage.get(table, b"") is None
    assert await storage.get(table, b"a\x00") is None


async def test_cells_come_back_sorted_by_family_then_qualifier(storage: Storage, table) -> None:
    cells = [
        Cell("g", b"\x00", b"1"),
        Cell("f", b"\xff", b"2"),
        Cell("f", b"", b"3"),
        Cell("g", b"", b"4"),
        Cell("f", b"\x00\x00", b"5"),
        Cell("f", b"\x00", b"6"),
        Cell("f", b"a", b"7"),
    ]
    await storage.put(table, [Put(b"row", c.family, c.qualifier, c.value) for c in cells])
    expected = tuple(sorted(cells, key=lambda c: (c.family, c.qualifier)))
    assert await storage.get(table, b"row") == Row(b"row", expected)
    assert await scan_all(storage, table) == [Row(b"row", expected)]


async def test_values_keep_every_byte_and_may_be_empty(storage: Storage, table: str) -> None:
    values = {b"empty": b"", b"all": bytes(range(256)), b"zeros": b"\x00" * 100}
    await storage.put(table, [Put(row, "f", b"q", value) for row, value in values.items()])
    for row, value in values.items():
        assert await storage.get(table, row) == Row(row, (Cell("f", b"q", value),))


async def test_put_overwrites_the_cell(storage: Storage, table: str) -> None:
    await storage.put(table, [Put(b"r", "f", b"q", b"old")])
    await storage.put(table, [Put(b"r", "f", b"q", b"new")])
    assert await storage.get(table, b"r") == Row(b"r", (Cell("f", b"q", b"new"),))


async def test_mutations_apply_in_order(storage: Storage, table: str) -> None:
    await storage.mutate(
        table,
        [
            Put(b"r", "f", b"gone", b"1"),
            Delete(b"r", "f", b"gone"),
            Delete(b"r", "f", b"back"),
            Put(b"r", "f", b"back", b"2"),
            Put(b"r", "f", b"twice", b"3"),
            Put(b"r", "f", b"twice", b"4"),
        ],
    )
    row = await storage.get(table, b"r")
    assert row == Row(b"r", (Cell("f", b"back", b"2"), Cell("f", b"twice", b"4")))


async def test_large_batch_of_cells(storage: Storage, table: str) -> None:
    puts = [
        Put(i.to_bytes(4, "big"), "f", j.to_bytes(2, "big"), (i * 100 + j).to_bytes(4, "big"))
        for i in range(1000)
        for j in range(20)
    ]
    random.Random(5).shuffle(puts)
    await storage.put(table, puts)
    rows = await scan_all(storage, table, ScanSpec(batch_rows=128))
    assert [row.key for row in rows] == [i.to_bytes(4, "big") for i in range(1000)]
    assert sum(len(row.cells) for row in rows) == 20_000
    assert rows[777].value("f", (13).to_bytes(2, "big")) == (77713).to_bytes(4, "big")


async def test_get_many_returns_existing_rows_in_the_order_asked(storage, table) -> None:
    await put_rows(storage, table, [b"a", b"b", b"c"])
    found = await storage.get_many(table, [b"c", b"x", b"a"])
    assert [row.key for row in found] == [b"c", b"a"]


async def test_unknown_family_is_rejected(storage: Storage, table: str) -> None:
    with pytest.raises(StorageError):
        await storage.put(table, [Put(b"r", "nosuchfamily", b"q", b"v")])
    with pytest.raises(StorageError):
        await storage.get(table, b"r", families=["nosuchfamily"])


@pytest.mark.parametrize("family", ["nosuchfamily", ""])
async def test_unknown_family_after_known_ones_is_rejected(
    storage: Storage, table: str, family: str
) -> None:
    """Every put's family is checked, not only where the row or family changes from the
    put before (the embedded store checks each family once per run of them)."""
    with pytest.raises(StorageError):
        await storage.put(table, [Put(b"r", "f", b"q1", b"v"), Put(b"r", family, b"q2", b"v")])
    checks = [
        claim_cell(b"r2", b"1"),
        CheckAndPut(family, b"id", None, Put(b"r3", family, b"id", b"1")),
    ]
    with pytest.raises(StorageError):
        await storage.check_and_put_many(table, checks)


async def test_empty_row_key_is_rejected(storage: Storage, table: str) -> None:
    with pytest.raises(StorageError):
        await storage.put(table, [Put(b"", "f", b"q", b"v")])


async def test_long_qualifiers_keep_their_order(storage: Storage, table: str) -> None:
    # OpenTSDB's compacted columns concatenate qualifiers: thousands of bytes, sharing prefixes.
    base = bytes(range(256)) * 3
    qualifiers = [b"", b"\x00", b"z" * 100]
    qualifiers += [base[:n] for n in (400, 479, 480, 481, 490, 500, 511, 512, 520)]
    qualifiers += [base + b"\x00", base + b"\x01", base + b"\x01\x00", base * 14]
    qualifiers += [b"\xff" * 600, b"\xff" * 601, b"\xff" * 599 + b"\x00"]
    cells = [Cell("f", q, len(q).to_bytes(4, "big") + q[-1:]) for q in qualifiers]
    shuffled = list(cells)
    random.Random(9).shuffle(shuffled)
    await storage.put(table, [Put(b"row", c.family, c.qualifier, c.value) for c in shuffled])
    await storage.put(table, [Put(b"row0", "f", base * 14, b"other row")])
    expected = tuple(sorted(cells, key=lambda c: c.qualifier))
    assert await storage.get(table, b"row") == Row(b"row", expected)
    rows = await scan_all(storage, table)
    assert rows == [Row(b"row", expected), Row(b"row0", (Cell("f", base * 14, b"other row"),))]

    await storage.delete(table, [Delete(b"row", "f", base + b"\x01")])
    after = await storage.get(table, b"row")
    assert after is not None
    assert [c.qualifier for c in after.cells] == [
        c.qualifier for c in expected if c.qualifier != base + b"\x01"
    ]


async def test_long_row_keys(storage: Storage, table: str) -> None:
    rows = [b"\x00" * 200, b"\x00" * 199 + b"\x01", b"\xff" * 300, b"a" * 300 + b"\x00"]
    await put_rows(storage, table, rows)
    assert await scan_keys(storage, table) == sorted(rows)
    assert await scan_keys(storage, table, ScanSpec(start=b"\x00" * 201)) == sorted(rows)[1:]


# -- deletes -----------------------------------------------------------------------------------


async def filled_row(storage: Storage, table: str) -> None:
    await storage.put(
        table,
        [
            Put(b"r", "f", b"a", b"1"),
            Put(b"r", "f", b"b", b"2"),
            Put(b"r", "g", b"a", b"3"),
            Put(b"r\x00", "f", b"a", b"next row"),
            Put(b"q", "f", b"a", b"previous row"),
        ],
    )


async def test_delete_cell(storage: Storage, table: str) -> None:
    await filled_row(storage, table)
    await storage.delete(table, [Delete(b"r", "f", b"a")])
    assert await storage.get(table, b"r") == Row(
        b"r", (Cell("f", b"b", b"2"), Cell("g", b"a", b"3"))
    )


async def test_delete_family(storage: Storage, table: str) -> None:
    await filled_row(storage, table)
    await storage.delete(table, [Delete(b"r", "f")])
    assert await storage.get(table, b"r") == Row(b"r", (Cell("g", b"a", b"3"),))


async def test_delete_row_leaves_neighbours(storage: Storage, table: str) -> None:
    await filled_row(storage, table)
    await storage.delete(table, [Delete(b"r")])
    assert await storage.get(table, b"r") is None
    assert await scan_keys(storage, table) == [b"q", b"r\x00"]


async def test_delete_of_missing_cells_is_a_no_op(storage: Storage, table: str) -> None:
    await storage.delete(
        table, [Delete(b"nothing"), Delete(b"nothing", "f"), Delete(b"nothing", "f", b"q")]
    )
    assert await scan_all(storage, table) == []


# -- scans -------------------------------------------------------------------------------------


async def test_scan_orders_binary_rows_by_memcmp(storage: Storage, table: str) -> None:
    await put_rows(storage, table, BINARY_ROWS)
    assert await scan_keys(storage, table) == BINARY_ROWS
    assert await scan_keys(storage, table, ScanSpec(batch_rows=7)) == BINARY_ROWS


BOUNDS = [
    pytest.param(b"", b"", id="everything"),
    pytest.param(b"\x00", b"", id="from_00"),
    pytest.param(b"\x00\x00", b"\x00\xff", id="between_00_runs"),
    pytest.param(b"a", b"b", id="prefix_a"),
    pytest.param(b"a\x00", b"a\x01", id="a00_prefix"),
    pytest.param(b"a\x00\x00", b"a\x00\xff", id="stop_excludes_a00ff"),
    pytest.param(b"ab", b"ab\x00", id="one_row"),
    pytest.param(b"\xfe", b"", id="high_to_end"),
    pytest.param(b"\xff\xff", b"\xff\xff\xff\xff", id="ff_runs"),
    pytest.param(b"b", b"a", id="stop_before_start"),
    pytest.param(b"\xff\xff\xff\xff", b"", id="past_the_end"),
]


@pytest.mark.parametrize(("start", "stop"), BOUNDS)
async def test_scan_bounds(storage: Storage, table: str, start: bytes, stop: bytes) -> None:
    await put_rows(storage, table, BINARY_ROWS)
    expected = [r for r in BINARY_ROWS if start <= r and (not stop or r < stop)]
    assert await scan_keys(storage, table, ScanSpec(start=start, stop=stop)) == expected
    small = ScanSpec(start=start, stop=stop, batch_rows=2)
    assert await scan_keys(storage, table, small) == expected


@pytest.mark.parametrize(("start", "stop"), BOUNDS)
async def test_holds_rows_is_false_only_where_no_row_is(
    storage: Storage, table: str, start: bytes, stop: bytes
) -> None:
    # Storage.holds_rows: a read skips its scans where it answers False (rows all in the
    # head), so False must mean that no row is there; the embedded store answers exactly.
    from tsd.storage.embedded import EmbeddedStorage

    await put_rows(storage, table, BINARY_ROWS)
    expected = [r for r in BINARY_ROWS if start <= r and (not stop or r < stop)]
    holds = await storage.holds_rows(table, start, stop)
    assert holds or not expected
    if isinstance(storage, EmbeddedStorage):
        assert holds == bool(expected)
        assert not await storage.holds_rows(table, b"\xff\xff\xff\xff", b"")


async def test_scan_selects_families(storage: Storage, table: str) -> None:
    await storage.put(
        table,
        [
            Put(b"both", "f", b"q", b"1"),
            Put(b"both", "g", b"q", b"2"),
            Put(b"f_only", "f", b"q", b"3"),
            Put(b"g_only", "g", b"q", b"4"),
        ],
    )
    rows = await scan_all(storage, table, ScanSpec(families=("g",)))
    assert rows == [
        Row(b"both", (Cell("g", b"q", b"2"),)),
        Row(b"g_only", (Cell("g", b"q", b"4"),)),
    ]
    assert await storage.get(table, b"f_only", families=["g"]) is None
    assert await storage.get(table, b"both", families=["f"]) == Row(
        b"both", (Cell("f", b"q", b"1"),)
    )
    assert len(await scan_all(storage, table, ScanSpec(families=("f", "g")))) == 3


ROW_FILTERS = [
    pytest.param(rb"a.", [b"a\n", b"a1", b"a2", b"a\x80", b"a\xff"], id="two_bytes_from_a"),
    pytest.param(rb"a", [b"a"], id="fullmatch_not_search"),
    pytest.param(rb"a\d+", [b"a1", b"a2", b"a10"], id="digits"),
    pytest.param(rb".*\x80.*", [b"a\x80", b"\x80\x81"], id="byte_80_anywhere"),
    pytest.param(rb"[\x80-\xff]+", [b"\x80\x81", b"\xff"], id="high_bytes_only"),
    pytest.param(rb"(?:a|b)1", [b"a1", b"b1"], id="alternation"),
    pytest.param(
        rb".{2}",
        [b"a\n", b"a1", b"a2", b"a\x80", b"a\xff", b"b1", b"\x80\x81"],
        id="dot_is_any_byte",
    ),
]
FILTER_ROWS = [b"a1", b"a2", b"a10", b"a\n", b"a\x80", b"a\xff", b"b1", b"\x80\x81", b"\xff", b"a"]


@pytest.mark.parametrize(("regex", "expected"), ROW_FILTERS)
async def test_scan_row_filter_fullmatches_the_row_key(storage, table, regex, expected) -> None:
    await put_rows(storage, table, FILTER_ROWS)
    spec = ScanSpec(row_filter=RowFilter(regex))
    assert await scan_keys(storage, table, spec) == sorted(expected)
    spec = ScanSpec(row_filter=RowFilter(regex), batch_rows=1)
    assert await scan_keys(storage, table, spec) == sorted(expected)


async def test_scan_limit(storage: Storage, table: str) -> None:
    rows = [bytes([i]) for i in range(50)]
    await put_rows(storage, table, rows)
    assert await scan_keys(storage, table, ScanSpec(limit=3)) == rows[:3]
    assert await scan_keys(storage, table, ScanSpec(limit=30, batch_rows=7)) == rows[:30]
    assert await scan_keys(storage, table, ScanSpec(start=b"\x30", limit=100)) == rows[48:]
    odd = ScanSpec(row_filter=RowFilter(rb"[\x01\x03\x05\x07\x09]"), limit=3, batch_rows=2)
    assert await scan_keys(storage, table, odd) == [b"\x01", b"\x03", b"\x05"]


async def test_scan_rows_with_many_cells_across_batches(storage: Storage, table: str) -> None:
    puts = [Put(bytes([r]), "f", q.to_bytes(2, "big"), b"v") for r in range(5) for q in range(3000)]
    await storage.put(table, puts)
    rows = await scan_all(storage, table, ScanSpec(batch_rows=2))
    assert [(row.key, len(row.cells)) for row in rows] == [(bytes([r]), 3000) for r in range(5)]


async def test_scan_can_stop_early(storage: Storage, table: str) -> None:
    await put_rows(storage, table, [bytes([i]) for i in range(100)])
    seen = []
    async with aclosing(storage.scan(table, ScanSpec(batch_rows=10))) as rows:
        async for row in rows:
            seen.append(row.key)
            if len(seen) == 15:
                break
    assert seen == [bytes([i]) for i in range(15)]
    await storage.put(table, [Put(b"\xff", "f", b"q", b"after")])
    assert len(await scan_keys(storage, table)) == 101


# -- atomic operations -------------------------------------------------------------------------


async def test_increment_counts_from_zero(storage: Storage, table: str) -> None:
    assert await storage.increment(table, b"c", "f", b"n") == 1
    assert await storage.increment(table, b"c", "f", b"n", 41) == 42
    assert await storage.increment(table, b"c", "f", b"n", -50) == -8
    assert await storage.get(table, b"c") == Row(
        b"c", (Cell("f", b"n", (-8).to_bytes(8, "big", signed=True)),)
    )


async def test_increment_is_atomic_under_concurrency(storage: Storage, table: str) -> None:
    async def bump() -> list[int]:
        return [await storage.increment(table, b"\x00", "f", b"metrics") for _ in range(20)]

    results = await asyncio.gather(*(bump() for _ in range(50)))
    values = sorted(v for task in results for v in task)
    assert values == list(range(1, 1001))
    row = await storage.get(table, b"\x00")
    assert row is not None
    assert row.value("f", b"metrics") == (1000).to_bytes(8, "big")


async def test_increment_refuses_a_cell_that_is_not_8_bytes(storage: Storage, table: str) -> None:
    await storage.put(table, [Put(b"c", "f", b"n", b"\x01\x02")])
    with pytest.raises(StorageError):
        await storage.increment(table, b"c", "f", b"n")


async def test_check_and_put(storage: Storage, table: str) -> None:
    put = Put(b"r", "f", b"q", b"one")
    assert await storage.check_and_put(table, b"r", "f", b"q", None, put) is True
    assert await storage.check_and_put(table, b"r", "f", b"q", None, put) is False
    two = Put(b"r", "f", b"q", b"two")
    assert await storage.check_and_put(table, b"r", "f", b"q", b"wrong", two) is False
    assert await storage.check_and_put(table, b"r", "f", b"q", b"one", two) is True
    assert await storage.get(table, b"r") == Row(b"r", (Cell("f", b"q", b"two"),))


async def test_check_and_put_may_check_another_cell_of_the_row(storage, table) -> None:
    other = Put(b"r", "g", b"other", b"x")
    assert await storage.check_and_put(table, b"r", "f", b"lock", None, other) is True
    assert await storage.get(table, b"r") == Row(b"r", (Cell("g", b"other", b"x"),))


async def test_check_and_put_treats_an_empty_cell_as_missing(storage, table) -> None:
    # HBase's rule: a null expected value matches a missing or an empty cell.
    await storage.put(table, [Put(b"r", "f", b"q", b"")])
    put = Put(b"r", "f", b"q", b"v")
    assert await storage.check_and_put(table, b"r", "f", b"q", None, put) is True
    put = Put(b"r", "f", b"other", b"v")
    assert await storage.check_and_put(table, b"r", "f", b"other", b"", put) is True
    assert await storage.check_and_put(table, b"r", "f", b"other", b"", put) is False


async def test_check_and_put_race_has_one_winner(storage: Storage, table: str) -> None:
    async def claim(i: int) -> bool:
        put = Put(b"name", "f", b"id", i.to_bytes(2, "big"))
        return await storage.check_and_put(table, b"name", "f", b"id", None, put)

    results = await asyncio.gather(*(claim(i) for i in range(40)))
    assert results.count(True) == 1
    row = await storage.get(table, b"name")
    assert row is not None
    assert row.value("f", b"id") == results.index(True).to_bytes(2, "big")


def claim_cell(row: bytes, value: bytes, expected: bytes | None = None) -> CheckAndPut:
    """A check that the cell (row, f, id) holds ``expected`` (absent), putting ``value``."""
    return CheckAndPut("f", b"id", expected, Put(row, "f", b"id", value))


async def test_check_and_put_many_answers_each_check_in_order(storage, table) -> None:
    await storage.put(
        table,
        [
            Put(b"taken", "f", b"id", b"old"),
            Put(b"held", "f", b"id", b"1"),
            Put(b"empty", "f", b"id", b""),
        ],
    )
    checks = [
        claim_cell(b"new-a", b"a"),
        claim_cell(b"taken", b"x"),  # exists: refused
        claim_cell(b"held", b"2", expected=b"1"),  # holds the expected value: applied
        claim_cell(b"empty", b"e"),  # an empty cell counts as absent (HBase's rule)
        claim_cell(b"new-b", b"b"),
    ]
    assert await storage.check_and_put_many(table, checks) == [True, False, True, True, True]
    # Read back the rows by key: on HBase a recycled table once showed a row another
    # test had left behind (tests/hbase/recycling.py), which says nothing about these checks.
    rows = await storage.get_many(table, [b"new-a", b"taken", b"held", b"empty", b"new-b"])
    values = {row.key: row.value("f", b"id") for row in rows}
    assert values == {
        b"new-a": b"a",
        b"taken": b"old",
        b"held": b"2",
        b"empty": b"e",
        b"new-b": b"b",
    }
    assert await storage.check_and_put_many(table, []) == []


async def test_check_and_put_many_keeps_order_across_a_large_batch(storage, table) -> None:
    """More checks than the HBase client writes on one connection at once (its parts go
    over several connections, many calls a write): every answer is its own check's."""
    rows = [b"big%04d" % i for i in range(700)]
    await storage.put(table, [Put(row, "f", b"id", b"old") for row in rows[::3]])
    answers = await storage.check_and_put_many(table, [claim_cell(row, row) for row in rows])
    assert answers == [i % 3 != 0 for i in range(len(rows))]
    stored = {row.key: row.value("f", b"id") for row in await scan_all(storage, table)}
    assert stored == {row: b"old" if i % 3 == 0 else row for i, row in enumerate(rows)}


async def test_get_column_answers_each_row_its_cell_or_none(storage, table) -> None:
    """One column read over many rows (a batch of names' forward UID rows): a row's
    value, b"" for an empty cell, None for a row without that cell or without cells."""
    await storage.put(
        table,
        [
            Put(b"a", "f", b"id", b"1"),
            Put(b"b\x00c", "f", b"id", b"2"),
            Put(b"empty", "f", b"id", b""),
            Put(b"other", "f", b"name", b"x"),
        ],
    )
    rows = [b"a", b"missing", b"b\x00c", b"empty", b"other", b"a"]
    assert await storage.get_column(table, "f", b"id", rows) == [
        b"1",
        None,
        b"2",
        b"",
        None,
        b"1",
    ]
    assert await storage.get_column(table, "f", b"id", []) == []
    # a row too long for a key of its own (the embedded store's buckets: its general read)
    long_row = b"L" * 506  # its cell's key past 511 bytes, its row's prefix not
    await storage.put(table, [Put(long_row, "f", b"id", b"3")])
    assert await storage.get_column(table, "f", b"id", [long_row, b"a"]) == [b"3", b"1"]


async def put_if_absent(
    storage: Storage, table: str, rows: list[bytes], values: list[bytes]
) -> list[bool]:
    return await storage.put_if_absent_column(table, CellColumn("f", b"id", rows, values))


async def test_put_if_absent_column_answers_each_row_as_its_check(storage, table) -> None:
    """The column form of check_and_put_many (a batch of new UIDs' forward mappings): a
    row whose cell exists keeps it, an empty cell counts as absent, the others are put."""
    await storage.put(table, [Put(b"taken", "f", b"id", b"old"), Put(b"empty", "f", b"id", b"")])
    rows = [b"new-a", b"taken", b"empty", b"new\x00b"]
    answers = await put_if_absent(storage, table, rows, [b"a", b"x", b"e", b"b"])
    assert answers == [True, False, True, True]
    found = await storage.get_many(table, rows)
    assert {row.key: row.value("f", b"id") for row in found} == {
        b"new-a": b"a",
        b"taken": b"old",
        b"empty": b"e",
        b"new\x00b": b"b",
    }
    # every cell absent (the embedded store's one getmulti and putmulti): all put
    fresh = [b"fresh%03d" % i for i in range(300)]
    assert await put_if_absent(storage, table, fresh, fresh) == [True] * 300
    assert await put_if_absent(storage, table, fresh[:2], [b"1", b"2"]) == [
        False,
        False,
    ]
    assert {row.key: row.value("f", b"id") for row in await storage.get_many(table, fresh)} == {
        row: row for row in fresh
    }
    assert await put_if_absent(storage, table, [], []) == []


async def test_put_if_absent_column_refuses_a_row_twice(storage, table) -> None:
    with pytest.raises(StorageError, match="two checks on one cell"):
        await put_if_absent(storage, table, [b"r", b"r"], [b"1", b"2"])
    assert await storage.get(table, b"r") is None


async def test_put_column_puts_each_row_its_value(storage, table) -> None:
    """The column form of put (a batch of new UIDs' reverse mappings): a cell that exists
    is overwritten, as a put does."""
    await storage.put(table, [Put(b"\x00\x00\x02", "f", b"name", b"old")])
    rows = [b"\x00\x00\x01", b"\x00\x00\x02", b"\x00\x00\x03"]
    await storage.put_column(table, CellColumn("f", b"name", rows, [b"a", b"b", b"c"]))
    found = await storage.get_many(table, rows)
    assert [row.value("f", b"name") for row in found] == [b"a", b"b", b"c"]
    await storage.put_column(table, CellColumn("f", b"name", [], []))


async def test_check_and_put_many_refuses_two_checks_on_one_cell(storage, table) -> None:
    with pytest.raises(StorageError, match="two checks on one cell"):
        await storage.check_and_put_many(table, [claim_cell(b"r", b"1"), claim_cell(b"r", b"2")])
    assert await storage.get(table, b"r") is None


async def test_check_and_put_many_races_have_one_winner_per_cell(
    storage: Storage, table: str
) -> None:
    """Batches and single check-and-puts over overlapping cells: each cell has exactly one
    winner, and the stored value is the winner's."""
    rows = [b"n%02d" % i for i in range(30)]

    async def batch(who: int) -> list[bool]:
        mine = rows[who % 3 :: 2]  # overlapping halves
        return await storage.check_and_put_many(
            table, [claim_cell(row, b"%d" % who) for row in mine]
        )

    async def single(row: bytes) -> bool:
        return await storage.check_and_put(table, row, "f", b"id", None, Put(row, "f", b"id", b"s"))

    batches, singles = await asyncio.gather(
        asyncio.gather(*(batch(who) for who in range(4))),
        asyncio.gather(*(single(r) for r in rows)),
    )
    winners: dict[bytes, list[bytes]] = {row: [] for row in rows}
    for who in range(4):
        for row, applied in zip(rows[who % 3 :: 2], batches[who], strict=True):
            if applied:
                winners[row].append(b"%d" % who)
    for row, applied in zip(rows, singles, strict=True):
        if applied:
            winners[row].append(b"s")
    stored = {row.key: row.value("f", b"id") for row in await scan_all(storage, table)}
    for row in rows:
        assert len(winners[row]) == 1, (row, winners[row])
        assert stored[row] == winners[row][0]


async def test_append(storage: Storage, table: str) -> None:
    await storage.append(table, b"r", "f", b"q", b"ab")
    await storage.append(table, b"r", "f", b"q", b"")
    await storage.append(table, b"r", "f", b"q", b"cd")
    assert await storage.get(table, b"r") == Row(b"r", (Cell("f", b"q", b"abcd"),))


async def test_concurrent_appends_lose_nothing(storage: Storage, table: str) -> None:
    parts = [bytes([i]) * 3 for i in range(60)]
    await asyncio.gather(*(storage.append(table, b"r", "f", b"q", p) for p in parts))
    row = await storage.get(table, b"r")
    assert row is not None
    value = row.value("f", b"q")
    assert value is not None
    assert sorted(value[i : i + 3] for i in range(0, len(value), 3)) == parts


async def test_atomic_operations_on_long_qualifiers(storage: Storage, table: str) -> None:
    long = b"\x00\x01" * 400
    assert await storage.increment(table, b"r", "f", long) == 1
    assert await storage.increment(table, b"r", "f", long + b"\x00", 5) == 5
    assert await storage.increment(table, b"r", "f", long) == 2
    await storage.append(table, b"r", "g", long, b"x")
    await storage.append(table, b"r", "g", long, b"y")
    put = Put(b"r", "g", long + b"!", b"won")
    assert await storage.check_and_put(table, b"r", "g", long + b"!", None, put) is True
    assert await storage.check_and_put(table, b"r", "g", long + b"!", None, put) is False
    row = await storage.get(table, b"r")
    assert row is not None
    assert row.value("f", long) == (2).to_bytes(8, "big")
    assert row.value("f", long + b"\x00") == (5).to_bytes(8, "big")
    assert row.value("g", long) == b"xy"
    assert row.value("g", long + b"!") == b"won"


# -- closing -----------------------------------------------------------------------------------


async def test_calls_after_close_raise_storage_unavailable(storage: Storage, table: str) -> None:
    await storage.close()
    await storage.close()  # idempotent
    with pytest.raises(StorageUnavailable):
        await storage.get(table, b"r")
    with pytest.raises(StorageUnavailable):
        await storage.put(table, [Put(b"r", "f", b"q", b"v")])
    with pytest.raises(StorageUnavailable):
        await scan_all(storage, table)


# -- bulk reads --------------------------------------------------------------------------------


def _random_cells(seed: int) -> list[Put]:
    """Rows of binary keys (00 and FF bytes, prefixes of each other) with cells in both
    families, some with qualifiers long enough for the embedded store's bucket keys."""
    rng = random.Random(seed)
    puts = []
    rows = {
        bytes(rng.choice((0, 1, 0xFF, 0x61)) for _ in range(rng.randint(1, 6))) for _ in range(60)
    }
    for row in rows:
        for _ in range(rng.randint(1, 5)):
            length = rng.choice((0, 1, 2, 4, 120, 600, 1200))
            qualifier = bytes(rng.randrange(256) for _ in range(length))
            value = bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
            puts.append(Put(row, rng.choice("fg"), qualifier, value))
    return puts


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_scan_blocks_hold_the_rows_of_scan(storage: Storage, table: str, seed: int) -> None:
    # The query path reads CellBlocks: the same rows and cells as scan, batch for batch
    # within the spec's batch size, whatever the families, filter, bounds and limit.
    await storage.put(table, _random_cells(seed))
    rng = random.Random(seed)
    specs = [
        ScanSpec(),
        ScanSpec(batch_rows=3),
        ScanSpec(families=("g",), batch_rows=2),
        ScanSpec(start=b"\x01", stop=b"\xff\x01", batch_rows=5),
        ScanSpec(row_filter=RowFilter(b"(?s).\\x00.*"), batch_rows=4),
        ScanSpec(families=("f",), limit=7, batch_rows=3),
        ScanSpec(limit=rng.randint(1, 30), row_filter=RowFilter(b"(?s)[^a].*")),
    ]
    for spec in specs:
        want = await scan_all(storage, table, spec)
        blocks = []
        async with aclosing(storage.scan_blocks(table, spec)) as found:
            blocks = [block async for block in found]
        assert all(0 < len(block) <= spec.batch_rows for block in blocks)
        assert [row for block in blocks for row in _cells(block)] == want


def _cells(block: Block) -> CellBlock:
    """A block's cells (a PointBlock builds them from what the store read)."""
    return block.cells() if isinstance(block, PointBlock) else block


def _random_data_rows(seed: int) -> list[Put]:
    """OpenTSDB-shaped rows in family ``t``: compacted cells alone (the embedded store packs
    them; only those for odd seeds), some with single points or notes beside them, some
    singles only."""
    from tsd.codec import compact_row, encode_point

    rng = random.Random(seed)
    puts = []
    for r in range(rng.randint(20, 80)):
        row = b"\x00\x00\x01" + (1356998400 + 3600 * (r % 5)).to_bytes(4, "big") + bytes([r])
        base = int.from_bytes(row[3:7], "big")
        points = [
            encode_point(base + off, rng.choice([1, 2.5, -7, 1e10 + 0.25]))[1:]
            for off in sorted(rng.sample(range(3600), rng.randint(2, 30)))
        ]
        shapes = ["compacted"] if seed % 2 else ["compacted", "compacted", "mixed", "singles"]
        shape = rng.choice(shapes)
        if shape != "singles":
            compacted = compact_row(points)
            assert compacted is not None
            puts.append(Put(row, "t", *compacted))
        if shape != "compacted":
            for qualifier, value in points[: rng.randint(1, 3)]:
                puts.append(Put(row, "t", qualifier, value))
            if rng.random() < 0.5:
                puts.append(Put(row, "t", b"\x01\x00\x00", b'{"description":"x"}'))
    return puts


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_scan_blocks_of_data_rows_hold_the_rows_of_scan(
    storage: Storage, make_table: MakeTable, seed: int
) -> None:
    # The same with compacted data rows, which the embedded store keeps packed and reads in
    # bulk straight into blocks when a batch holds nothing else.
    table = await make_table("data", ("t",))
    await storage.put(table, _random_data_rows(seed))
    specs = [
        ScanSpec(),
        ScanSpec(batch_rows=7),
        ScanSpec(start=b"\x00\x00\x01\x50\xe2\x3a\x10", stop=b"\x00\x00\x01\x50\xe2\x48\x20"),
        ScanSpec(limit=9, batch_rows=4),
        ScanSpec(families=("t",), batch_rows=3),
        # a filter passing every key (the packed path stands), and one passing some
        ScanSpec(row_filter=RowFilter(b"(?s).*"), batch_rows=6),
        ScanSpec(row_filter=RowFilter(b"(?s).{7}[\\x00-\\x1f]"), limit=12, batch_rows=5),
    ]
    for spec in specs:
        want = await scan_all(storage, table, spec)
        async with aclosing(storage.scan_blocks(table, spec)) as found:
            blocks = [block async for block in found]
        assert all(0 < len(block) <= spec.batch_rows for block in blocks)
        assert [row for block in blocks for row in _cells(block)] == want


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_scan_ranges_hold_the_rows_of_each_range_scanned_in_turn(
    storage: Storage, make_table: MakeTable, seed: int
) -> None:
    # The query path's ranges (a filter's series hour by hour): many disjoint ranges in
    # key order, some empty, some cut by a limit or batch size, read by one scan_ranges;
    # the embedded store reads several per hop and joins their blocks.
    table = await make_table("data", ("t",))
    await storage.put(table, _random_data_rows(seed))
    keys = sorted({k for k in await scan_keys(storage, table)})
    rng = random.Random(seed)
    cuts = sorted(set(rng.sample(keys, min(len(keys), 24)))) + [b"\x00\x00\x02"]
    for batch_rows, limit in ((1024, None), (2, None), (3, 2)):
        # [a, a + ff) holds row a alone (keys of one length), [a + ff, b) none
        bounds = [b"\x00", *(k for a in cuts[:-1] for k in (a, a + b"\xff")), cuts[-1]]
        specs = [
            ScanSpec(start=a, stop=b, families=("t",), batch_rows=batch_rows, limit=limit)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]
        want = [row for spec in specs for row in await scan_all(storage, table, spec)]
        async with aclosing(storage.scan_ranges(table, specs)) as found:
            blocks = [block async for block in found]
        assert all(len(block) for block in blocks)
        assert [row for block in blocks for row in _cells(block)] == want
        assert len(want) > len(cuts)


@pytest.mark.parametrize("seed", [1, 2])
async def test_bulk_reads_hand_over_the_work_done_where_the_store_read_each_block(
    storage: Storage, make_table: MakeTable, seed: int
) -> None:
    # BlockWork: the same blocks as without it, each holding the work's result for it or,
    # in a store that leaves the work to the reader (HBase), None. The embedded store does
    # it in the reader thread that read the block: off the event loop past its first hop.
    table = await make_table("data", ("t",))
    await storage.put(table, _random_data_rows(seed))
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    def work(block: Block) -> tuple[int, bytes, int]:
        threads.add(threading.get_ident())
        return len(block), block.keys[-1], block.cell_count

    keys = sorted(set(await scan_keys(storage, table)))
    cuts = keys[:: max(1, len(keys) // 6)]
    ranges = [ScanSpec(start=a, stop=a + b"\xff", batch_rows=2) for a in cuts]

    def whole(w: BlockWork | None) -> AsyncGenerator[Block, None]:
        return storage.scan_blocks(table, ScanSpec(batch_rows=3), work=w)

    def ranged(w: BlockWork | None) -> AsyncGenerator[Block, None]:
        return storage.scan_ranges(table, ranges, work=w)

    for read in (whole, ranged):
        async with aclosing(read(None)) as found:
            plain = [block async for block in found]
        async with aclosing(read(work)) as found:
            done = [block async for block in found]
        assert [list(_cells(b)) for b in done] == [list(_cells(b)) for b in plain]
        assert all(b.prepared is None for b in plain)
        if isinstance(storage, EmbeddedStorage):
            assert [b.prepared for b in done] == [(len(b), b.keys[-1], b.cell_count) for b in done]
        else:
            assert all(b.prepared is None for b in done)
    if isinstance(storage, EmbeddedStorage):
        assert threads - {loop_thread}
    else:
        assert not threads


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_families_packed_whole_read_as_any_other(
    storage: Storage, table_prefix: str, seed: int
) -> None:
    # FamilySpec.packed_rows (the embedded store keeps such a family's cells of a row in one
    # entry, as columns): puts, overwrites, deletes of cells, families and rows in one
    # mutate, cells of any length, more than 255 in a row; every read gives the model's.
    table = f"{table_prefix}packed"
    await storage.create_table(table, [FamilySpec("f", packed_rows=True), FamilySpec("g")])
    rng = random.Random(seed)
    rows = [bytes([r]) + b"\x00" * rng.randint(0, 2) for r in range(1, 12)]
    model: dict[bytes, dict[tuple[str, bytes], bytes]] = {}
    for _ in range(4):
        mutations: list[Put | Delete] = []
        for _ in range(rng.randint(1, 400)):
            row = rng.choice(rows)
            cells = model.setdefault(row, {})
            roll = rng.random()
            if roll < 0.85:
                family = "f" if rng.random() < 0.8 else "g"
                qualifier = rng.choice(
                    [bytes([rng.randint(0, 3), rng.randint(0, 2), rng.randint(0, 255)]),
                     bytes(rng.randint(1, 6))]
                )  # fmt: skip
                value = rng.randbytes(rng.choice([0, 1, 2, 4, 8]))
                mutations.append(Put(row, family, qualifier, value))
                cells[(family, qualifier)] = value
            elif roll < 0.95 and cells:
                family, qualifier = rng.choice(sorted(cells))
                mutations.append(Delete(row, family, qualifier))
                del cells[(family, qualifier)]
            elif roll < 0.98:
                mutations.append(Delete(row, "f"))
                for key in [k for k in cells if k[0] == "f"]:
                    del cells[key]
            else:
                mutations.append(Delete(row))
                cells.clear()
        await storage.mutate(table, mutations)
        want = [
            Row(row, tuple(Cell(f, q, v) for (f, q), v in sorted(model[row].items())))
            for row in sorted(model)
            if model[row]
        ]
        assert await scan_all(storage, table) == want
        assert await storage.get_many(table, [r.key for r in want]) == want
        for spec in (ScanSpec(), ScanSpec(families=("f",), batch_rows=3)):
            async with aclosing(storage.scan_blocks(table, spec)) as found:
                blocks = [block async for block in found]
            assert [row for block in blocks for row in _cells(block)] == await scan_all(
                storage, table, spec
            )


async def test_a_burst_of_puts_and_absent_checks_of_one_family_reads_back(
    storage: Storage, table: str
) -> None:
    """Many puts of one family (a batch of new UIDs' reverse mappings) and checks that
    many cells of one family and qualifier are absent (their forward mappings), rows with
    the bytes the store escapes among them, and one key at the length where the embedded
    store stores a cell apart: each cell reads back as put, and the same checks again
    are all refused."""
    rows = [b"\x00\x00" + i.to_bytes(2, "big") + b"\xff\x00" for i in range(300)]
    long_row = b"L" * 480
    await storage.put(table, [Put(row, "f", b"q", row[::-1]) for row in rows[:-2]])
    await storage.put(  # with a key past the length: put as the store's loop puts
        table,
        [Put(row, "f", b"q", row[::-1]) for row in rows[-2:]]
        + [Put(long_row, "f", b"q" * 40, b"l")],
    )
    checks = [claim_cell(row[::-1] + b"\x00", row) for row in rows]
    assert await storage.check_and_put_many(table, checks) == [True] * len(checks)
    assert await storage.check_and_put_many(table, checks) == [False] * len(checks)
    stored = {row.key: row.cells for row in await scan_all(storage, table)}
    assert stored[long_row] == (Cell("f", b"q" * 40, b"l"),)
    for row in rows:
        assert stored[row] == (Cell("f", b"q", row[::-1]),)
        assert stored[row[::-1] + b"\x00"] == (Cell("f", b"id", row),)
    assert len(stored) == 2 * len(rows) + 1
