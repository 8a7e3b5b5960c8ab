"""Java's and Jackson's text rules (tsd.java_text) against the JDK's documented output."""

from __future__ import annotations

import math
import struct

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsd.java_text import (
    format_java_bytes,
    jackson_double,
    jackson_text,
    java_double_to_string,
    java_split,
    load_json_keeping_text,
)


@pytest.mark.parametrize(
    ("value", "java"),
    [
        pytest.param(0.0, "0.0", id="zero"),
        pytest.param(-0.0, "-0.0", id="negative_zero"),
        pytest.param(1.0, "1.0", id="one"),
        pytest.param(100.0, "100.0", id="integral"),
        pytest.param(-12.5, "-12.5", id="negative"),
        pytest.param(0.001, "0.001", id="plain_low_edge"),
        pytest.param(0.00099, "9.9E-4", id="below_plain"),
        pytest.param(1e-4, "1.0E-4", id="one_digit_gets_a_zero"),
        pytest.param(9999999.0, "9999999.0", id="plain_high_edge"),
        pytest.param(1e7, "1.0E7", id="scientific_from_1e7"),
        pytest.param(123456789.0, "1.23456789E8", id="scientific_digits"),
        pytest.param(0.1 + 0.2, "0.30000000000000004", id="shortest_round_trip"),
        pytest.param(math.pi, "3.141592653589793", id="pi"),
        pytest.param(float(2**63), "9.223372036854776E18", id="two_to_63"),
        pytest.param(1.7976931348623157e308, "1.7976931348623157E308", id="max_value"),
        pytest.param(5e-324, "4.9E-324", id="min_value_two_digits_closest"),
        pytest.param(math.nan, "NaN", id="nan"),
        pytest.param(math.inf, "Infinity", id="infinity"),
        pytest.param(-math.inf, "-Infinity", id="negative_infinity"),
    ],
)
def test_double_to_string_matches_java(value: float, java: str) -> None:
    assert java_double_to_string(value) == java


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_to_string_round_trips(value: float) -> None:
    text = java_double_to_string(value)
    assert struct.pack(">d", float(text)) == struct.pack(">d", value)
    assert "." in text


@pytest.mark.parametrize(
    ("value", "json"),
    [
        pytest.param(1e-4, b"1.0E-4", id="number_as_java"),
        pytest.param(-0.0, b"-0.0", id="negative_zero"),
        pytest.param(math.nan, b'"NaN"', id="nan_quoted"),
        pytest.param(-math.inf, b'"-Infinity"', id="infinity_quoted"),
    ],
)
def test_jackson_writes_doubles_as_double_to_string(value: float, json: bytes) -> None:
    assert orjson.dumps(jackson_double(value)) == json


@pytest.mark.parametrize(
    ("body", "text"),
    [
        pytest.param(b'"abc"', "abc", id="string"),
        pytest.param(b"true", "true", id="true"),
        pytest.param(b"false", "false", id="false"),
        pytest.param(b"42", "42", id="integer"),
        pytest.param(b"1e-4", "1e-4", id="exponent_kept"),
        pytest.param(b"2.50", "2.50", id="trailing_zero_kept"),
        pytest.param(b"-0.0", "-0.0", id="negative_zero_kept"),
    ],
)
def test_jackson_binds_a_scalar_into_a_string_as_its_source_text(body: bytes, text: str) -> None:
    assert jackson_text(load_json_keeping_text(body)) == text


def test_jackson_text_without_source_is_the_shortest_repr() -> None:
    assert jackson_text(0.0001) == "0.0001"


@pytest.mark.parametrize("value", [{}, [], None], ids=["object", "array", "null"])
def test_jackson_text_refuses_what_is_not_a_scalar(value: object) -> None:
    with pytest.raises(TypeError):
        jackson_text(value)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        pytest.param("a,b", ["a", "b"], id="plain"),
        pytest.param("a,b,,", ["a", "b"], id="trailing_empties_dropped"),
        pytest.param(",a", ["", "a"], id="leading_empty_kept"),
        pytest.param("a,,b", ["a", "", "b"], id="inner_empty_kept"),
        pytest.param("", [""], id="empty_is_one_empty_string"),
        pytest.param("abc", ["abc"], id="no_separator_is_the_whole"),
        pytest.param(",", [], id="only_separators_is_empty"),
    ],
)
def test_split_matches_java(text: str, parts: list[str]) -> None:
    assert java_split(text, ",") == parts


@pytest.mark.parametrize(
    ("data", "java"),
    [
        pytest.param(b"", "[]", id="empty"),
        pytest.param(bytes([0, 127, 128, 255]), "[0, 127, -128, -1]", id="signed"),
    ],
)
def test_format_java_bytes_matches_arrays_to_string(data: bytes, java: str) -> None:
    assert format_java_bytes(data) == java


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (99, "99.0"),
        (99.9, "99.9"),
        (0.1, "0.1"),
        (3.14159265, "3.1415927"),
        (1e-4, "1.0E-4"),
        (1e7, "1.0E7"),
        (-1.5, "-1.5"),
        (0.0, "0.0"),
    ],
)
def test_float_to_string_is_javas(value: float, text: str) -> None:
    from tsd.java_text import java_float_to_string

    assert java_float_to_string(value) == text
