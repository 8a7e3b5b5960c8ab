"""Row decoding and compaction, including append cells.

Pins OpenTSDB 2.4.1 src/core/Internal.java (extractDataPoints: single/compacted cells, meta
byte, legacy fix-ups), src/core/CompactionQueue.java + ColumnDatapointIterator.java (merge
order, duplicate rule, meta byte 0x01 for mixed s/ms) and src/core/AppendDataPoints.java
(later duplicate wins, sorted). Expected compacted cells for the "java_*" cases are the ones
asserted by OpenTSDB's test/core/TestCompactionQueue.java, whose cells are written in list
order (each later cell has a newer HBase timestamp).
"""

from __future__ import annotations

import struct

import pytest

from tsd.codec.append import (
    compact_append_value,
    encode_append_entry,
    is_append_qualifier,
    parse_append_value,
    repair_append_value,
)
from tsd.codec.compaction import (
    AnnotationCell,
    compact_row,
    decode_cells,
    split_cell,
)
from tsd.errors import CodecError, IllegalDataError

BASE = 1356998400
APPEND = b"\x05\x00\x00"


def q(offset_s: int, flags: int) -> bytes:
    return struct.pack(">H", offset_s << 4 | flags)


def qm(offset_ms: int, flags: int) -> bytes:
    return struct.pack(">I", 0xF0000000 | offset_ms << 6 | flags)


def long8(v: int) -> bytes:
    return struct.pack(">q", v)


def int4(v: int) -> bytes:
    return struct.pack(">i", v)


Cells = list[tuple[bytes, bytes]]


# --- decode_cells ------------------------------------------------------------------------


def points_of(cells: Cells) -> list[tuple[int, int | float, bytes]]:
    row = decode_cells(BASE, cells)
    return [(p.timestamp_ms - BASE * 1000, p.value, p.qualifier) for p in row.points]


DECODE_CASES = [
    pytest.param([(q(0, 0), b"\x05")], [(0, 5, q(0, 0))], id="single_int1"),
    pytest.param([(q(3599, 0xB), b"\x3f\x00\x00\x00")], [(3599000, 0.5, q(3599, 0xB))], id="f32"),
    pytest.param([(qm(3_599_999, 1), b"\xff\xfe")], [(3599999, -2, qm(3_599_999, 1))], id="ms"),
    pytest.param(
        [(q(1, 0) + q(2, 1) + q(3, 0xF), b"\x01" + b"\x00\x02" + struct.pack(">d", 0.1) + b"\0")],
        [(1000, 1, q(1, 0)), (2000, 2, q(2, 1)), (3000, 0.1, q(3, 0xF))],
        id="compacted_seconds",
    ),
    pytest.param(
        [(q(0, 7) + qm(4, 7), long8(4) + long8(5) + b"\x01")],
        [(0, 4, q(0, 7)), (4, 5, qm(4, 7))],
        id="compacted_mixed_meta_01",
    ),
    pytest.param(
        [(q(0, 7) + q(1, 7), long8(4) + long8(5) + b"\x00")],
        [(0, 4, q(0, 7)), (1000, 5, q(1, 7))],
        id="compacted_four_byte_non_ms_qualifier_is_two_points",
    ),
    pytest.param(
        [(q(5, 0), b"\x05"), (q(1, 0) + q(9, 0), b"\x01\x09\x00"), (q(3, 0), b"\x03")],
        [(1000, 1, q(1, 0)), (3000, 3, q(3, 0)), (5000, 5, q(5, 0)), (9000, 9, q(9, 0))],
        id="cells_merged_by_time",
    ),
    # Legacy fix-ups for single 2-byte cells (Internal.fixFloatingPointValue/fixQualifierFlags).
    pytest.param(
        [(q(1, 0xB), b"\0\0\0\0" + struct.pack(">f", 4.25))],
        [(1000, 4.25, q(1, 0xB))],
        id="legacy_float_on_8_bytes",
    ),
    pytest.param([(q(1, 0x3), long8(4))], [(1000, 4, q(1, 0x7))], id="flags_length_rederived"),
    pytest.param([(q(1, 0xF), int4(0x3F000000))], [(1000, 0.5, q(1, 0xB))], id="f64_flag_f32_val"),
]


@pytest.mark.parametrize(("cells", "expected"), DECODE_CASES)
def test_decode_cells(cells: Cells, expected: list[tuple[int, int | float, bytes]]) -> None:
    got = points_of(cells)
    assert [(t, q_) for t, _, q_ in got] == [(t, q_) for t, _, q_ in expected]
    for (_, value, _), (_, want, _) in zip(got, expected, strict=True):
        assert type(value) is type(want)
        assert value == want


