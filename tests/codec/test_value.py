"""Value typing and the 1/2/4/8-byte value encodings.

Tables pin OpenTSDB 2.4.1 src/core/Tags.java (looksLikeInteger, parseLong, fitsInFloat),
src/core/TSDB.java (addPoint: smallest integer width, float vs double, NaN/Inf message),
src/core/RowSeq.java (extract*Value) and src/core/Internal.java (fixFloatingPointValue).
Golden bytes follow /work/shared/reference/ERRATA.md where it corrects the other documents.
"""

from __future__ import annotations

import math
import struct

import pytest

from tsd.codec.value import (
    decode_value,
    encode_value,
    looks_like_integer,
    parse_value,
)
from tsd.errors import CodecError, IllegalDataError, IllegalValueError, NumberFormatError

# --- parse_value: OpenTSDB's typing (Tags.looksLikeInteger + parseLong + Double.parseDouble) ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0", 0, id="zero"),
        pytest.param("42", 42, id="plain_int"),
        pytest.param("+42", 42, id="plus_sign"),
        pytest.param("-42", -42, id="minus_sign"),
        pytest.param("007", 7, id="leading_zeros"),
        pytest.param("9223372036854775807", 2**63 - 1, id="long_max"),
        pytest.param("-9223372036854775808", -(2**63), id="long_min"),
        pytest.param("+0000000000000000001", 1, id="sign_and_19_digits"),
        pytest.param("1.0", 1.0, id="float_with_dot"),
        pytest.param("1.", 1.0, id="trailing_dot"),
        pytest.param(".5", 0.5, id="leading_dot"),
        pytest.param("1e3", 1000.0, id="exponent_makes_float"),
        pytest.param("1E3", 1000.0, id="upper_exponent"),
        pytest.param("1.e5", 100000.0, id="dot_then_exponent"),
        pytest.param("-2.5e-3", -0.0025, id="negative_exponent"),
        pytest.param("1.5e+3", 1500.0, id="explicit_plus_exponent"),
        pytest.param("1.5f", 1.5, id="java_float_suffix"),
        pytest.param("2.5D", 2.5, id="java_double_suffix"),
        pytest.param(" 2.5\t", 2.5, id="java_trims_whitespace"),
        pytest.param("0x1.8p1", 3.0, id="java_hex_float"),
        pytest.param("0x.8p1", 1.0, id="java_hex_float_no_int_part"),
        pytest.param("1e-400", 0.0, id="underflow_to_zero"),
        pytest.param("-0.0", -0.0, id="negative_zero"),
    ],
)
def test_parse_value_types_like_opentsdb(text: str, expected: int | float) -> None:
    value = parse_value(text)
    assert type(value) is type(expected)
    if isinstance(expected, float):
        assert struct.pack(">d", value) == struct.pack(">d", expected)
    else:
        assert value == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Tags.parseLong messages.
        pytest.param("", "Empty string", id="empty"),
        pytest.param("+", "Just a sign, no value: +", id="just_a_sign"),
        pytest.param("NaN", "Invalid character 'N' in NaN", id="nan_is_not_an_integer"),
        pytest.param("Infinity", "Invalid character 'I' in Infinity", id="infinity_word"),
        pytest.param("-Infinity", "Invalid character 'I' in -Infinity", id="minus_infinity"),
        pytest.param("0x10", "Invalid character 'x' in 0x10", id="hex_int"),
        pytest.param("1_000", "Invalid character '_' in 1_000", id="underscore"),
        pytest.param(" 5", "Invalid character ' ' in  5", id="leading_space_int"),
        pytest.param("٣", "Invalid character '٣' in ٣", id="non_ascii_digit"),
        pytest.param("--1", "Invalid character '-' in --1", id="double_sign"),
        pytest.param(
            "12345678901234567890", "Value too long: 12345678901234567890", id="20_digits"
        ),
        pytest.param(
            "+12345678901234567890", "Value too long: +12345678901234567890", id="sign_21_chars"
        ),
        pytest.param(
            "00000000000000000001", "Value too long: 00000000000000000001", id="padded_20"
        ),
        pytest.param(
            "9223372036854775808", "Overflow in 9223372036854775808", id="long_max_plus_one"
        ),
        pytest.param(
            "-9223372036854775809", "Overflow in -9223372036854775809", id="long_min_minus_one"
        ),
        pytest.param(
            "9999999999999999999", "Overflow in 9999999999999999999", id="19_nines_overflow"
        ),
        # Double.parseDouble (JDK 8 FloatingDecimal) messages.
        pytest.param(".", 'For input string: "."', id="lone_dot"),
        pytest.param("1e", 'For input string: "1e"', id="exponent_without_digits"),
        pytest.param("e5", 'For input string: "e5"', id="exponent_only"),
        pytest.param("1_0.5", 'For input string: "1_0.5"', id="python_underscores"),
        pytest.param("inf.", 'For input string: "inf."', id="python_inf_spelling"),
        pytest.param("NaN.0", 'For input string: "NaN.0"', id="nan_with_dot"),
        pytest.param("١.٥", 'For input string: "١.٥"', id="non_ascii_float"),
        pytest.param(" 1.5x ", 'For input string: "1.5x"', id="message_shows_trimmed"),
        pytest.param(" . ", 'For input string: "."', id="trimmed_dot"),
    ],
)
def test_parse_value_rejects_with_opentsdb_message(text: str, message: str) -> None:
    with pytest.raises(NumberFormatError) as info:
        parse_value(text)
    assert str(info.value) == message
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("1e400", "Infinity", id="overflow_positive"),
        pytest.param("-1e400", "-Infinity", id="overflow_negative"),
        pytest.param("0x1.0p99999", "Infinity", id="hex_overflow"),
    ],
)
def test_parse_value_refuses_infinite(text: str, shown: str) -> None:
    with pytest.raises(IllegalValueError) as info:
        parse_value(text)
    assert str(info.value) == f"value is NaN or Infinite: {shown}"
    with pytest.raises(IllegalValueError) as info:
        parse_value(text, metric="sys.cpu", timestamp=1356998400)
    assert str(info.value) == (
        f"value is NaN or Infinite: {shown} for metric=sys.cpu timestamp=1356998400"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("12", True, id="digits"),
        pytest.param("NaN", True, id="nan_has_no_marker"),
        pytest.param("1.0", False, id="dot"),
        pytest.param("1e3", False, id="lower_e"),
        pytest.param("1E3", False, id="upper_e"),
    ],
)
def test_looks_like_integer(text: str, expected: bool) -> None:
    assert looks_like_integer(text) is expected


