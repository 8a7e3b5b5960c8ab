"""The log's bytes: cells records round-trip; torn and corrupt tails are found, never
mistaken for records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.errors import CodecError
from tsd.wal.record import (
    CELLS,
    HEADER,
    SEGMENT_MAGIC,
    Row,
    decode_cells,
    encode_cells,
    frame,
    scan_records,
)

ROWS: list[Row] = [
    (b"\x00\x00\x01Q\x00\x00\x00\x00\x00\x01\x00\x00\x01", [(b"\x00\x07", b"\x2a")]),
    (
        b"\x00\x00\x01Q\x00\x0e\x10\x00\x00\x01\x00\x00\x02",
        [(b"\x00\x0b", b"\x3f\x80\x00\x00"), (b"\xf0\x00\x01\xf7", b"\x00" * 8)],
    ),
    (b"\x01", []),
]


def encoded(rows: list[Row]) -> bytes:
    """encode_cells of rows given as lists (the writer hands it its batch's maps)."""
    return encode_cells((row, dict(cells)) for row, cells in rows)


def payload(record: bytes) -> bytes:
    return record[HEADER.size :]


def test_cells_record_round_trips() -> None:
    record = encoded(ROWS)
    assert record[8] == CELLS
    assert decode_cells(payload(record)) == ROWS


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=40),
            st.lists(st.tuples(st.binary(max_size=4), st.binary(max_size=8)), max_size=20),
        ),
        max_size=10,
    )
)
def test_any_rows_round_trip(rows: list[Row]) -> None:
    # A map keeps one value per qualifier, the last: as a batch does.
    expected = [(row, list(dict(cells).items())) for row, cells in rows]
    assert decode_cells(payload(encoded(rows))) == expected


def test_segment_scan_reads_every_record() -> None:
    records = [encoded(ROWS[:1]), encoded(ROWS[1:])]
    scan = scan_records(SEGMENT_MAGIC + b"".join(records))
    assert scan.problem is None
    assert [decode_cells(p) for _, p in scan.records] == [ROWS[:1], ROWS[1:]]
    assert scan.good_end == len(SEGMENT_MAGIC) + sum(map(len, records))


@pytest.mark.parametrize("cut", [1, 5, 9, 12], ids=lambda n: f"cut_{n}_bytes_in")
def test_torn_tail_stops_at_the_last_whole_record(cut: int) -> None:
    first, second = encoded(ROWS[:1]), encoded(ROWS[1:])
    data = SEGMENT_MAGIC + first + second[:cut]
    scan = scan_records(data)
    assert [decode_cells(p) for _, p in scan.records] == [ROWS[:1]]
    assert scan.good_end == len(SEGMENT_MAGIC) + len(first)
    assert scan.problem is not None
    assert "torn" in scan.problem


def test_flipped_byte_is_a_checksum_mismatch() -> None:
    first, second = encoded(ROWS[:1]), bytearray(encoded(ROWS[1:]))
    second[-1] ^= 0x01
    scan = scan_records(SEGMENT_MAGIC + first + bytes(second))
    assert len(scan.records) == 1
    assert scan.problem == f"checksum mismatch at byte {len(SEGMENT_MAGIC) + len(first)}"


def test_unknown_type_and_missing_header_are_problems() -> None:
    assert scan_records(SEGMENT_MAGIC + frame(9, b"x")).problem == (
        f"unknown record type 9 at byte {len(SEGMENT_MAGIC)}"
    )
    assert scan_records(b"garbage").problem == "no segment header"


def test_malformed_cells_payload_raises_codec_error() -> None:
    with pytest.raises(CodecError):
        decode_cells(payload(encoded(ROWS))[:-3])


def test_the_documented_example_bytes() -> None:
    """docs/format/wal.md's example, byte for byte."""
    row = bytes.fromhex("00000150e22700000001000001")
    assert encoded([(row, [(b"\x00\x70", b"\x2a")])]).hex(" ") == (
        "00 00 00 18 81 e8 a4 45 01 00 0d 00 00 00 01 00 00 01 50 e2 27 00 00 00 01"
        " 00 00 01 02 01 00 70 2a"
    )