def test_decode_point_fields() -> None:
    row = decode_cells(BASE, [(qm(1, 0xB), struct.pack(">f", 1.5)), (q(2, 0), b"\x07")])
    ms_point, s_point = row.points
    assert ms_point.timestamp_ms == BASE * 1000 + 1
    assert ms_point.is_ms
    assert ms_point.is_float
    assert ms_point.value_bytes == struct.pack(">f", 1.5)
    assert not s_point.is_ms
    assert not s_point.is_float


def test_annotations_and_unknown_odd_cells() -> None:
    note = b'{"description":"deploy"}'
    cells = [
        (q(1, 0), b"\x01"),
        (b"\x01\x00\x7b", note),
        (b"\x01\x00\x00\x00\x05", b"{}"),
        (b"\x06\x00\x01", b"histogram-bytes"),
        (b"\x02\x00\x00", b"future-kind"),
        (b"\x01\x00\x00\x00", b"annotation-of-bad-length-is-even-so-a-point?"),
    ]
    # The last cell has an even qualifier: it is a data cell and must decode as one.
    with pytest.raises(IllegalDataError):
        decode_cells(BASE, cells)
    row = decode_cells(BASE, cells[:-1])
    assert [p.timestamp_ms for p in row.points] == [BASE * 1000 + 1000]
    assert row.annotations == (
        AnnotationCell(BASE * 1000 + 5, b"\x01\x00\x00\x00\x05", b"{}"),
        AnnotationCell(BASE * 1000 + 123000, b"\x01\x00\x7b", note),
    )
    assert row.skipped == (
        (b"\x06\x00\x01", b"histogram-bytes"),
        (b"\x02\x00\x00", b"future-kind"),
    )


CORRUPT = [
    pytest.param([(q(1, 0) + q(2, 0), b"\x01\x02")], id="compacted_missing_meta_byte"),
    pytest.param([(q(1, 0) + q(2, 0), b"\x01\x02\x00\x00")], id="compacted_extra_bytes"),
    pytest.param([(q(1, 7) + q(2, 7), long8(1) + b"\x00")], id="compacted_truncated_value"),
    pytest.param([(q(1, 0) + b"\xf0\x00", b"\x01\x02\x00")], id="ms_flag_cut_short"),
    pytest.param([(q(1, 0xB), b"\x01\0\0\0" + struct.pack(">f", 1.0))], id="legacy_float_junk"),
    pytest.param([(q(1, 0), b"\x00\x01\x02")], id="single_int_3_bytes"),
    pytest.param([(q(1, 0), b"")], id="single_empty_value"),
    pytest.param([(q(1, 0), bytes(9))], id="single_9_bytes"),
    pytest.param([(q(1, 8), b"\x00\x01")], id="single_float_2_bytes"),
    pytest.param([(qm(1, 7), b"\x00")], id="ms_single_short_value"),
    pytest.param([(b"", b"\x00")], id="empty_qualifier"),
    pytest.param([(APPEND, q(1, 7) + b"\x00")], id="append_truncated_value"),
    pytest.param([(APPEND, q(1, 0) + b"\x01\xf0")], id="append_truncated_qualifier"),
    pytest.param([(b"\x05\x00\x00\x00\x00", b"")], id="append_prefix_wrong_length"),
]


@pytest.mark.parametrize("cells", CORRUPT)
def test_corrupt_cells_raise_illegal_data(cells: Cells) -> None:
    with pytest.raises(IllegalDataError):
        decode_cells(BASE, cells)
    with pytest.raises(IllegalDataError):
        compact_row(cells)


def test_compacted_corruption_message_counts_bytes() -> None:
    with pytest.raises(IllegalDataError) as info:
        split_cell(q(1, 0) + q(2, 0), b"\x01\x02\x00\x00")
    assert str(info.value) == (
        "Corrupted value: couldn't break down into individual values"
        " (consumed 2 bytes, but was expecting to consume 3)"
    )


# --- duplicates ----------------------------------------------------------------------------

ROW_KEY = b"\x00\x00\x01\x50\xe2\x27\x00\x00\x00\x01\x00\x00\x01"


def test_identical_duplicates_are_dropped() -> None:
    cells = [(q(1, 0), b"\x07"), (q(1, 0) + q(2, 0), b"\x07\x08\x00")]
    assert points_of(cells) == [(1000, 7, q(1, 0)), (2000, 8, q(2, 0))]
    assert compact_row(cells) == (q(1, 0) + q(2, 0), b"\x07\x08\x00")