# --- encode_value / decode_value: TSDB.addPoint widths and flags ---------------------------

INT_BOUNDARIES = [
    pytest.param(0, 0x0, "00", id="zero_1_byte"),
    pytest.param(127, 0x0, "7f", id="byte_max"),
    pytest.param(-128, 0x0, "80", id="byte_min"),
    pytest.param(128, 0x1, "0080", id="byte_max_plus_one"),
    pytest.param(-129, 0x1, "ff7f", id="byte_min_minus_one"),
    pytest.param(32767, 0x1, "7fff", id="short_max"),
    pytest.param(-32768, 0x1, "8000", id="short_min"),
    pytest.param(32768, 0x3, "00008000", id="short_max_plus_one"),
    pytest.param(-32769, 0x3, "ffff7fff", id="short_min_minus_one"),
    pytest.param(2**31 - 1, 0x3, "7fffffff", id="int_max"),
    pytest.param(-(2**31), 0x3, "80000000", id="int_min"),
    pytest.param(2**31, 0x7, "0000000080000000", id="int_max_plus_one"),
    pytest.param(-(2**31) - 1, 0x7, "ffffffff7fffffff", id="int_min_minus_one"),
    # ERRATA.md: 4294967296 needs 8 bytes, flags 0111.
    pytest.param(4294967296, 0x7, "0000000100000000", id="errata_2_pow_32"),
    pytest.param(2**63 - 1, 0x7, "7fffffffffffffff", id="long_max"),
    pytest.param(-(2**63), 0x7, "8000000000000000", id="long_min"),
]


@pytest.mark.parametrize(("value", "flags", "hex_bytes"), INT_BOUNDARIES)
def test_encode_integer_uses_smallest_width(value: int, flags: int, hex_bytes: str) -> None:
    assert encode_value(value) == (flags, bytes.fromhex(hex_bytes))
    decoded = decode_value(flags, bytes.fromhex(hex_bytes))
    assert type(decoded) is int
    assert decoded == value


FLOATS = [
    # ERRATA.md: float32 when the double survives the float32 round trip, else float64.
    pytest.param(0.5, 0xB, "3f000000", id="half_is_float32"),
    pytest.param(1.25, 0xB, "3fa00000", id="one_and_quarter_float32"),
    pytest.param(1.0, 0xB, "3f800000", id="one_float32"),
    pytest.param(0.0, 0xB, "00000000", id="zero_float32"),
    pytest.param(-0.0, 0xB, "80000000", id="negative_zero_float32"),
    pytest.param(0.1, 0xF, "3fb999999999999a", id="tenth_is_float64"),
    pytest.param(3.4028234663852886e38, 0xB, "7f7fffff", id="float32_max"),
    pytest.param(3.4028235677973366e38, 0xF, "47effffff0000000", id="float32_max_plus_half_ulp"),
    pytest.param(1e300, 0xF, "7e37e43c8800759c", id="beyond_float32_range"),
    pytest.param(1.401298464324817e-45, 0xB, "00000001", id="float32_min_subnormal"),
    pytest.param(5e-324, 0xF, "0000000000000001", id="float64_min_subnormal"),
    pytest.param(16777217.0, 0xF, "4170000010000000", id="2_pow_24_plus_one_needs_double"),
]


