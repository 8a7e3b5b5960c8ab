"""Qualifier boundary tables.

Pins OpenTSDB 2.4.1 src/core/Internal.java (buildQualifier, getOffsetFromQualifier,
getQualifierLength, getFlagsFromQualifier, validateQualifier), src/core/Const.java
(FLAG_BITS, MS_FLAG, MS_FLAG_BITS, SECOND_MASK) and src/meta/Annotation.java (getQualifier,
timeFromQualifier). ERRATA.md: 4294967296 at offset 123 has qualifier 07B7, not 07B4.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tsd.codec.qualifier import (
    build_qualifier,
    decode_annotation_qualifier,
    decode_qualifier,
    encode_annotation_qualifier,
    encode_ms_qualifier,
    encode_point,
    encode_seconds_qualifier,
    is_ms_qualifier,
    is_ms_timestamp,
    qualifier_length,
    split_timestamp,
)
from tsd.errors import CodecError, IllegalDataError

SECONDS_QUALIFIERS = [
    pytest.param(0, 0x0, "0000", id="offset_0_int1"),
    pytest.param(0, 0xF, "000f", id="offset_0_float64"),
    pytest.param(1, 0x7, "0017", id="offset_1_int8"),
    pytest.param(123, 0x7, "07b7", id="errata_offset_123_int8"),
    pytest.param(123, 0x1, "07b1", id="errata_int2_flags_0001"),
    pytest.param(123, 0xB, "07bb", id="offset_123_float32"),
    pytest.param(3599, 0x0, "e0f0", id="offset_3599_int1"),
    pytest.param(3599, 0xF, "e0ff", id="offset_3599_float64"),
]


@pytest.mark.parametrize(("offset_s", "flags", "hex_qualifier"), SECONDS_QUALIFIERS)
def test_seconds_qualifier_round_trip(offset_s: int, flags: int, hex_qualifier: str) -> None:
    qualifier = bytes.fromhex(hex_qualifier)
    assert encode_seconds_qualifier(offset_s, flags) == qualifier
    assert not is_ms_qualifier(qualifier)
    assert qualifier_length(qualifier) == 2
    assert decode_qualifier(qualifier) == (offset_s * 1000, flags, False)


MS_QUALIFIERS = [
    pytest.param(0, 0x0, "f0000000", id="ms_offset_0_int1"),
    pytest.param(0, 0xB, "f000000b", id="ms_offset_0_float32"),
    pytest.param(1, 0x7, "f0000047", id="ms_offset_1_int8"),
    pytest.param(500, 0x0, "f0007d00", id="ms_offset_500"),
    pytest.param(3_599_999, 0x0, "fdbb9fc0", id="ms_offset_max_int1"),
    pytest.param(3_599_999, 0xF, "fdbb9fcf", id="ms_offset_max_float64"),
]


@pytest.mark.parametrize(("offset_ms", "flags", "hex_qualifier"), MS_QUALIFIERS)
def test_ms_qualifier_round_trip(offset_ms: int, flags: int, hex_qualifier: str) -> None:
    qualifier = bytes.fromhex(hex_qualifier)
    assert encode_ms_qualifier(offset_ms, flags) == qualifier
    assert is_ms_qualifier(qualifier)
    assert qualifier_length(qualifier) == 4
    assert decode_qualifier(qualifier) == (offset_ms, flags, True)


@pytest.mark.parametrize(
    ("encoder", "offset"),
    [
        pytest.param(encode_seconds_qualifier, 3600, id="seconds_3600"),
        pytest.param(encode_seconds_qualifier, -1, id="seconds_negative"),
        pytest.param(encode_ms_qualifier, 3_600_000, id="ms_3600000"),
        pytest.param(encode_ms_qualifier, -1, id="ms_negative"),
    ],
)
def test_qualifier_offsets_out_of_range_are_refused(
    encoder: Callable[[int, int], bytes], offset: int
) -> None:
    with pytest.raises(CodecError):
        encoder(offset, 0)


@pytest.mark.parametrize(
    ("timestamp", "value", "base_time_s", "hex_qualifier", "hex_value"),
    [
        # ERRATA.md worked example: 1292148123, value 4294967296 -> 07B7 + 8 bytes.
        pytest.param(
            1292148123, 4294967296, 1292148000, "07b7", "0000000100000000", id="errata_example"
        ),
        pytest.param(1356998400, 1, 1356998400, "0000", "01", id="on_the_hour"),
        pytest.param(1356998400 + 3599, 0.5, 1356998400, "e0fb", "3f000000", id="last_second"),
        pytest.param(1356998400500, 1, 1356998400, "f0007d00", "01", id="ms_timestamp"),
        pytest.param(
            1356998400000 + 3_599_999, -1, 1356998400, "fdbb9fc0", "ff", id="ms_last_offset"
        ),
        pytest.param(0xFFFFFFFF, 1, 4294965600, "69f0", "01", id="largest_seconds_timestamp"),
        # One past 32 bits is milliseconds (1970-02-19), not seconds: SECOND_MASK rule.
        pytest.param(0x100000000, 1, 4294800, "f0a36000", "01", id="smallest_ms_timestamp"),
        pytest.param(
            5_000_000_000, 0.1, 4_996_800, "fc35000f", "3fb999999999999a", id="ms_not_digits"
        ),
    ],
)
def test_encode_point(
    timestamp: int,
    value: int | float,
    base_time_s: int,
    hex_qualifier: str,
    hex_value: str,
) -> None:
    got_base, qualifier, value_bytes = encode_point(timestamp, value)
    assert got_base == base_time_s
    assert qualifier.hex() == hex_qualifier
    assert value_bytes.hex() == hex_value
    assert build_qualifier(timestamp, qualifier[-1] & 0xF) == qualifier
    offset_ms, _, is_ms = decode_qualifier(qualifier)
    expected_ms = timestamp if is_ms_timestamp(timestamp) else timestamp * 1000
    assert base_time_s * 1000 + offset_ms == expected_ms
    assert is_ms == is_ms_timestamp(timestamp)


def test_encode_point_refuses_negative_timestamp() -> None:
    with pytest.raises(CodecError):
        encode_point(-1, 1)


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        pytest.param(1356998400, (1356998400, 0, False), id="seconds_on_hour"),
        pytest.param(1356998401, (1356998400, 1, False), id="seconds"),
        pytest.param(1356998401001, (1356998400, 1001, True), id="ms"),
    ],
)
def test_split_timestamp(timestamp: int, expected: tuple[int, int, bool]) -> None:
    assert split_timestamp(timestamp) == expected


@pytest.mark.parametrize(
    ("hex_qualifier", "message"),
    [
        pytest.param(
            "00", "Offset of [0] is out of bounds for the qualifier length of [1]", id="one_byte"
        ),
        pytest.param(
            "f000",
            "Detected a millisecond flag but qualifier length is too short",
            id="ms_flag_on_2_bytes",
        ),
    ],
)
def test_decode_qualifier_rejects_short(hex_qualifier: str, message: str) -> None:
    with pytest.raises(IllegalDataError) as info:
        decode_qualifier(bytes.fromhex(hex_qualifier))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("start_time", "hex_qualifier"),
    [
        # opentsdb-hbase-schema.rst: an annotation at 1292148123 has qualifier 01007B.
        pytest.param(1292148123, "01007b", id="schema_doc_example"),
        pytest.param(1292148000 + 3599, "010e0f", id="last_second_of_row"),
        pytest.param(1292148123456, "010001e240", id="ms_start_time"),
        pytest.param(1292148123000, "01007b", id="ms_on_whole_second_stored_as_seconds"),
        # Annotation.getQualifier divides any multiple of 1000, seconds included: the
        # qualifier is computed from 1328140 (offset 3340 from 1324800).
        pytest.param(1328140000, "010d0c", id="quirk_seconds_multiple_of_1000"),
    ],
)
def test_annotation_qualifier(start_time: int, hex_qualifier: str) -> None:
    qualifier = bytes.fromhex(hex_qualifier)
    assert encode_annotation_qualifier(start_time) == qualifier
    if start_time != 1328140000:
        base_time_s = split_timestamp(start_time)[0]
        expected_ms = start_time if is_ms_timestamp(start_time) else start_time * 1000
        assert base_time_s * 1000 + decode_annotation_qualifier(qualifier) == expected_ms


def test_annotation_qualifier_needs_a_start_time() -> None:
    with pytest.raises(CodecError, match="The start timestamp has not been set"):
        encode_annotation_qualifier(0)
