"""Packed rows read straight into points (tsd/storage/embedded/points.py, _points.c) against
the cells path: unpacked cell bytes decoded by tsd.query.decode, and the scalar reference
(codec.decode_cells). Differential over random compacted cells: integers of every width
(canonical, wider, narrower than their value), 4- and 8-byte floats (short decimals and
arbitrary doubles), seconds and millisecond qualifiers, irregular offsets, cells of a few
points and random walks of several hundred, with and without the meta byte, and cells
that path must leave to the cells (duplicates, unsorted offsets, unreadable flags, no meta
byte)."""

from __future__ import annotations

import random
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.storage.edges import edge_cells
from tsd.codec import KeyLayout, compact_row, decode_cells, encode_point, encode_row_key
from tsd.errors import StorageError
from tsd.query.decode import RowPoints, decode_block, decode_rows
from tsd.storage.base import Cell, CellBlock, FamilySpec, PointBlock, Put, Row, ScanSpec
from tsd.storage.embedded import EmbeddedStorage, blocks, packed, points
from tsd.storage.embedded import storage as storage_module
from tsd.storage.embedded.keys import escape_row

pytestmark = pytest.mark.skipif(
    not points.available(),
    reason="tsd.storage.embedded._points not loaded (not built, or hidden by TSD_DISABLE_NATIVE)",
)

LAYOUT = KeyLayout()
BASE = 1356998400
METRIC = b"\x00\x00\x01"

INT_FLAGS = {1: 0x0, 2: 0x1, 4: 0x3, 8: 0x7}
INT_RANGES = {1: 0x7F, 2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}


def _canonical_width(value: int) -> int:
    return next(w for w in (1, 2, 4, 8) if -INT_RANGES[w] - 1 <= value <= INT_RANGES[w])


