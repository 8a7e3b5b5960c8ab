"""The telnet hot path (take_known_puts) types timestamps and values exactly as the full
parser does, and takes every line in the usual forms (a stub that declines everything, or
answers anything, fails here). tests/protocol/test_telnet_known_puts.py compares whole
connections."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.errors import BadRequestError
from tsd.protocol.telnet import PutCommand, parse_command, take_known_puts

Typed = tuple[int, int | float]


def put_line(timestamp: bytes, value: bytes) -> bytes:
    return b"put m " + timestamp + b" " + value + b" h=a"


def full_parse(timestamp: bytes, value: bytes) -> Typed | None:
    try:
        command = parse_command(put_line(timestamp, value))
    except BadRequestError:
        return None
    assert isinstance(command, PutCommand)
    return command.point.timestamp, command.point.value


def fast_path(timestamp: bytes, value: bytes) -> Typed | None:
    """What take_known_puts makes of the line of a known series (None: not taken)."""
    out: list[tuple[str, int, int | float]] = []
    taken = take_known_puts([put_line(timestamp, value)], 0, {b"m h=a": "s"}, out, 1)
    assert taken == len(out)
    return (out[0][1], out[0][2]) if out else None


def same(a: Typed | None, b: Typed | None) -> bool:
    if a is None or b is None:
        return a is b
    if type(a[1]) is not type(b[1]) or a[0] != b[0]:
        return False
    if isinstance(a[1], float):
        return struct.pack(">d", a[1]) == struct.pack(">d", b[1])
    return a[1] == b[1]


@pytest.mark.parametrize(
    ("timestamp", "value", "taken"),
    [
        pytest.param(b"1356998400", b"42", True, id="int"),
        pytest.param(b"1356998400123", b"-7", True, id="ms_negative"),
        pytest.param(b"1", b"999999999999999999", True, id="18_digits"),
        pytest.param(b"1", b"-999999999999999999", True, id="negative_18_digits"),
        pytest.param(b"1", b"0.5", True, id="float32"),
        pytest.param(b"1", b"0.1", True, id="float64"),
        pytest.param(b"1", b"1e-07", True, id="exponent"),
        pytest.param(b"1", b"-0.0", True, id="negative_zero"),
        pytest.param(b"1", b"9223372036854775807", False, id="long_max"),
        pytest.param(b"1", b"9223372036854775808", False, id="long_overflow"),
        pytest.param(b"1", b"18446744073709551615", False, id="uint64"),
        pytest.param(b"1", b"1e400", False, id="infinite"),
        pytest.param(b"1", b"nan", False, id="nan"),
        pytest.param(b"1", b"+5", False, id="plus"),
        pytest.param(b"1", b"-", False, id="just_minus"),
        pytest.param(b"1", b"", False, id="empty"),
        pytest.param(b"0", b"1", False, id="zero_timestamp"),
        pytest.param(b"", b"0", False, id="empty_timestamp_word"),
        pytest.param(b"00000000000001", b"1", False, id="14_digit_timestamp"),
        pytest.param(b"99999999999999", b"1", False, id="timestamp_too_big"),
        pytest.param(b"1356998400.123", b"1", False, id="dotted_timestamp"),
        pytest.param(b"-1", b"1", False, id="negative_timestamp"),
        pytest.param(b"\xd9\xa3", b"1", False, id="non_ascii_digit"),
        pytest.param(b"1", b"\xd9\xa3", False, id="non_ascii_value"),
    ],
)
def test_table(timestamp: bytes, value: bytes, taken: bool) -> None:
    fast = fast_path(timestamp, value)
    assert (fast is not None) is taken
    if taken:
        assert same(fast, full_parse(timestamp, value)), (timestamp, value, fast)


USUAL_TIMESTAMP = st.integers(1, 10**13 - 1).map(lambda t: str(t).encode())
USUAL_VALUE = st.integers(-(10**18) + 1, 10**18 - 1).map(lambda v: str(v).encode()) | st.floats(
    allow_nan=False, allow_infinity=False
).map(lambda v: repr(v).encode())


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=400, deadline=None)
@given(USUAL_TIMESTAMP, USUAL_VALUE)
def test_usual_forms_are_taken_and_typed_as_the_full_parser_does(
    timestamp: bytes, value: bytes
) -> None:
    fast = fast_path(timestamp, value)
    assert fast is not None
    assert same(fast, full_parse(timestamp, value))


NUMBERISH = st.binary(min_size=0, max_size=24).map(bytes) | st.text(
    alphabet="0123456789.-+eE", min_size=0, max_size=24
).map(str.encode)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=800, deadline=None)
@given(NUMBERISH, NUMBERISH)
def test_random_numbers_taken_only_as_the_full_parser_types_them(
    timestamp: bytes, value: bytes
) -> None:
    if any(c in timestamp + value for c in b" \n\r"):
        return
    fast = fast_path(timestamp, value)
    if fast is not None:
        assert same(fast, full_parse(timestamp, value)), (timestamp, value, fast)
