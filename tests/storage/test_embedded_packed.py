"""The embedded store's packed (compressed) form of compacted cells: exact round trips of
every byte string, and the storage interface unchanged around it."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.storage.edges import edge_cells
from tsd.codec import compact_row, encode_point
from tsd.errors import StorageError
from tsd.storage.base import Delete, FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage, packed
from tsd.storage.embedded import storage as storage_module
from tsd.storage.embedded.keys import is_packed, packed_key

BASE = 1356998400


def compacted(points: list[tuple[int, int | float]]) -> tuple[bytes, bytes]:
    cell = compact_row([encode_point(ts, value)[1:] for ts, value in points])
    assert cell is not None
    return cell


values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-300, 300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(-1e6, 1e6, places=2, allow_nan=False, allow_infinity=False).map(float),
    st.sampled_from([0, 1, 2, 3, 0.5, -0.0, 1e300, 3.4e38, 1.5e-45]),
)


@st.composite
def data_cells(draw: st.DrawFn) -> tuple[bytes, bytes]:
    ms = draw(st.booleans())
    mixed = draw(st.booleans())
    unit = 1000 if ms else 1
    offsets = draw(st.lists(st.integers(0, 3599 * unit), min_size=2, max_size=60, unique=True))
    step = draw(st.sampled_from([0, 1, 10, 15]))
    if step:
        offsets = [i * step * unit for i in range(len(offsets)) if i * step < 3600]
    kind = draw(st.sampled_from(["any", "int", "float"]))
    pick = values if kind == "any" else st.integers(-(10**6), 10**6)
    if kind == "float":
        pick = st.decimals(-1e4, 1e4, places=3, allow_nan=False).map(float)
    points = []
    for i, offset in enumerate(sorted(set(offsets))):
        ts = BASE * 1000 + offset if ms else BASE + offset
        if mixed and ms and i % 3 == 0:
            ts = BASE + offset // 1000
        points.append((ts, draw(pick)))
    unique: dict[int, tuple[int, int | float]] = {}
    for ts, value in points:
        key = ts if ts > 0xFFFFFFFF else ts * 1000
        unique.setdefault(key, (ts, value))
    return compacted(list(unique.values()) if len(unique) > 1 else points[:1] * 0 + points)


def _with_edge_cells(test: Callable[[tuple[bytes, bytes]], None]) -> Callable[..., None]:
    """``test`` with an explicit example for each cell of tests/storage/edges.py."""
    for _, cell in edge_cells():
        test = example(cell)(test)
    return test


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@_with_edge_cells
@given(data_cells())
def test_compacted_cells_round_trip(cell: tuple[bytes, bytes]) -> None:
    stored = packed.pack([cell])
    assert packed.unpack(stored) == [cell]
    assert packed.unpack_many([stored, stored]) == [[cell], [cell]]


def test_integers_past_the_limit_take_the_raw_form() -> None:
    """Integers of magnitude 2**61 or more (int64's ends among them: numpy's abs once let
    -2**63 through as a bit-packed integer, with a 9-byte low) keep their value bytes; the
    others stay bit-packed integers. Every edge cell is a fast cell with base and low on at
    most 8 bytes (what the query path's C reader takes)."""
    for values, cell in edge_cells():
        stored = packed.pack([cell])
        head = packed._HEAD.unpack_from(stored, 1)
        assert head[0] == packed.FAST
        vmode = (head[1] >> 5) & 3
        assert vmode == (0 if all(abs(v) < 2**61 for v in values) else 2), values
        assert head[10] <= 8  # w1: base
        assert head[11] <= 8  # w2: low
        assert packed.unpack(stored) == [cell]
        assert packed.unpack_many([stored]) == [[cell]]


def test_fast_cells_of_int64_min_written_before_still_read() -> None:
    """The bytes the writer gave 28 zeros and -2**63 before it kept such integers raw (an
    integer column, low -2**63 on 9 bytes): still the same cell."""
    points: list[tuple[int, int | float]] = [(BASE + i, 0) for i in range(28)]
    cell = compacted([*points, (BASE + 28, -(2**63))])
    old = bytes.fromhex(
        "01018c1d00000000000100000000000040000009190000000000000000000080ff28b52ffd00"
        "00850000480000000000000080000100d4d4e502"
    )
    assert packed.pack([cell]) != old
    assert packed.unpack(old) == [cell]
    assert packed.unpack_many([old, old]) == [[cell], [cell]]


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=2, max_size=40).map(lambda b: b[: len(b) // 2 * 2]).filter(lambda b: b),
    st.binary(max_size=80),
)
def test_any_bytes_round_trip(qualifier: bytes, value: bytes) -> None:
    """Odd cells (wrong lengths, bad flags, garbage) come back byte for byte."""
    stored = packed.pack([(qualifier, value)])
    assert packed.unpack(stored) == [(qualifier, value)]
    assert packed.unpack_many([stored]) == [[(qualifier, value)]]


@pytest.mark.filterwarnings("error")
def test_signalling_nan_floats_round_trip_without_a_warning() -> None:
    """4-byte float points holding a signalling NaN (what test_any_bytes_round_trip once
    drew): widening them to doubles must not raise numpy's 'invalid value' warning (an
    error under the test settings, noise in the daemon's log); they are kept raw."""
    for bits in ("7f800001", "ff800001", "7fa00000"):
        qualifier = bytes.fromhex("000b001b")
        value = bytes.fromhex(bits * 2)
        stored = packed.pack([(qualifier, value)])
        assert packed.unpack(stored) == [(qualifier, value)]
        assert packed.unpack_many([stored]) == [[(qualifier, value)]]


def test_regular_rows_are_small() -> None:
    """A %.2f random walk of 360 points at 10 s: well under 2 bytes a point (raw ~10)."""
    level = 50.0
    points = []
    for i in range(360):
        level = round(level + ((i * 7919) % 200 - 100) / 100, 2)
        points.append((BASE + 10 * i, level))
    cell = compacted(points)
    stored = packed.pack([cell])
    assert len(stored) < 2 * 360 < len(cell[0]) + len(cell[1])
    assert packed.unpack(stored) == [cell]


def test_many_shapes_decode_together() -> None:
    cells = [compacted([(BASE + 10 * i, (i * s) % 7) for i in range(360)]) for s in range(20)]
    cells += [compacted([(BASE + 10 * i, i * 0.25 + s) for i in range(100)]) for s in range(5)]
    cells += [compacted([(BASE + 7 * i + i % 2, i) for i in range(10)])]
    stored = [packed.pack([c]) for c in cells]
    assert packed.unpack_many(stored) == [[c] for c in cells]


@pytest.mark.parametrize(
    "cell",
    [
        (b"\xf0\x00\x00\x00", b"\x00"),  # one millisecond point
        (b"\x00\x07\x00\x07", b"\x01\x01\x00"),  # the same offset twice
        (b"\x00\x17\x00\x07", b"\x01\x01\x00"),  # offsets out of order
    ],
)
def test_odd_cells_round_trip(cell: tuple[bytes, bytes]) -> None:
    assert packed.unpack(packed.pack([cell])) == [cell]
    assert packed.unpack_many([packed.pack([cell])]) == [[cell]]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_damaged_bytes_raise_storage_error(cut: int) -> None:
    stored = packed.pack([compacted([(BASE + i, i * 1000) for i in range(50)])])
    with pytest.raises(StorageError, match="corrupt embedded packed value"):
        packed.unpack(stored[:-cut])
    with pytest.raises(StorageError, match="corrupt embedded packed value"):
        packed.unpack_many([stored[:-cut]])


def test_which_cells_are_packed() -> None:
    assert is_packed("t", b"\x00\x07\x00\x17")
    assert not is_packed("t", b"\x00\x07")  # one point
    assert not is_packed("t", b"\xf0\x00\x01\x07")  # one millisecond point
    assert not is_packed("t", b"\x01\x00\x07")  # annotation
    assert not is_packed("f", b"\x00\x07\x00\x17")


# -- through the storage interface -------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStorage]:
    storage = EmbeddedStorage(tmp_path / "store")
    await storage.create_table("d", [FamilySpec("t"), FamilySpec("u")])
    yield storage
    await storage.close()


async def test_plain_and_packed_cells_of_a_row_read_in_qualifier_order(
    store: EmbeddedStorage,
) -> None:
    row = b"\x00\x00\x01\x50\xe2\x27\x00\x00\x00\x01\x00\x00\x01"
    early = compacted([(BASE + 1, 1), (BASE + 2, 2)])
    late = compacted([(BASE + 100, 1.5), (BASE + 200, 2.5)])
    single = encode_point(BASE + 50, 7)[1:]
    note = (b"\x01\x00\x05", b'{"description":"x"}')
    other = (b"\x00\x01\x00\x02", b"zz")  # family u: never packed
    await store.put(
        "d",
        [
            Put(row, "t", *late),
            Put(row, "t", *single),
            Put(row, "t", *early),
            Put(row, "t", *note),
            Put(row, "u", *other),
        ],
    )
    want = sorted([("t", *early), ("t", *late), ("t", *single), ("t", *note), ("u", *other)])
    got = await store.get("d", row)
    assert got is not None
    assert [tuple(c) for c in got.cells] == want
    scanned = [r async for r in store.scan("d", ScanSpec())]
    assert [tuple(c) for c in scanned[0].cells] == want
    only_u = await store.get("d", row, ["u"])
    assert only_u is not None
    assert [tuple(c) for c in only_u.cells] == [("u", *other)]
    # one packed entry holds both compacted cells
    with store._env.begin(db=store._tables["d"].packed) as txn:
        entry = txn.get(packed_key(row, "t"))
    assert entry is not None
    assert packed.unpack(entry) == sorted([early, late])
    # delete one packed cell, then the family
    await store.delete("d", [Delete(row, "t", early[0])])
    got = await store.get("d", row, ["t"])
    assert got is not None
    assert [c.qualifier for c in got.cells] == sorted([late[0], single[0], note[0]])
    await store.delete("d", [Delete(row, "t")])
    got = await store.get("d", row)
    assert got is not None
    assert [c.family for c in got.cells] == ["u"]


async def test_check_and_put_and_append_see_packed_cells(store: EmbeddedStorage) -> None:
    row = b"r1"
    cell = compacted([(BASE, 1), (BASE + 10, 2)])
    assert await store.check_and_put("d", row, "t", cell[0], None, Put(row, "t", *cell))
    assert not await store.check_and_put("d", row, "t", cell[0], None, Put(row, "t", *cell))
    await store.append("d", row, "t", cell[0], b"\x05")
    got = await store.get("d", row)
    assert got is not None
    assert got.cells[0].value == cell[1] + b"\x05"


async def test_scan_batches_split_rows_with_packed_entries(store: EmbeddedStorage) -> None:
    rows = [struct.pack(">I", i) for i in range(50)]
    cells = {r: compacted([(BASE + 10 * j, j * i) for j in range(30)]) for i, r in enumerate(rows)}
    await store.put("d", [Put(r, "t", *cells[r]) for r in rows])
    got = [r async for r in store.scan("d", ScanSpec(batch_rows=7))]
    assert [r.key for r in got] == rows
    assert all([tuple(c)[1:] for c in r.cells] == [cells[r.key]] for r in got)
    many = await store.get_many("d", rows[::-1])
    assert [r.key for r in many] == rows[::-1]


async def test_holds_rows_sees_packed_rows_and_plain_rows(store: EmbeddedStorage) -> None:
    # A row's compacted cells live in the packed database, its other cells in the plain
    # one: holds_rows seeks both (a read that skipped a packed row would lose it).
    packed_row, plain_row = b"\x00\x00\x01b", b"\x00\x00\x01d"
    await store.put("d", [Put(packed_row, "t", *compacted([(BASE, 1), (BASE + 10, 2)]))])
    await store.put("d", [Put(plain_row, "u", b"\x00\x01", b"x")])
    for start, stop, held in [
        (b"\x00\x00\x01a", b"\x00\x00\x01c", True),  # the packed row only
        (b"\x00\x00\x01c", b"\x00\x00\x01e", True),  # the plain row only
        (b"\x00\x00\x01b", b"\x00\x00\x01b", False),  # empty range
        (b"\x00\x00\x01b\x00", b"\x00\x00\x01d", False),  # between them
        (b"\x00\x00\x01d\x00", b"", False),  # past both
        (b"\x00\x00\x01", b"\x00\x00\x02", True),
    ]:
        assert await store.holds_rows("d", start, stop) is held, (start, stop)


async def test_a_format_1_store_is_converted_when_opened(tmp_path: Path) -> None:
    """Format 1 kept compacted cells under their own (bucket) keys: a writer moves them."""
    from tsd.storage.embedded import cells, keys

    path = tmp_path / "old"
    storage = EmbeddedStorage(path)
    await storage.create_table("d", [FamilySpec("t")])
    row = b"\x00\x00\x01row"
    cell = compacted([(BASE + 10 * i, i) for i in range(300)])  # a bucket key in format 1
    pair = compacted([(BASE, 1), (BASE + 1, 2)])  # its own key in format 1
    info = storage._tables["d"]
    with storage._env.begin(write=True) as txn:
        for qualifier, value in (cell, pair):
            key, bucket = keys.cell_key(keys.cell_prefix(row, "t"), qualifier)
            stored = keys.encode_bucket({qualifier: value}) if bucket else value
            txn.put(key, stored, db=info.db)
        txn.put(b"\x00format", b"tsd-embedded 1", db=storage._catalog)
    await storage.close()
    storage = EmbeddedStorage(path)
    try:
        got = await storage.get("d", row)
        assert got is not None
        assert [(c.qualifier, c.value) for c in got.cells] == sorted([cell, pair])
        with storage._env.begin(db=storage._tables["d"].db) as txn:
            assert [k for k, _ in txn.cursor()] == []
        with storage._env.begin(db=storage._tables["d"].packed) as txn:
            assert [k for k, _ in txn.cursor()] == [keys.packed_key(row, "t")]
            assert cells.read_cell(txn, storage._tables["d"], row, "t", pair[0]) == pair[1]
    finally:
        await storage.close()


def test_threads_decode_at_once() -> None:
    """Readers decode on several threads: each needs its own zstd context."""
    import concurrent.futures

    cells = [compacted([(BASE + 10 * i, (i * s) % 7) for i in range(360)]) for s in range(1, 7)]
    stored = [packed.pack([c]) for c in cells]
    assert all(s[2] & 0x04 for s in stored)  # zstd-coded: repetitive values

    def decode(_: int) -> bool:
        return all(packed.unpack(s) == [c] for s, c in zip(stored, cells, strict=True))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(decode, range(400)))


