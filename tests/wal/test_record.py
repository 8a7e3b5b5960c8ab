"""The log's bytes: cells records round-trip; torn and corrupt tails are found, never
mistaken for records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.errors import CodecError
from tsd.wal.record import (
    CELLS,
    CELLS_ZSTD,
    HEADER,
    SEGMENT_MAGIC,
    SEGMENT_MAGICS,
    Row,
    decode_cells,
    encode_cells,
    frame,
    read_records,
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
    """The one record's cells payload, as a reader hands it on (decompressed)."""
    records, end, problem = read_records(record)
    assert (len(records), end, problem) == (1, len(record), None)
    kind, data = records[0]
    assert kind == CELLS
    return data


def test_cells_record_round_trips() -> None:
    record = encoded(ROWS)
    assert record[8] == CELLS
    assert decode_cells(payload(record)) == ROWS


def batch_of_one_point_per_series(series: int) -> list[Row]:
    """A collector's batch: one point for each of many series of one metric and hour."""
    hour = b"\x00\x00\x01Q\x00\x00\x00"
    return [
        (
            hour + b"\x00\x00\x01" + s.to_bytes(3, "big"),
            [(b"\x01\xe0", (s * 7919).to_bytes(4, "big"))],
        )
        for s in range(series)
    ]


def test_a_batch_that_compresses_is_logged_in_zstd_and_read_back_as_cells() -> None:
    rows = batch_of_one_point_per_series(1000)
    record = encoded(rows)
    assert record[8] == CELLS_ZSTD
    plain = frame(CELLS, payload(record))
    assert len(record) * 3 < len(plain)  # the point of it: the log's bytes on disk
    assert decode_cells(payload(record)) == rows
    scan = scan_records(SEGMENT_MAGIC + record + plain)
    assert scan.problem is None
    assert [kind for kind, _ in scan.records] == [CELLS, CELLS]
    assert scan.records[0][1] == scan.records[1][1]


def test_a_record_that_would_not_shrink_stays_plain() -> None:
    record = encoded(ROWS[:1])
    assert record[8] == CELLS
    assert payload(record) == record[HEADER.size :]


def test_segments_of_format_version_1_are_read() -> None:
    old = SEGMENT_MAGICS[0]
    assert old != SEGMENT_MAGIC
    assert old.startswith(b"TSDWAL\x01")
    scan = scan_records(old + encoded(ROWS))
    assert scan.problem is None
    assert decode_cells(scan.records[0][1]) == ROWS


def test_a_compressed_record_with_a_good_checksum_but_bad_zstd_is_damage() -> None:
    good = encoded(ROWS)
    bad = frame(CELLS_ZSTD, b"not a zstd frame")
    scan = scan_records(SEGMENT_MAGIC + good + bad)
    assert len(scan.records) == 1
    assert scan.good_end == len(SEGMENT_MAGIC) + len(good)
    assert scan.problem is not None
    assert scan.problem.startswith(f"undecodable compressed record at byte {scan.good_end}")


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
@pytest.mark.slow
@pytest.mark.fallbacks
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