def test_second_and_ms_at_the_same_instant_are_duplicates() -> None:
    cells = [(q(1, 0), b"\x07"), (qm(1000, 0), b"\x07")]
    assert [p.timestamp_ms for p in decode_cells(BASE, cells).points] == [BASE * 1000 + 1000]


def test_conflicting_duplicate_raises_opentsdb_message() -> None:
    # TestCompactionQueue.overlappingDataPoints: 4 on 8 bytes, then 4 on 4 bytes.
    cells = [(q(0, 7), long8(4)), (q(0, 3), int4(4))]
    expected = (
        "Duplicate timestamp for key=[0, 0, 1, 80, -30, 39, 0, 0, 0, 1, 0, 0, 1], ms_offset=0,"
        " older=[0, 0, 0, 4], newer=[0, 0, 0, 0, 0, 0, 0, 4]"
        "; set tsd.storage.fix_duplicates=true to fix automatically or run Fsck"
    )
    with pytest.raises(IllegalDataError) as info:
        compact_row(cells, False, row_key=ROW_KEY)
    assert str(info.value) == expected
    with pytest.raises(IllegalDataError) as info:
        decode_cells(BASE, cells, row_key=ROW_KEY)
    assert str(info.value) == expected


def test_fix_duplicates_keeps_the_newest_cell() -> None:
    cells = [(q(0, 7), long8(4)), (q(0, 3), int4(4)), (q(1, 0), b"\x09")]
    assert compact_row(cells, True) == (q(0, 3) + q(1, 0), int4(4) + b"\x09\x00")
    points = decode_cells(BASE, list(reversed(cells)), fix_duplicates=True).points
    assert [(p.qualifier, p.value) for p in points] == [(q(0, 7), 4), (q(1, 0), 9)]


def test_duplicates_inside_one_compacted_cell_keep_the_first() -> None:
    cells = [(q(1, 0) + q(1, 0), b"\x01\x02\x00")]
    with pytest.raises(IllegalDataError):
        compact_row(cells)
    assert compact_row(cells, True) == (q(1, 0), b"\x01")


# --- compact_row: expected cells from TestCompactionQueue -----------------------------------

F42 = struct.pack(">f", 4.2)

COMPACTIONS = [
    pytest.param([(q(0, 7), long8(4))], (q(0, 7), long8(4)), id="java_oneCellRow"),
    pytest.param([(qm(0, 7), long8(4))], (qm(0, 7), long8(4)), id="java_oneCellRowMS"),
    pytest.param(
        [(q(0, 7), long8(4)), (q(1, 7), long8(5))],
        (q(0, 7) + q(1, 7), long8(4) + long8(5) + b"\x00"),
        id="java_twoCellRow",
    ),
    pytest.param(
        [(q(0, 7), long8(4)), (qm(4, 7), long8(5))],
        (q(0, 7) + qm(4, 7), long8(4) + long8(5) + b"\x01"),
        id="java_secondAndMs",
    ),
    pytest.param(
        [(qm(5, 7), long8(5)), (q(0, 7), long8(4))],
        (q(0, 7) + qm(5, 7), long8(4) + long8(5) + b"\x01"),
        id="sort_ms_and_s",
    ),
    pytest.param(
        [(qm(0, 7), long8(4)), (qm(5, 7), long8(5))],
        (qm(0, 7) + qm(5, 7), long8(4) + long8(5) + b"\x00"),
        id="ms_only_meta_00",
    ),
    pytest.param(
        [(q(0, 7), long8(4)), (qm(0, 7), long8(5))],
        None,
        id="java_msSameAsSecond_raises",
    ),
    pytest.param(
        [(q(0, 3), long8(4)), (q(1, 7), long8(5))],
        (q(0, 7) + q(1, 7), long8(4) + long8(5) + b"\x00"),
        id="java_fixQualifierFlags",
    ),
    pytest.param(
        [(q(0, 7), long8(4)), (q(1, 0xB), b"\0\0\0\0" + F42)],
        (q(0, 7) + q(1, 0xB), long8(4) + F42 + b"\x00"),
        id="java_fixFloatingPoint",
    ),
    pytest.param(
        [(APPEND, q(0, 7) + long8(42) + q(1, 7) + long8(5)), (q(2, 7), long8(3))]
        + [(q(3, 7), long8(2))],
        (
            q(0, 7) + q(1, 7) + q(2, 7) + q(3, 7),
            long8(42) + long8(5) + long8(3) + long8(2) + b"\x00",
        ),
        id="java_appendsAndLaterPuts",
    ),
    pytest.param(
        [(APPEND, q(0, 7) + long8(42) + q(1, 7) + long8(5))]
        + [(q(0, 7), long8(42)), (q(1, 7), long8(5))],
        (q(0, 7) + q(1, 7), long8(42) + long8(5) + b"\x00"),
        id="java_appendsDuplicatePuts",
    ),
    pytest.param(
        [(APPEND, q(0, 7) + long8(42) + q(1, 7) + long8(5))]
        + [(q(0, 7) + q(1, 7), long8(42) + long8(5) + b"\x00")],
        (q(0, 7) + q(1, 7), long8(42) + long8(5) + b"\x00"),
        id="java_appendsDuplicateCompacted",
    ),
    pytest.param([(APPEND, q(0, 7) + long8(42))], (q(0, 7), long8(42)), id="java_oneCellAppend"),
]