@st.composite
def compacted_cells(draw: st.DrawFn) -> tuple[tuple[bytes, bytes], bool]:
    """A compacted cell (qualifier, value) and whether points.decode must take it."""
    ms = draw(st.booleans())
    # a quarter of the cells hold hundreds of points, a random walk (what a collector
    # sends): the integer and decimal columns the C reads 256 points at a time (_points.c)
    big = draw(st.integers(0, 3)) == 0
    n = draw(st.integers(250, 600) if big else st.integers(2, 40))
    top = (1 << 22) if ms else 0xF00
    if draw(st.booleans()):
        step = draw(st.integers(1, top // n))
        first = draw(st.integers(0, top - 1 - step * (n - 1)))
        offsets = [first + i * step for i in range(n)]
    else:
        offsets = sorted(draw(st.sets(st.integers(0, top - 1), min_size=n, max_size=n)))
    kind = "walk" if big else draw(st.sampled_from(["int", "decimal", "double", "mixed", "walk"]))
    widths = draw(st.sampled_from(["canonical", "one", "any"]))
    one_width = draw(st.sampled_from([1, 2, 4, 8]))
    places = draw(st.integers(0, 6))
    rng = draw(st.randoms(use_true_random=False))
    walk = [rng.randrange(-(10**9), 10**9)]
    spread = rng.choice([1, 100, 10**6])
    for _ in range(n - 1):
        walk.append(walk[-1] + rng.randrange(-spread, spread + 1))

    def pick(choices: list[Any]) -> Any:
        # a walk's choices from its generator: hundreds of draws would slow hypothesis down
        return rng.choice(choices) if kind == "walk" else draw(st.sampled_from(choices))

    flags: list[int] = []
    values: list[bytes] = []
    for i in range(n):
        point = kind if kind != "mixed" else draw(st.sampled_from(["int", "decimal", "double"]))
        if point == "walk" and places == 0:
            point = "int"
        if point == "int":
            span = INT_RANGES[pick([1, 2, 4, 8])]
            value = walk[i] if kind == "walk" else draw(st.integers(-span - 1, span))
            width = _canonical_width(value)
            if widths == "one":
                width = one_width
            elif widths == "any":
                width = pick([1, 2, 4, 8])
            flags.append(INT_FLAGS[width])
            values.append((value & ((1 << 8 * width) - 1)).to_bytes(width, "big"))
        else:
            if point == "walk":
                number = round(walk[i] / 10**places, places)
            elif point == "decimal":
                number = round(draw(st.floats(-1e6, 1e6)), places)
            else:
                number = draw(st.floats(allow_nan=False, allow_infinity=False))
            single = (
                abs(number) < 3e38 and struct.unpack(">f", struct.pack(">f", number))[0] == number
            )
            four = single if widths == "canonical" else pick([False, True])
            with_f4 = four and abs(number) < 3.4e38
            flags.append(0xB if with_f4 else 0xF)
            values.append(struct.pack(">f" if with_f4 else ">d", number))
    breaker = draw(
        st.sampled_from(["", "", "", "", "meta", "no meta", "duplicate", "unsorted", "flags"])
    )
    meta = b"\x01" if breaker == "meta" else b"" if breaker == "no meta" else b"\x00"
    if breaker == "duplicate":
        offsets[1] = offsets[0]
    elif breaker == "unsorted":
        offsets[0], offsets[-1] = offsets[-1], offsets[0]
    elif breaker == "flags":
        flags[0] = draw(st.sampled_from([0x2, 0x4, 0x8, 0x9, 0xA]))  # unreadable widths
        values[0] = values[0][: (flags[0] & 7) + 1].ljust((flags[0] & 7) + 1, b"\x00")
    if ms:
        qualifier = b"".join(
            (0xF0000000 | o << 6 | f).to_bytes(4, "big")
            for o, f in zip(offsets, flags, strict=True)
        )
    else:
        qualifier = b"".join(
            (o << 4 | f).to_bytes(2, "big") for o, f in zip(offsets, flags, strict=True)
        )
    clean = breaker in ("", "meta")
    return (qualifier, b"".join(values) + meta), clean


def _key(r: int, hour: int) -> bytes:
    tagv = bytes((0, 0, r % 251 + 1))
    return encode_row_key(LAYOUT, METRIC, BASE + 3600 * hour, [(b"\x00\x00\x01", tagv)])


def _block(keys: list[bytes], cells: list[tuple[bytes, bytes]]) -> CellBlock:
    return CellBlock.from_rows([Row(k, (Cell("t", *c),)) for k, c in zip(keys, cells, strict=True)])


def _never() -> CellBlock:
    raise AssertionError("the cells were not asked for")


def _same(got: RowPoints, want: RowPoints) -> None:
    assert np.array_equal(got.row_offsets, want.row_offsets)
    assert np.array_equal(got.timestamps, want.timestamps)
    assert np.array_equal(got.values.view(np.int64), want.values.view(np.int64))  # bits

    def ints(p: RowPoints) -> tuple[list[int], list[bool]]:
        n = p.point_count
        is_int = p.is_int if p.is_int is not None else np.zeros(n, np.bool_)
        values = p.int_values if p.int_values is not None else np.zeros(n, np.int64)
        return np.where(is_int, values, 0).tolist(), is_int.tolist()

    assert ints(got) == ints(want)
    assert got.stored_bytes == want.stored_bytes


def _reference(key: bytes, cell: tuple[bytes, bytes]) -> list[tuple[int, bytes]]:
    decoded = decode_cells(int.from_bytes(key[3:7], "big"), [cell], row_key=key)
    return [
        (
            p.timestamp_ms,
            struct.pack(">q", p.value) if not p.is_float else struct.pack(">d", p.value),
        )
        for p in decoded.points
    ]


def _listed(found: RowPoints) -> list[tuple[int, bytes]]:
    is_int = found.is_int if found.is_int is not None else np.zeros(found.point_count, np.bool_)
    out = []
    for i in range(found.point_count):
        if is_int[i]:
            assert found.int_values is not None
            value = struct.pack(">q", int(found.int_values[i]))
        else:
            value = struct.pack(">d", float(found.values[i]))
        out.append((int(found.timestamps[i]), value))
    return out


def _with_edge_cells(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` with explicit examples: each cell of tests/storage/edges.py alone (int64's
    ends and integers around 2**61: clean, so taken), then all of them in one batch."""
    cells = [cell for _, cell in edge_cells()]
    for cell in cells:
        test = example([(cell, True)], random.Random(0))(test)
    return example([(cell, True) for cell in cells], random.Random(1))(test)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@_with_edge_cells
@given(st.lists(compacted_cells(), min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_points_are_the_cells_decoded(
    drawn: list[tuple[tuple[bytes, bytes], bool]], rng: random.Random
) -> None:
    cells = [cell for cell, _ in drawn]
    keys = [_key(i, rng.randrange(4)) for i in range(len(cells))]
    entries = [packed.pack([cell]) for cell in cells]
    taken = []
    for key, entry, cell, (_, clean) in zip(keys, entries, cells, drawn, strict=True):
        found = points.decode([key], [entry], _never)
        taken.append(found is not None)
        if clean:
            assert found is not None, cell  # the path takes every clean compacted cell
        if found is None:
            continue
        assert found.cell_count == 1
        want = decode_rows(_block([key], [cell]), LAYOUT)
        _same(decode_block(found, LAYOUT), want)
        assert _listed(decode_block(found, LAYOUT)) == _reference(key, cell)
    together = points.decode(keys, entries, _never)
    assert (together is not None) == all(taken)
    if together is not None:
        _same(decode_block(together, LAYOUT), decode_rows(_block(keys, cells), LAYOUT))


def _check_batch(cells: list[tuple[bytes, bytes]]) -> PointBlock:
    keys = [_key(i, i % 3) for i in range(len(cells))]
    entries = [packed.pack([c]) for c in cells]
    found = points.decode(keys, entries, lambda: _block(keys, cells))
    assert found is not None
    _same(decode_block(found, LAYOUT), decode_rows(_block(keys, cells), LAYOUT))
    assert [tuple(c) for r in found.cells() for c in r.cells] == [("t", *c) for c in cells]
    return found


def _zstd(cell: tuple[bytes, bytes]) -> bool:
    entry = packed.pack([cell])
    return entry[1] == packed.FAST and bool(entry[2] & 0x04)


def test_compressed_entries_decode_together() -> None:
    # zstd only pays for repetitive payloads: integers in a repeating pattern (the size
    # once decompressed known from the header) and arbitrary doubles of mixed widths under
    # a flags column (known only once decompressed).
    ints = [
        compact_row([encode_point(BASE + 10 * i, (i % 5) * 1_000_003 + s)[1:] for i in range(300)])
        for s in range(6)
    ]
    doubles = []
    for s in range(6):
        cells = []
        for i in range(300):
            value = (i % 4 + s) / 3
            if i % 2:
                cells.append(((i * 10 << 4 | 0xB).to_bytes(2, "big"), struct.pack(">f", value)))
            else:
                cells.append(((i * 10 << 4 | 0xF).to_bytes(2, "big"), struct.pack(">d", value)))
        doubles.append(compact_row(cells))
    plain = [compact_row([encode_point(BASE + 60 * i, i * 0.5)[1:] for i in range(60)])]
    cells = [c for c in ints + doubles + plain if c is not None]
    assert len(cells) == 13
    assert [_zstd(c) for c in cells] == [True] * 12 + [False]
    _check_batch(cells)
    _check_batch(cells[::-1])


def test_a_corrupt_entry_is_left_to_the_cells_path() -> None:
    good = compact_row([encode_point(BASE + 10 * i, i * 3)[1:] for i in range(50)])
    assert good is not None
    stored = packed.pack([good])
    keys = [_key(0, 0), _key(1, 0)]
    for bad in (stored[:-3], stored[:10], stored + b"\x00", b"\x02" + stored[1:]):
        assert points.decode(keys, [stored, bad], _never) is None
        with pytest.raises(StorageError, match="corrupt embedded packed value"):
            packed.unpack_many([stored, bad])
    # a compressed payload that does not decompress
    repetitive = compact_row(
        [encode_point(BASE + 10 * i, (i % 5) * 1_000_003)[1:] for i in range(300)]
    )
    assert repetitive is not None
    assert _zstd(repetitive)
    entry = bytearray(packed.pack([repetitive]))
    entry[-5] ^= 0xFF
    assert points.decode(keys, [stored, bytes(entry)], _never) is None


def test_every_integer_width_and_millisecond_rows() -> None:
    cells = []
    for width, span in INT_RANGES.items():
        values = [(-1) ** i * (span - i) for i in range(40)]
        q = b"".join(((10 * i) << 4 | INT_FLAGS[width]).to_bytes(2, "big") for i in range(40))
        v = b"".join((x & ((1 << 8 * width) - 1)).to_bytes(width, "big") for x in values)
        cells.append((q, v + b"\x00"))
    ms = compact_row([encode_point(BASE * 1000 + 7 * i + i % 3, i * 0.25)[1:] for i in range(99)])
    assert ms is not None
    found = _check_batch([*cells, ms])
    assert found.is_int is not None
    assert found.ints is not None
    assert found.ints[:40].tolist() == [(-1) ** i * (0x7F - i) for i in range(40)]


# -- through the store ---------------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStorage]:
    storage = EmbeddedStorage(tmp_path / "store")
    await storage.create_table("d", [FamilySpec("t")])
    yield storage
    await storage.close()


async def _blocks(store: EmbeddedStorage, spec: ScanSpec) -> list[CellBlock | PointBlock]:
    return [b async for b in store.scan_blocks("d", spec)]


async def test_scan_blocks_read_compacted_rows_as_points(
    store: EmbeddedStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(5)
    puts = []
    for r in range(40):
        key = _key(r, r % 4)
        base = BASE + 3600 * (r % 4)
        step = rng.choice([1, 10, 60])
        value: Callable[[int], int | float] = rng.choice(
            [lambda i: i * 7 - 100, lambda i: round(i * 0.37, 2), lambda i: i / 7]
        )
        cell = compact_row([encode_point(base + step * i, value(i))[1:] for i in range(50)])
        assert cell is not None
        puts.append(Put(key, "t", *cell))
    await store.put("d", puts)
    spec = ScanSpec(batch_rows=16)
    found = await _blocks(store, spec)
    assert all(isinstance(b, PointBlock) for b in found)
    monkeypatch.setattr(points, "_C", None)  # without the helper: the cells
    cells = await _blocks(store, spec)
    assert all(isinstance(b, CellBlock) for b in cells)
    for got, want in zip(found, cells, strict=True):
        assert isinstance(got, PointBlock)
        assert isinstance(want, CellBlock)
        assert list(got.cells()) == list(want)
        _same(decode_block(got, LAYOUT), decode_rows(want, LAYOUT))
    # a row the path does not take (two compacted cells) sends its batch to the cells
    key = _key(3, 3)
    late = compact_row([encode_point(BASE + 3 * 3600 + 3000 + i, i)[1:] for i in range(5)])
    assert late is not None
    await store.put("d", [Put(key, "t", *late)])
    monkeypatch.undo()
    again = await _blocks(store, spec)
    assert sum(isinstance(b, CellBlock) for b in again) == 1
    monkeypatch.setattr(points, "_C", None)
    for got, want in zip(again, await _blocks(store, spec), strict=True):
        assert isinstance(want, CellBlock)
        _same(decode_block(got, LAYOUT), decode_rows(want, LAYOUT))


#: a key's tail after its row in the packed database: 00 00, family "t", PACKED_END
_SUFFIX = b"t\x01"


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=0, max_size=12),
            st.sampled_from([b"\x00\x00t\x01", b"\x00\x00t\x00q", b"\x00\x00u\x01", b"", b"t"]),
            st.binary(min_size=0, max_size=3),
            st.booleans(),
        ),
        max_size=6,
    )
)
def test_packed_rows_in_c_are_the_keys_read_one_by_one(
    entries: list[tuple[bytes, bytes, bytes, bool]],
) -> None:
    # Rows escaped as keys.py escapes them or left raw (a corrupt key: a bare 00, 00 then
    # another byte), every tail and empty values: the C helper answers as the Python loop.
    pairs = [
        ((escape_row(row) if escaped else row) + tail, value)
        for row, tail, value, escaped in entries
    ]
    helper = points._C
    try:
        points._C = None
        want = points.packed_rows(pairs, _SUFFIX)
    finally:
        points._C = helper
    assert points.packed_rows(pairs, _SUFFIX) == want


def test_packed_rows_unescape_the_row_and_refuse_other_entries() -> None:
    row = b"\x00\x00\x01\x50\xe2\x29\x00\xff\x00"
    key = escape_row(row) + b"\x00\x00" + _SUFFIX
    assert points.packed_rows([(key, b"v")], _SUFFIX) == ([row], [b"v"])
    assert points.packed_rows([(key, b"")], _SUFFIX) is None  # an empty value
    assert points.packed_rows([(key + b"x", b"v")], _SUFFIX) is None  # not the family's tail
    assert points.packed_rows([(escape_row(row), b"v")], _SUFFIX) is None  # no row end


def test_the_event_loops_first_hop_is_below_the_take_lock() -> None:
    """scan_ranges' first hop runs on the event loop: its takes must never wait for a
    reader thread's big take (blocks._TAKING)."""
    assert storage_module.INLINE_ROWS < blocks.TAKE_ALONE_FROM


async def test_a_small_read_does_not_wait_for_a_big_take(store: EmbeddedStorage) -> None:
    """While a reader thread holds the take lock (a big scan taking its entries), a read of
    a few rows on the event loop goes on: the lock is only for takes of
    TAKE_ALONE_FROM entries or more."""
    puts = []
    for r in range(3):
        for hour in range(3):
            cell = compact_row(
                [encode_point(BASE + 3600 * hour + 10 * i, i)[1:] for i in range(30)]
            )
            assert cell is not None
            puts.append(Put(_key(r, hour), "t", *cell))
    await store.put("d", puts)
    # a row each (a filter's series, hour by hour)
    specs = [
        ScanSpec(start=_key(r, h), stop=_key(r, h) + b"\0") for r in range(3) for h in range(3)
    ]
    held, release = threading.Event(), threading.Event()

    def big_take() -> None:
        with blocks._TAKING:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=big_take)
    holder.start()
    try:
        assert held.wait(5)
        t0 = time.perf_counter()
        found = [b async for b in store.scan_ranges("d", specs)]
        waited = time.perf_counter() - t0
    finally:
        release.set()
        holder.join()
    assert sum(len(b) for b in found) == 9
    assert waited < 2.0  # not the 5 s the holder keeps the lock


async def test_big_takes_take_turns(
    store: EmbeddedStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of TAKE_ALONE_FROM rows or more is taken under the lock, and reads the
    same points as without it."""
    monkeypatch.setattr(blocks, "TAKE_ALONE_FROM", 4)
    puts = []
    for r in range(12):
        cell = compact_row([encode_point(BASE + 10 * i, i * 0.5)[1:] for i in range(20)])
        assert cell is not None
        puts.append(Put(_key(r, 0), "t", *cell))
    await store.put("d", puts)
    spec = ScanSpec(batch_rows=8)
    unlocked = [b async for b in store.scan_blocks("d", spec)]
    assert sum(len(b) for b in unlocked) == 12
    taken = threading.Event()
    real = blocks._TAKING

    class Spy:
        def __enter__(self) -> None:
            real.acquire()
            taken.set()

        def __exit__(self, *exc: object) -> None:
            real.release()

    monkeypatch.setattr(blocks, "_TAKING", Spy())
    locked = [b async for b in store.scan_blocks("d", spec)]
    assert taken.is_set()
    for got, want in zip(locked, unlocked, strict=True):
        assert isinstance(got, PointBlock)
        assert isinstance(want, PointBlock)
        _same(decode_block(got, LAYOUT), decode_block(want, LAYOUT))