@pytest.mark.parametrize(("value", "flags", "hex_bytes"), FLOATS)
def test_encode_float_picks_float32_only_when_exact(
    value: float, flags: int, hex_bytes: str
) -> None:
    assert encode_value(value) == (flags, bytes.fromhex(hex_bytes))
    decoded = decode_value(flags, bytes.fromhex(hex_bytes))
    assert type(decoded) is float
    assert struct.pack(">d", decoded) == struct.pack(">d", value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(-math.inf, id="minus_inf"),
        pytest.param(2**63, id="long_max_plus_one"),
        pytest.param(-(2**63) - 1, id="long_min_minus_one"),
    ],
)
def test_encode_value_refuses_unstorable(value: int | float) -> None:
    with pytest.raises(CodecError):
        encode_value(value)


@pytest.mark.parametrize(
    ("flags", "hex_bytes", "expected"),
    [
        # Single cells: the length comes from the value (Internal.fixQualifierFlags).
        pytest.param(0x7, "05", 5, id="int_flags_say_8_value_has_1"),
        pytest.param(0x0, "0000000000000100", 256, id="int_flags_say_1_value_has_8"),
        pytest.param(0xF, "3f000000", 0.5, id="float_flags_say_8_value_has_4"),
        # Legacy fix-up: "4-byte float" stored on 8 bytes with 4 leading zeros.
        pytest.param(0xB, "000000003f000000", 0.5, id="legacy_float_on_8_bytes"),
        pytest.param(0x7B, "000000003fa00000", 1.25, id="legacy_fixup_with_offset_bits"),
    ],
)
def test_decode_value_rederives_length_and_fixes_legacy_floats(
    flags: int, hex_bytes: str, expected: int | float
) -> None:
    value = decode_value(flags, bytes.fromhex(hex_bytes))
    assert type(value) is type(expected)
    assert value == expected


@pytest.mark.parametrize(
    ("flags", "hex_bytes", "message"),
    [
        pytest.param(
            0xB,
            "010000003f000000",
            "Corrupted floating point value: [1, 0, 0, 0, 63, 0, 0, 0] flags=0xb"
            " -- first 4 bytes are expected to be zeros.",
            id="legacy_float_nonzero_prefix",
        ),
        pytest.param(
            0xFB,
            "ff0000003f000000",
            "Corrupted floating point value: [-1, 0, 0, 0, 63, 0, 0, 0] flags=0xfffffffb"
            " -- first 4 bytes are expected to be zeros.",
            id="java_sign_extends_the_flags_byte",
        ),
        pytest.param(
            0x2, "000102", "Integer value @ 0 not on 8/4/2/1 bytes in [0, 1, 2]", id="int_3_bytes"
        ),
        pytest.param(0x0, "", "Integer value @ 0 not on 8/4/2/1 bytes in []", id="int_empty"),
        pytest.param(
            0x9, "0001", "Floating point value @ 0 not on 8 or 4 bytes in [0, 1]", id="float_2"
        ),
    ],
)
def test_decode_value_rejects_unreadable(flags: int, hex_bytes: str, message: str) -> None:
    with pytest.raises(IllegalDataError) as info:
        decode_value(flags, bytes.fromhex(hex_bytes))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "flags", "hex_bytes"),
    [
        pytest.param("0.5", 0xB, "3f000000", id="half"),
        pytest.param("0.1", 0xF, "3fb999999999999a", id="tenth"),
        pytest.param("1", 0x0, "01", id="one"),
        pytest.param("1.0", 0xB, "3f800000", id="one_as_float"),
        pytest.param("4294967296", 0x7, "0000000100000000", id="errata_value"),
    ],
)
def test_text_to_stored_bytes(text: str, flags: int, hex_bytes: str) -> None:
    """End to end: PutDataPointRpc typing then TSDB.addPoint encoding."""
    assert encode_value(parse_value(text)) == (flags, bytes.fromhex(hex_bytes))


def test_encode_value_accepts_numpy_scalars() -> None:
    import numpy as np

    assert encode_value(np.int64(5)) == (0x0, b"\x05")
    assert encode_value(np.int32(-300)) == (0x1, b"\xfe\xd4")
    assert encode_value(np.float32(0.5)) == (0xB, b"\x3f\x00\x00\x00")
    assert encode_value(np.float64(0.1)) == (0xF, struct.pack(">d", 0.1))