@pytest.mark.parametrize(("cells", "expected"), COMPACTIONS)
def test_compact_row(cells: Cells, expected: tuple[bytes, bytes] | None) -> None:
    if expected is None:
        with pytest.raises(IllegalDataError):
            compact_row(cells, False)
        return
    assert compact_row(cells, False) == expected
    # The compacted cell decodes to the same points as the cells it came from.
    assert decode_cells(BASE, [expected]).points == decode_cells(BASE, cells).points


def test_java_msSameAsSecondFix() -> None:
    cells = [(q(0, 7), long8(4)), (qm(0, 7), long8(5))]
    assert compact_row(cells, True) == (qm(0, 7), long8(5))


@pytest.mark.parametrize(
    "cells",
    [
        pytest.param([], id="empty_row"),
        pytest.param([(b"\x01\x00\x00", b"{}")], id="annotation_only"),
        pytest.param([(APPEND, b"")], id="empty_append"),
    ],
)
def test_compact_row_without_points_is_none(cells: Cells) -> None:
    assert compact_row(cells) is None
    assert decode_cells(BASE, cells).points == ()


# --- append cells --------------------------------------------------------------------------


def test_append_entries_sorted_later_duplicate_wins() -> None:
    value = (
        encode_append_entry(q(3, 0), b"\x03")
        + encode_append_entry(q(1, 0), b"\x01")
        + encode_append_entry(qm(3000, 1), b"\x00\x33")  # same instant as q(3, .): later wins
        + encode_append_entry(q(2, 0), b"\x02")
        + encode_append_entry(q(1, 0), b"\x11")
    )
    assert parse_append_value(value) == [
        (1000, q(1, 0), b"\x11"),
        (2000, q(2, 0), b"\x02"),
        (3000, qm(3000, 1), b"\x00\x33"),
    ]
    assert compact_append_value(value) == (q(1, 0) + q(2, 0) + qm(3000, 1), b"\x11\x02\x00\x33")
    assert (
        repair_append_value(value)
        == q(1, 0) + b"\x11" + q(2, 0) + b"\x02" + qm(3000, 1) + b"\x00\x33"
    )
    points = decode_cells(BASE, [(APPEND, value)]).points
    assert [(p.timestamp_ms - BASE * 1000, p.value) for p in points] == [
        (1000, 17),
        (2000, 2),
        (3000, 51),
    ]


def test_append_entry_encoding() -> None:
    assert encode_append_entry(q(1, 7), long8(5)) == b"\x00\x17" + long8(5)
    with pytest.raises(CodecError):
        encode_append_entry(b"", b"\x01")
    with pytest.raises(CodecError):
        encode_append_entry(q(1, 0), b"")


@pytest.mark.parametrize(
    ("qualifier", "expected"),
    [
        pytest.param(APPEND, True, id="append"),
        pytest.param(b"\x05\x01\x02", True, id="any_3_bytes_with_prefix"),
        pytest.param(b"\x05\x00", False, id="seconds_qualifier_offset_80"),
        pytest.param(b"\x01\x00\x00", False, id="annotation"),
    ],
)
def test_is_append_qualifier(qualifier: bytes, expected: bool) -> None:
    assert is_append_qualifier(qualifier) is expected


def test_seconds_qualifier_starting_with_0x05_is_a_point_not_an_append() -> None:
    # Offsets 80..95 s have first byte 0x05; the even length makes them data points.
    assert points_of([(q(80, 0), b"\x01")]) == [(80000, 1, q(80, 0))]
