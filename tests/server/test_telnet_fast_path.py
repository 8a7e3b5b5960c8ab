"""The telnet hot path types timestamps and values exactly as the full parser does
(type_put_numbers; take_known_puts inlines the same rules: tests/protocol/
test_telnet_known_puts.py compares whole connections)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.errors import BadRequestError
from tsd.protocol.telnet import PutCommand, parse_command, type_put_numbers


def full_parse(timestamp: bytes, value: bytes) -> tuple[int, int | float] | None:
    try:
        command = parse_command(b"put m " + timestamp + b" " + value + b" h=a")
    except BadRequestError:
        return None
    assert isinstance(command, PutCommand)
    return command.point.timestamp, command.point.value


def same(a: tuple[int, int | float] | None, b: tuple[int, int | float] | None) -> bool:
    if a is None or b is None:
        return a is b
    if type(a[1]) is not type(b[1]) or a[0] != b[0]:
        return False
    if isinstance(a[1], float):
        return struct.pack(">d", a[1]) == struct.pack(">d", b[1])
    return a[1] == b[1]


def check(timestamp: bytes, value: bytes) -> None:
    fast = type_put_numbers(timestamp, value)
    if fast is not None:  # the hot path may decline; when it answers, it answers the same
        assert same(fast, full_parse(timestamp, value)), (timestamp, value, fast)


@pytest.mark.parametrize(
    ("timestamp", "value"),
    [
        pytest.param(b"1356998400", b"42", id="int"),
        pytest.param(b"1356998400123", b"-7", id="ms_negative"),
        pytest.param(b"1", b"999999999999999999", id="18_digits"),
        pytest.param(b"1", b"9223372036854775807", id="long_max"),
        pytest.param(b"1", b"9223372036854775808", id="long_overflow"),
        pytest.param(b"1", b"18446744073709551615", id="uint64"),
        pytest.param(b"1", b"0.5", id="float32"),
        pytest.param(b"1", b"0.1", id="float64"),
        pytest.param(b"1", b"1e-07", id="exponent"),
        pytest.param(b"1", b"1e400", id="infinite"),
        pytest.param(b"1", b"nan", id="nan"),
        pytest.param(b"1", b"+5", id="plus"),
        pytest.param(b"1", b"-", id="just_minus"),
        pytest.param(b"1", b"", id="empty"),
        pytest.param(b"0", b"1", id="zero_timestamp"),
        pytest.param(b"00000000000001", b"1", id="14_digit_timestamp"),
        pytest.param(b"99999999999999", b"1", id="timestamp_too_big"),
        pytest.param(b"1356998400.123", b"1", id="dotted_timestamp"),
        pytest.param(b"-1", b"1", id="negative_timestamp"),
        pytest.param(b"\xd9\xa3", b"1", id="non_ascii_digit"),
        pytest.param(b"1", b"\xd9\xa3", id="non_ascii_value"),
    ],
)
def test_table(timestamp: bytes, value: bytes) -> None:
    check(timestamp, value)


NUMBERISH = st.binary(min_size=0, max_size=24).map(bytes) | st.text(
    alphabet="0123456789.-+eE", min_size=0, max_size=24
).map(str.encode)


@settings(max_examples=800, deadline=None)
@given(NUMBERISH, NUMBERISH)
def test_random_numbers(timestamp: bytes, value: bytes) -> None:
    if b" " in timestamp + value or b"\n" in timestamp + value:
        return
    check(timestamp, value)