@pytest.mark.slow
@pytest.mark.fallbacks
async def test_head_write_out_beside_readers_keeps_packed_rows_intact(
    store: EmbeddedStorage,
) -> None:
    """The head's write-out through the Storage interface (read the stored rows of a chunk
    with get_many, write each row's compacted cell merged with compact_row, delete the
    cell it replaces, one mutate per chunk) while queries read the same rows on the
    reader threads. With zstd-coded rows (repetitive values) the writer thread packs and
    unpacks while the readers unpack: one zstd context shared by the threads gave
    'corrupt embedded packed value: decompression error' (bench/query, 1,000 series)."""
    import asyncio

    hours, series, half = 3, 48, 180
    keys = [
        b"\x00\x00\x01" + (BASE + 3600 * h).to_bytes(4, "big") + s.to_bytes(6, "big")
        for h in range(hours)
        for s in range(series)
    ]

    def points(index: int, start: int, stop: int) -> list[tuple[int, int | float]]:
        base = BASE + 3600 * (index // series)
        pattern = index % 5 + 1
        return [(base + 10 * i, (i * pattern) % 7 + 0.25) for i in range(start, stop)]

    first = [compacted(points(i, 0, half)) for i in range(len(keys))]
    assert all(packed.pack([c])[2] & 0x04 for c in first)  # zstd-coded
    await store.mutate("d", [Put(k, "t", q, v) for k, (q, v) in zip(keys, first, strict=True)])
    whole = {k: compacted(points(i, 0, 2 * half)) for i, k in enumerate(keys)}
    done = asyncio.Event()
    reads = 0

    async def reader() -> None:
        nonlocal reads
        while not done.is_set():
            for row in await store.get_many("d", keys, ("t",)):
                (cell,) = row.cells  # the first half or the whole row: never anything else
                assert (cell.qualifier, cell.value) in (first[keys.index(row.key)], whole[row.key])
            reads += 1

    async def write_out() -> None:
        try:
            for start in range(0, len(keys), 16):
                chunk = keys[start : start + 16]
                stored = {r.key: r for r in await store.get_many("d", chunk, ("t",))}
                mutations: list[Put | Delete] = []
                for key in chunk:
                    index = keys.index(key)
                    old = [(c.qualifier, c.value) for c in stored[key].cells]
                    late = [encode_point(ts, v)[1:] for ts, v in points(index, half, 2 * half)]
                    merged = compact_row(old + late)
                    assert merged is not None
                    mutations.append(Put(key, "t", *merged))
                    mutations.extend(Delete(key, "t", q) for q, _ in old if q != merged[0])
                await store.mutate("d", mutations)
                await asyncio.sleep(0)
        finally:
            done.set()

    await asyncio.gather(write_out(), *(reader() for _ in range(4)))
    assert reads
    got = {
        r.key: [(c.qualifier, c.value) for c in r.cells] for r in await store.get_many("d", keys)
    }
    assert got == {k: [c] for k, c in whole.items()}


# -- the C encoder (_pack.c) against the numpy one ----------------------------------------------

needs_c = pytest.mark.skipif(packed._C is None, reason="the C helper _pack is not built")


def numpy_pack(cells: list[tuple[bytes, bytes]]) -> bytes:
    """packed.pack with the numpy encoder alone."""
    c_helper = packed._C
    packed._C = None
    try:
        return packed.pack(cells)
    finally:
        packed._C = c_helper


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@needs_c
@settings(max_examples=400, deadline=None)
@given(
    st.one_of(data_cells(), st.tuples(st.binary(min_size=4, max_size=40), st.binary(max_size=80)))
)
def test_the_c_encoder_writes_the_numpy_bytes(cell: tuple[bytes, bytes]) -> None:
    """Same bytes on disk with and without the C helper: where it takes a cell its fields
    are numpy's, and what it leaves goes to numpy."""
    (fields,) = packed._C.fast_fields([cell])
    if fields is not None:
        assert fields == packed._fast_fields(*cell)
    assert packed.pack([cell]) == numpy_pack([cell])


def shape_cells() -> list[tuple[bytes, bytes]]:
    """Compacted rows of the shapes the head writes: integers of every width, decimals,
    4- and 8-byte floats, milliseconds, mixed widths (a flags column or OpenTSDB's),
    irregular steps, a large range."""
    walk = [(BASE + 10 * i, round(50 + ((i * 7919) % 200 - 100) / 100, 2)) for i in range(360)]
    cells = [
        compacted(walk),
        compacted([(BASE + 10 * i, i % 7) for i in range(360)]),
        compacted([(BASE + i, (-1) ** i * 2**i) for i in range(60)]),
        compacted([(BASE + 3 * i + i % 2, i * 1000) for i in range(100)]),
        compacted([(BASE * 1000 + 250 * i, i * 0.125) for i in range(400)]),
        compacted([(BASE + i, round(0.1 * i, 1)) for i in range(50)]),
        compacted([(BASE + i, 2**60 - i) for i in range(5)]),
    ]
    float32 = b"".join(struct.pack(">f", x) for x in (1.5, 2.25, -0.75))
    cells.append((bytes.fromhex("000b001b002b"), float32))  # 4-byte floats
    # left to numpy (raw values): an integer and a float in one cell; no decimal form
    cells.append((bytes.fromhex("0007001f"), struct.pack(">qd", 5, 2.5)))
    cells.append(compacted([(BASE + i, 1e300 if i % 2 else 3.4e38) for i in range(10)]))
    return cells


@needs_c
def test_the_c_encoder_takes_the_common_cells() -> None:
    cells = shape_cells()
    found = packed._C.fast_fields(cells)
    assert found[:-2] == [packed._fast_fields(q, v) for q, v in cells[:-2]]
    assert None not in found[:-2]  # taken in C, not left to numpy
    assert found[-2:] == [None, None]  # raw values: numpy's
    assert [packed.pack([c]) for c in cells] == [numpy_pack([c]) for c in cells]


@needs_c
def test_the_c_encoder_at_the_integer_edges() -> None:
    """tests/storage/edges.py: int64's ends and the fast form's limit, 2**61 (beyond it the
    values are raw: left to numpy)."""
    cells = [cell for _, cell in edge_cells()]
    found = packed._C.fast_fields(cells)
    for cell, fields in zip(cells, found, strict=True):
        if fields is not None:
            assert fields == packed._fast_fields(*cell)
    assert [packed.pack([c]) for c in cells] == [numpy_pack([c]) for c in cells]
    inside = [values for values, _ in edge_cells() if max(map(abs, values)) < 2**61]
    assert sum(fields is not None for fields in found) == len(inside)


async def test_a_read_hop_takes_blocks_until_they_hold_enough_values(
    store: EmbeddedStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scan_blocks reads up to BLOCKS_PER_READ blocks per reader-thread hop, fewer once
    they hold HOP_VALUES values (the query decodes a block while the next is read); the
    blocks are the same either way."""
    rows = [
        b"\x00\x00\x01" + struct.pack(">I", BASE + 3600 * hour) + b"\x00\x00\x01\x00\x00\x01"
        for hour in range(8)
    ]
    await store.put(
        "d",
        [
            Put(row, "t", *compacted([(BASE + 1, hour), (BASE + 2, 2)]))
            for hour, row in enumerate(rows)
        ],
    )
    hops = 0
    read = store._read

    async def counted(*args: Any) -> Any:
        nonlocal hops
        hops += 1
        return await read(*args)

    monkeypatch.setattr(store, "_read", counted)
    seen = []
    for hop_values, want_hops in ((1000, 2), (2, 8)):
        monkeypatch.setattr(storage_module, "HOP_VALUES", hop_values)
        hops = 0
        blocks = [b async for b in store.scan_blocks("d", ScanSpec(families=("t",), batch_rows=1))]
        assert hops == want_hops
        seen.append([(list(b.keys), list(b.values)) for b in blocks])
    assert seen[0] == seen[1]
    assert [k for keys, _ in seen[0] for k in keys] == rows
