"""The vectorised row decoder against the scalar reference (codec.decode_cells).

Differential, as Prometheus' TestVarbitIntAndFastProduceIdenticalOutput: random rows mixing
single second and ms cells, compacted cells, append cells, annotations, unknown and corrupt
cells must decode to the same points (bit for bit) or fail with the same error.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec import (
    KeyLayout,
    compact_row,
    decode_cells,
    encode_annotation_qualifier,
    encode_point,
    encode_row_key,
)
from tsd.errors import CodecError
from tsd.query.decode import decode_rows, series_key
from tsd.query.spans import Spans, assemble_spans
from tsd.storage.base import Cell, CellBlock, Row

decode_settings = settings(max_examples=200, deadline=None)

LAYOUT = KeyLayout()
BASE = 1356998400
METRIC = b"\x00\x00\x01"

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SMALL = st.integers(min_value=-300, max_value=300)
VALUES = st.one_of(INT64, SMALL, st.floats(allow_nan=False, allow_infinity=False))
OFFSETS_MS = st.one_of(
    st.integers(min_value=0, max_value=3599).map(lambda s: s * 1000),
    st.integers(min_value=0, max_value=3_599_999),
)


def _point(base_s: int, offset_ms: int, value: int | float) -> tuple[bytes, bytes]:
    ts = base_s + offset_ms // 1000 if offset_ms % 1000 == 0 else base_s * 1000 + offset_ms
    _, qualifier, data = encode_point(ts, value)
    return qualifier, data


@st.composite
def cell_groups(draw: st.DrawFn, base_s: int) -> list[tuple[bytes, bytes]]:
    """One way of storing some points: singles, a compacted cell, an append cell, or odd."""
    kind = draw(
        st.sampled_from(["single", "compacted", "append", "annotation", "unknown", "garbage"])
    )
    points = draw(st.lists(st.tuples(OFFSETS_MS, VALUES), max_size=12))
    cells = [_point(base_s, off, value) for off, value in points]
    if kind == "single":
        return cells
    if kind == "compacted":
        if not cells:
            return []
        if draw(st.booleans()):
            compacted = compact_row(cells, fix_duplicates=True)
            return [compacted] if compacted else []
        # A hand-made compacted cell: maybe unsorted, duplicated, mixed, without meta byte.
        meta = draw(st.sampled_from([b"\x00", b"\x01", b""]))
        return [(b"".join(q for q, _ in cells), b"".join(v for _, v in cells) + meta)]
    if kind == "append":
        return [(b"\x05\x00\x00", b"".join(q + v for q, v in cells))]
    if kind == "annotation":
        start = draw(st.integers(min_value=base_s, max_value=base_s + 3599))
        return [(encode_annotation_qualifier(start), b'{"description":"x"}')]
    if kind == "unknown":
        return [(b"\x06\x00\x01", b"histogram")]
    qualifier = draw(st.binary(min_size=0, max_size=9))
    value = draw(st.binary(min_size=0, max_size=17))
    return [(qualifier, value)]


@st.composite
def rows(draw: st.DrawFn, count: int = 4) -> list[Row]:
    out = []
    for r in range(draw(st.integers(min_value=1, max_value=count))):
        base_s = BASE + 3600 * draw(st.integers(min_value=0, max_value=3))
        cells: dict[bytes, bytes] = {}
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            for qualifier, value in draw(cell_groups(base_s)):
                cells[qualifier] = value  # storage keeps one cell per qualifier
        tagv = bytes((0, 0, r % 3 + 1))
        key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
        out.append(Row(key, tuple(Cell("t", q, v) for q, v in sorted(cells.items()))))
    return out


def _reference(row: Row, fix_duplicates: bool) -> list[tuple[int, bytes, bool]]:
    base_s = int.from_bytes(row.key[3:7], "big")
    decoded = decode_cells(
        base_s,
        [(c.qualifier, c.value) for c in row.cells],
        fix_duplicates=fix_duplicates,
        row_key=row.key,
    )
    return [(p.timestamp_ms, _bits(p.value), isinstance(p.value, int)) for p in decoded.points]


def _reference_error(row: Row, fix_duplicates: bool) -> str | None:
    try:
        _reference(row, fix_duplicates)
    except CodecError as exc:
        return exc.message
    return None


def _bits(value: int | float) -> bytes:
    return struct.pack(">q", value) if isinstance(value, int) else struct.pack(">d", value)


def _fast(rows_: Sequence[Row], fix_duplicates: bool) -> list[list[tuple[int, bytes, bool]]]:
    points = decode_rows(rows_, LAYOUT, fix_duplicates=fix_duplicates)
    n = points.point_count
    is_int = points.is_int if points.is_int is not None else [False] * n
    ints = points.int_values if points.int_values is not None else [0] * n
    out = []
    for r in range(len(rows_)):
        lo, hi = int(points.row_offsets[r]), int(points.row_offsets[r + 1])
        out.append(
            [
                (
                    int(points.timestamps[i]),
                    _bits(int(ints[i])) if is_int[i] else _bits(float(points.values[i])),
                    bool(is_int[i]),
                )
                for i in range(lo, hi)
            ]
        )
        for i in range(lo, hi):
            if is_int[i]:  # the double of an integer point is Java's (double) long
                assert points.values[i] == float(int(ints[i]))
    return out


@pytest.mark.slow
@decode_settings
@given(rows(), st.booleans())
def test_fast_decoder_matches_the_reference(rows_: list[Row], fix_duplicates: bool) -> None:
    expected: list[list[tuple[int, bytes, bool]]] = []
    readable: list[Row] = []
    for row in rows_:
        error = _reference_error(row, fix_duplicates)
        if error is None:
            expected.append(_reference(row, fix_duplicates))
            readable.append(row)
        else:
            # An unreadable row fails the fast decoder with the same message.
            with pytest.raises(CodecError) as caught:
                decode_rows([row], LAYOUT, fix_duplicates=fix_duplicates)
            assert caught.value.message == error
            with pytest.raises(CodecError) as caught:  # read in bulk: the same error
                decode_rows(CellBlock.from_rows([row]), LAYOUT, fix_duplicates=fix_duplicates)
            assert caught.value.message == error
    assert _fast(readable, fix_duplicates) == expected
    # the same rows read in bulk (cells end to end, as the HBase backend reads them)
    assert _fast(CellBlock.from_rows(readable), fix_duplicates) == expected


@pytest.mark.slow
@decode_settings
@given(rows(count=6))
def test_row_annotations_match_the_reference(rows_: list[Row]) -> None:
    readable = [row for row in rows_ if _reference_error(row, True) is None]
    points = decode_rows(readable, LAYOUT, fix_duplicates=True)
    got = sorted((r, a.timestamp_ms, a.json) for r, a in points.annotations)
    expected = []
    for r, row in enumerate(readable):
        base_s = int.from_bytes(row.key[3:7], "big")
        decoded = decode_cells(
            base_s, [(c.qualifier, c.value) for c in row.cells], fix_duplicates=True
        )
        expected += [(r, a.timestamp_ms, a.json) for a in decoded.annotations]
    assert got == sorted(expected)


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        pytest.param(
            [(b"\x00\x00", b"\x01"), (b"\x00\x01", b"\x02\x00")],
            "Duplicate timestamp for key=",
            id="conflicting_duplicate",
        ),
        pytest.param(
            [(b"\x00\x0b", b"\x01\x00\x00\x00\x3f\x80\x00\x00")],
            "Corrupted floating point value",
            id="legacy_float_with_nonzero_prefix",
        ),
        pytest.param(
            [(b"\x00\x00\x00\x10", b"\x01\x02\x03\x00")],
            "Corrupted value: couldn't break down into individual values",
            id="compacted_with_extra_bytes",
        ),
        pytest.param([(b"", b"\x01")], "Empty qualifier", id="empty_qualifier"),
    ],
)
def test_unreadable_rows_fail_with_opentsdb_messages(
    cells: list[tuple[bytes, bytes]], message: str
) -> None:
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    row = Row(key, tuple(Cell("t", q, v) for q, v in cells))
    with pytest.raises(CodecError, match=message):
        decode_rows([row], LAYOUT)


def test_duplicates_keep_the_newest_cell_with_fix_duplicates() -> None:
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    # offset 0 stored twice: as a single cell and inside a later compacted cell.
    compacted = compact_row([(b"\x00\x00", b"\x07"), (b"\x00\x10", b"\x08")])
    assert compacted is not None
    row = Row(key, (Cell("t", b"\x00\x00", b"\x01"), Cell("t", *compacted)))
    points = decode_rows([row], LAYOUT, fix_duplicates=True)
    assert points.int_values is not None
    assert points.int_values.tolist() == [7, 8]
    assert points.timestamps.tolist() == [BASE * 1000, BASE * 1000 + 1000]


def test_spans_are_series_in_key_order_with_rows_in_time_order() -> None:
    rng = random.Random(7)
    made = []
    for tagv in (b"\x00\x00\x03", b"\x00\x00\x01", b"\x00\x00\x02"):
        for hour in range(3):
            base_s = BASE + 3600 * hour
            key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
            cells = [_point(base_s, 1000 * s, tagv[-1] * 100 + hour) for s in (0, 10, 20)]
            made.append(Row(key, tuple(Cell("t", q, v) for q, v in cells)))
    rng.shuffle(made)
    half = len(made) // 2
    parts = [
        ([r.key for r in part], decode_rows(part, LAYOUT)) for part in (made[:half], made[half:])
    ]
    spans = assemble_spans(parts, LAYOUT)
    assert spans.keys == sorted({series_key(LAYOUT, r.key) for r in made})
    assert spans.batch.offsets.tolist() == [0, 9, 18, 27]
    for s in range(3):
        ts, values = spans.batch.series(s)
        assert ts.tolist() == sorted(ts.tolist())
        assert values.tolist() == [float((s + 1) * 100 + h) for h in range(3) for _ in range(3)]


def test_few_rows_find_their_series_as_the_byte_matrix_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A few rows are keyed one by one (spans.FEW_ROWS), more as a byte matrix: the same
    # series in the same order, whatever the tag values' bytes and the rows' order.
    from tsd.query import spans as spans_module

    rng = random.Random(11)
    for _ in range(50):
        keys = []
        for _ in range(rng.randint(1, 30)):
            tagv = bytes(rng.choice((0, 1, 255)) for _ in range(3))
            base_s = BASE + 3600 * rng.randint(0, 5)
            keys.append(encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)]))
        monkeypatch.setattr(spans_module, "FEW_ROWS", len(keys))
        few = spans_module._series_of_rows(LAYOUT, keys)
        monkeypatch.setattr(spans_module, "FEW_ROWS", 0)
        matrix = spans_module._series_of_rows(LAYOUT, keys)
        assert few[0] == matrix[0]
        assert few[1].tolist() == matrix[1].tolist()
        assert few[2].tolist() == matrix[2].tolist()


FINITE = st.floats(allow_nan=False, allow_infinity=False)
FLOAT32_EXACT = st.floats(width=32, allow_nan=False, allow_infinity=False).map(float)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@decode_settings
@given(
    st.lists(
        st.tuples(OFFSETS_MS, st.one_of(FLOAT32_EXACT, FINITE)),
        min_size=2,
        max_size=40,
    ),
    st.booleans(),
)
def test_rows_of_4_and_8_byte_floats_only_decode_as_the_reference(
    points: list[tuple[int, float]], compacted: bool
) -> None:
    """Floats of both widths and no integer: the values are read in one gather."""
    cells = dict(_point(BASE, offset, value) for offset, value in points)
    if compacted:
        cell = compact_row(sorted(cells.items()), fix_duplicates=True)
        assert cell is not None
        cells = {cell[0]: cell[1]}
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    row = Row(key, tuple(Cell("t", q, v) for q, v in sorted(cells.items())))
    assert _fast(CellBlock.from_rows([row]), True) == [_reference(row, True)]


@st.composite
def seconds_blocks(draw: st.DrawFn) -> CellBlock:
    """Rows of compacted cells and single cells in seconds, values of mixed types and widths
    (the shape the C helper reads), sometimes with a row that breaks that shape."""
    rows_: list[Row] = []
    for r in range(draw(st.integers(min_value=1, max_value=8))):
        base_s = BASE + 3600 * draw(st.integers(min_value=0, max_value=3))
        n = draw(st.integers(min_value=1, max_value=30))
        offsets = sorted(draw(st.sets(st.integers(0, 4095), min_size=n, max_size=n)))
        points = [_point(base_s, off * 1000, draw(VALUES)) for off in offsets]
        breaker = draw(st.sampled_from(["", "", "", "unsorted", "duplicate", "short", "legacy"]))
        if breaker == "unsorted" and n > 1:
            points[0], points[-1] = points[-1], points[0]
        elif breaker == "duplicate" and n > 1:
            points[1] = (points[0][0], points[1][1])
        elif breaker == "legacy":  # a 4-byte float stored on 8 bytes (old OpenTSDB)
            word = draw(st.sampled_from([bytes(4), b"\x00\x00\x00\x01"]))
            points[0] = (
                ((offsets[0] << 4) | 0xB).to_bytes(2, "big"),
                word + struct.pack(">f", 1.5),
            )
        shape = draw(st.sampled_from(["compacted", "singles", "two cells"]))
        if breaker == "legacy" or shape == "singles" and breaker not in ("unsorted", "duplicate"):
            cells = points
        else:
            cut = n // 2 if shape == "two cells" else n
            cells = [
                (b"".join(q for q, _ in part), b"".join(v for _, v in part) + b"\x00")
                for part in (points[:cut], points[cut:])
                if part
            ]
            if breaker == "short":
                cells[0] = (cells[0][0], cells[0][1][:-2])
        tagv = bytes((0, 0, r % 3 + 1))
        key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
        rows_.append(Row(key, tuple(Cell("t", q, v) for q, v in cells)))
    return CellBlock.from_rows(rows_)


@pytest.mark.slow
@decode_settings
@given(seconds_blocks(), st.booleans())
def test_seconds_blocks_decode_as_the_reference_with_and_without_c(
    block: CellBlock, fix_duplicates: bool
) -> None:
    # The C helper (when it takes the block) and the numpy path: the reference's points,
    # or its error, either way.
    from tsd.query import decode as decode_module

    errors = [_reference_error(row, fix_duplicates) for row in block]
    expected = [_reference(row, fix_duplicates) for row in block] if not any(errors) else None
    compiled = decode_module._C
    for helper in (compiled, None):
        decode_module._C = helper
        try:
            if expected is None:
                with pytest.raises(CodecError):
                    decode_rows(block, LAYOUT, fix_duplicates=fix_duplicates)
            else:
                assert _fast(block, fix_duplicates) == expected
        finally:
            decode_module._C = compiled


def test_c_helper_takes_compacted_rows() -> None:
    # Not a test that cannot fail: where a C compiler built it, the helper really answers.
    from tsd.query.decode import _C

    if _C is None:
        pytest.skip("tsd.query._decode not loaded (not built, or hidden by TSD_DISABLE_NATIVE)")
    cells = [encode_point(BASE + 10 * i, i + 0.5 if i % 3 else i)[1:] for i in range(360)]
    compacted = compact_row(cells)
    assert compacted is not None
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    block = CellBlock.from_rows([Row(key, (Cell("t", *compacted),))])
    found = _C.decode_seconds(
        block.qualifiers,
        block.values,
        block.qualifier_lengths,
        block.value_lengths,
        block.counts,
        np.array([BASE * 1000], dtype=np.int64),
    )
    assert found is not None
    assert np.frombuffer(found[1]).tolist() == [i + 0.5 if i % 3 else i for i in range(360)]


@pytest.mark.parametrize("seed", range(8))
def test_spans_of_uniform_rows_match_the_row_by_row_gather(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows of equal point counts (compacted grids) are moved as one matrix; the answer must be
    # the row-by-row gather's, whatever the parts' order, missing hours and tag widths.
    from tsd.query import spans as spans_module

    rng = random.Random(seed)
    n = rng.choice([1, 3, 6])
    tagvs = [bytes((0, rng.choice((0, 1)), v)) for v in rng.sample(range(1, 255), 5)]
    made = []
    for tagv in tagvs:
        for hour in range(4):
            if rng.random() < 0.2:
                continue  # a missing hour
            base_s = BASE + 3600 * hour
            key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
            offsets = sorted(rng.sample(range(3600), n))
            cells = [_point(base_s, 1000 * s, rng.choice([1, 2.5, -7])) for s in offsets]
            compacted = compact_row(cells)
            assert compacted is not None
            made.append(Row(key, (Cell("t", *compacted),)))
    rng.shuffle(made)
    cuts = sorted(rng.sample(range(1, len(made)), 2))
    pieces = [made[: cuts[0]], made[cuts[0] : cuts[1]], made[cuts[1] :]]
    parts = [([r.key for r in p], decode_rows(CellBlock.from_rows(p), LAYOUT)) for p in pieces]
    few = assemble_spans(parts, LAYOUT)  # a few rows: moved a slice each
    monkeypatch.setattr(spans_module, "FEW_ROWS", 0)
    fast = assemble_spans(parts, LAYOUT)
    monkeypatch.setattr(spans_module, "_gather_uniform", lambda *a: None)
    slow = assemble_spans(parts, LAYOUT)
    _same_spans(fast, slow)
    _same_spans(few, slow)


def _same_spans(fast: Spans, slow: Spans) -> None:
    """The same series with the same points, integers and doubles alike."""
    assert fast.keys == slow.keys
    for name in ("timestamps", "values", "offsets", "int_values", "is_int"):
        got, want = getattr(fast.batch, name), getattr(slow.batch, name)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.tolist() == want.tolist()


def test_row_moves_of_unequal_rows_are_not_taken_for_a_matrix() -> None:
    # Rows of 2, 1 and 3 points: 6 in all, as three rows of 2 would be. Only rows that are
    # each full may move as one matrix.
    from tsd.query.spans import _RowMoves

    moves = _RowMoves(
        part=np.array([0, 0, 0], dtype=np.int64),
        start=np.array([0, 2, 3], dtype=np.int64),
        counts=np.array([2, 1, 3], dtype=np.int64),
    )
    values = np.arange(6, dtype=np.int64) * 10
    assert moves.gather([values], np.int64).tolist() == [0, 10, 20, 30, 40, 50]


@pytest.mark.parametrize("ints", [False, True])
def test_rows_already_in_order_are_taken_as_they_are(
    monkeypatch: pytest.MonkeyPatch, ints: bool
) -> None:
    # One series' rows read in key order (a raw query's) need no move: the spans are
    # the ones the row-by-row gather makes, and own their arrays.
    from tsd.query import spans as spans_module

    made = []
    for hour in range(5):
        base_s = BASE + 3600 * hour
        key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", b"\x00\x00\x02")])
        cells = [
            _point(base_s, 1000 * s, (s + hour) if ints and s % 20 else s * 0.5 + hour)
            for s in range(0, 3600, 10 * (hour + 1))
        ]
        made.append(Row(key, tuple(Cell("t", q, v) for q, v in cells)))
    points = decode_rows(made, LAYOUT)
    parts = [([r.key for r in made], points)]
    fast = assemble_spans(parts, LAYOUT)
    monkeypatch.setattr(spans_module, "_in_place", lambda *a: False)
    slow = assemble_spans(parts, LAYOUT)
    _same_spans(fast, slow)
    assert (fast.batch.is_int is not None) == ints
    assert not np.shares_memory(fast.batch.timestamps, points.timestamps)
    assert not np.shares_memory(fast.batch.values, points.values)


@pytest.mark.parametrize("seed", range(12))
def test_a_few_rows_make_the_spans_the_general_path_makes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # spans._few_rows_spans (up to FEW_ROWS rows, row by row in Python) against the
    # general path: rows in any order over several parts, hours missing, integers and
    # doubles, a row of one key in two parts (overlapping: left to the general path) and
    # rows reduced to their buckets (row_points).
    import dataclasses

    from tsd.query import spans as spans_module

    rng = random.Random(seed)
    tagvs = [bytes((0, rng.choice((0, 1)), v)) for v in rng.sample(range(1, 255), 4)]
    made = []
    for tagv in tagvs:
        for hour in range(4):
            if rng.random() < 0.3:
                continue
            base_s = BASE + 3600 * hour
            key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
            offsets = sorted(rng.sample(range(3600), rng.randint(1, 5)))
            cells = [_point(base_s, 1000 * s, rng.choice([1, 2.5, -7, 2**40])) for s in offsets]
            made.append(Row(key, tuple(Cell("t", q, v) for q, v in cells)))
    if seed % 3 == 0 and made:  # one row again in another part: overlapping points
        made.append(made[0])
    if seed % 6 == 2:  # one part, its rows in order (a day of one series)
        pieces = [sorted(made, key=lambda r: (series_key(LAYOUT, r.key), r.key))]
    else:
        rng.shuffle(made)
        cuts = sorted(rng.sample(range(len(made) + 1), 2))
        pieces = [p for p in (made[: cuts[0]], made[cuts[0] : cuts[1]], made[cuts[1] :]) if p]
    parts = [([r.key for r in p], decode_rows(CellBlock.from_rows(p), LAYOUT)) for p in pieces]
    if seed % 4 == 1:  # as rows reduced to buckets: each row's points held
        parts = [
            (keys, dataclasses.replace(p, row_points=np.diff(p.row_offsets) * 3))
            for keys, p in parts
        ]
    few = assemble_spans(parts, LAYOUT)
    monkeypatch.setattr(spans_module, "FEW_ROWS", 0)
    general = assemble_spans(parts, LAYOUT)
    _same_spans(few, general)
    assert few.annotations == general.annotations
    if general.series_points is None:
        assert few.series_points is None
    else:
        assert few.series_points is not None
        assert few.series_points.tolist() == general.series_points.tolist()
