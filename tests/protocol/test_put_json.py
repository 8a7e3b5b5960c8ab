"""/api/put bodies and replies: OpenTSDB 2.4.1 HttpJsonSerializer.parsePutV1,
PutDataPointRpc.processDataPoint, IncomingDataPoint.validate, with Jackson 2.9.5's binding.

Every body is parsed by the public function (orjson fast path with fallback) and by the
exact path alone, and both must agree to the byte; bodies that parse are also fed with
trailing bytes, which Jackson ignores.
"""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.data_points import DataPoint, Tags
from tsd.errors import BadRequestError
from tsd.protocol import put_json
from tsd.protocol.names import NameRules
from tsd.protocol.put_json import (
    KnownPut,
    PutResult,
    parse_put_body,
    parse_put_body_known,
    parse_put_body_pieces,
)
from tsd.protocol.put_reply import (
    PUT_ERRORS_DETAILS,
    PUT_ERRORS_MESSAGE,
    PutError,
    PutFlags,
    datapoint_echo,
    parse_put_flags,
    put_response,
    put_timeout_response,
    summary_body,
)

DEFAULT_RULES = NameRules()


def _typed(results: list[PutResult]) -> list[object]:
    """Results with each value's type and bits made explicit (1 == 1.0, 0.0 == -0.0)."""
    return [
        (type(r.value).__name__, _bits(r.value), r)
        if isinstance(r, DataPoint)
        else (r.message, r.datapoint)
        for r in results
    ]


def _bits(value: int | float) -> object:
    return struct.pack(">d", value) if isinstance(value, float) else value


def _rebuilt(split: KnownPut[tuple[str, Tags]]) -> list[PutResult]:
    """parse_put_body's list from parse_put_body_known's split (series = (metric, tags))."""
    results: list[PutResult | None] = [None] * split.count
    for index, _, result, _ in split.others:
        results[index] = result
    points = iter(split.points)
    for index in split.point_indexes():
        (metric, tags), timestamp, value = next(points)
        results[index] = DataPoint(metric, timestamp, value, tags)
    assert next(points, None) is None
    assert [at for _, at, _, _ in split.others] == [
        sum(1 for i in split.point_indexes() if i < index) for index, _, _, _ in split.others
    ]
    return [r for r in results if r is not None]


def known_after(split: KnownPut[tuple[str, Tags]]) -> dict[object, tuple[str, Tags]]:
    """What the handler remembers after a split: each valid point's series under every key
    the split gives for it."""
    known: dict[object, tuple[str, Tags]] = {}
    for index, _, result, key in split.others:
        if isinstance(result, DataPoint):
            if key is not None:
                known[key] = (result.metric, result.tags)
            if split.raw_keys is not None:
                known[split.raw_keys[index]] = (result.metric, result.tags)
    return known


def check_known_path(body: bytes, rules: NameRules, results: list[PutResult]) -> None:
    """parse_put_body_known gives parse_put_body's answer, with no series known, then with
    the series of every point it returned a key for known (the hot paths)."""
    first: KnownPut[tuple[str, Tags]] = parse_put_body_known(body, {}, rules)
    assert first.points == []
    assert _typed(_rebuilt(first)) == _typed(results)
    again = parse_put_body_known(body, known_after(first), rules)
    assert _typed(_rebuilt(again)) == _typed(results)
    for known in ({}, known_after(first)):
        for size in (1, 2):  # a large body in pieces: the same answer, element for element
            pieces = parse_put_body_pieces(body, known, rules, piece_elements=size)
            rebuilt = [result for piece in pieces for result in _rebuilt(piece)]
            assert _typed(rebuilt) == _typed(results)
            offsets = [piece.offset for piece in pieces]
            assert offsets == [sum(piece.count for piece in pieces[:n]) for n in range(len(pieces))]


def test_known_series_take_the_hot_path() -> None:
    points = [
        (1, 1, {"k": "v"}),
        (2.5, 2, {"k": "v", "h": "a"}),
        ("3", 3, {"k": "v"}),  # a string value: typed by the general path once
        (-(2**63), 4, {"h": "a", "k": "v"}),  # tags in another order: another key
        (5, 5, {"k": True}),  # a boolean tag value is "true": valid, but never keyed
    ]
    body = b"[" + b",".join(point(value=v, timestamp=t, tags=tags) for v, t, tags in points) + b"]"
    results = parse(body)
    first: KnownPut[str] = parse_put_body_known(body, {}, DEFAULT_RULES)
    assert first.raw_keys is None  # a string value: not a usual body, orjson's path
    keys = [key for _, _, _, key in first.others]
    assert keys[4] is None
    known = {keys[0]: "kv", keys[1]: "kv-ha", keys[3]: "kv-ha"}
    assert keys[2] == keys[0]
    again = parse_put_body_known(body, known, DEFAULT_RULES)
    assert again.points == [("kv", 1, 1), ("kv-ha", 2, 2.5), ("kv-ha", 4, -(2**63))]
    # A string value is typed by the general path each time.
    assert again.others == [(2, 2, results[2], keys[2]), (4, 3, results[4], None)]


def test_usual_bodies_of_known_series_take_the_fastest_path() -> None:
    body = (
        b'[{"metric":"m","timestamp":1,"value":1,"tags":{"k":"v"}},'
        b' {"tags": {"k": "v", "h": true}, "value": 2.5, "timestamp": 2, "metric": "m"},'
        b'{"metric":"m","timestamp":3,"value":-9223372036854775808,"tags":{"k":"v"},'
        b'"tsuid":null,"other":[1]}]'
    )
    results = parse(body)
    first: KnownPut[tuple[str, Tags]] = parse_put_body_known(body, {}, DEFAULT_RULES)
    assert first.raw_keys == [
        b'm\xff{"k":"v"}',
        b'm\xff{"k": "v", "h": true}',
        b'm\xff{"k":"v"}',
    ]
    known = known_after(first)
    again = parse_put_body_known(body, known, DEFAULT_RULES)
    assert (again.others, again.raw_keys) == ([], None)
    assert _typed(_rebuilt(again)) == _typed(results)
    # One series not known (here: forgotten under its JSON text): orjson's path answers.
    del known[b'm\xff{"k": "v", "h": true}']
    partly = parse_put_body_known(body, known, DEFAULT_RULES)
    assert partly.raw_keys == first.raw_keys
    assert _typed(_rebuilt(partly)) == _typed(results)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=5),
    st.sampled_from(["{!r}", "{:.17g}", "{:e}", "{:.3f}"]),
)
def test_fastest_path_reads_floats_as_the_exact_parser(values: list[float], form: str) -> None:
    texts = [form.format(v) for v in values]
    texts = [t if any(c in t for c in ".eE") else t + ".0" for t in texts]
    body = (
        "["
        + ",".join(f'{{"metric":"m","timestamp":1,"value":{t},"tags":{{"k":"v"}}}}' for t in texts)
        + "]"
    ).encode()
    parse(body)


def parse(body: bytes, rules: NameRules = DEFAULT_RULES) -> list[PutResult]:
    """parse_put_body, checked against the exact path, the hot path and trailing bytes."""
    results = parse_put_body(body, rules)
    assert _typed(put_json._parse_exact(body, rules)) == _typed(results)
    check_known_path(body, rules, results)
    for tail in (b"\n", b"  \r\n\t", b" trailing garbage {", b"]]"):
        assert _typed(parse_put_body(body + tail, rules)) == _typed(results)
    return results


def parse_error(body: bytes) -> str:
    """The body-level error message, the same from every path."""
    with pytest.raises(BadRequestError) as fast:
        parse_put_body(body)
    with pytest.raises(BadRequestError) as exact:
        put_json._parse_exact(body, DEFAULT_RULES)
    with pytest.raises(BadRequestError) as known:
        parse_put_body_known(body, {}, DEFAULT_RULES)
    with pytest.raises(BadRequestError) as pieces:
        parse_put_body_pieces(body, {}, DEFAULT_RULES, piece_elements=1)
    assert fast.value.message == exact.value.message == known.value.message
    assert pieces.value.message == fast.value.message
    assert fast.value.status == 400
    return fast.value.message


def point(**fields: object) -> bytes:
    base: dict[str, object] = {"metric": "m", "timestamp": 1, "value": 1, "tags": {"k": "v"}}
    base.update(fields)
    return orjson.dumps({k: v for k, v in base.items() if v is not _MISSING})


_MISSING = object()


def dp(value: int | float, timestamp: int = 1, metric: str = "m", **tags: str) -> DataPoint:
    return DataPoint(metric, timestamp, value, tuple(sorted((tags or {"k": "v"}).items())))


# --- body-level errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"", "Missing request content", id="empty"),
        pytest.param(b" \r\n\t", "Missing request content", id="only_whitespace"),
        pytest.param(b"x", "The JSON must start as an object or an array", id="letter"),
        pytest.param(b"123", "The JSON must start as an object or an array", id="number"),
        pytest.param(b'"[1]"', "The JSON must start as an object or an array", id="string"),
        pytest.param(b"null", "The JSON must start as an object or an array", id="null"),
        pytest.param(b"true", "The JSON must start as an object or an array", id="boolean"),
        pytest.param(
            b"\xef\xbb\xbf[]", "The JSON must start as an object or an array", id="utf8_bom"
        ),
        pytest.param(b"[]", "No datapoints found in content", id="empty_array"),
        pytest.param(b" [ ] ", "No datapoints found in content", id="spaced_empty_array"),
        pytest.param(b"[", "Unable to parse the given JSON", id="unclosed_array"),
        pytest.param(b"{", "Unable to parse the given JSON", id="unclosed_object"),
        pytest.param(b'{"metric":}', "Unable to parse the given JSON", id="missing_value"),
        pytest.param(b"[{},]", "Unable to parse the given JSON", id="trailing_comma"),
        pytest.param(b"{'metric':'m'}", "Unable to parse the given JSON", id="single_quotes"),
        pytest.param(b'{"a":01}', "Unable to parse the given JSON", id="leading_zero"),
        pytest.param(b"[1]", "Unable to parse the given JSON", id="number_element"),
        pytest.param(b'["x"]', "Unable to parse the given JSON", id="string_element"),
        pytest.param(b"[[]]", "Unable to parse the given JSON", id="array_element"),
        pytest.param(b"[true]", "Unable to parse the given JSON", id="boolean_element"),
        pytest.param(b"[" * 5000 + b"]" * 5000, "Unable to parse the given JSON", id="deep"),
    ],
)
def test_body_level_errors(body: bytes, message: str) -> None:
    assert parse_error(body) == message


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"tags": []}, id="tags_array"),
        pytest.param({"tags": "k=v"}, id="tags_string"),
        pytest.param({"tags": ""}, id="tags_empty_string"),
        pytest.param({"tags": 1}, id="tags_number"),
        pytest.param({"tags": True}, id="tags_boolean"),
        pytest.param({"tags": {"k": {}}}, id="tag_value_object"),
        pytest.param({"tags": {"k": ["v"]}}, id="tag_value_array"),
        pytest.param({"metric": {}}, id="metric_object"),
        pytest.param({"metric": ["m"]}, id="metric_array"),
        pytest.param({"value": {}}, id="value_object"),
        pytest.param({"value": [1]}, id="value_array"),
        pytest.param({"tsuid": []}, id="tsuid_array"),
        pytest.param({"timestamp": True}, id="timestamp_boolean"),
        pytest.param({"timestamp": "abc"}, id="timestamp_word"),
        pytest.param({"timestamp": "1.5"}, id="timestamp_decimal_string"),
        pytest.param({"timestamp": "1e3"}, id="timestamp_exponent_string"),
        pytest.param({"timestamp": "99999999999999999999"}, id="timestamp_string_overflow"),
        pytest.param({"timestamp": [1]}, id="timestamp_array"),
        pytest.param({"timestamp": {}}, id="timestamp_object"),
        pytest.param({"timestamp": 2**63}, id="timestamp_int_overflow"),
        pytest.param({"timestamp": 1e19}, id="timestamp_float_overflow"),
        pytest.param({"timestamp": -1e19}, id="timestamp_float_underflow"),
    ],
)
def test_type_errors_fail_the_whole_body(fields: dict[str, object]) -> None:
    good = point()
    assert parse_error(b"[" + good + b"," + point(**fields) + b"]") == (
        "Unable to parse the given JSON"
    )


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'[{"timestamp":1e400}]', id="timestamp_infinite"),
        pytest.param(b'[{"timestamp":Infinity}]', id="timestamp_infinity_token"),
        pytest.param(b'[{"timestamp":-9223372036854775809}]', id="timestamp_below_long_min"),
        pytest.param(b'[{"timestamp":18446744073709551616}]', id="timestamp_beyond_u64"),
        pytest.param(b'[{"timestamp":' + b"1" * 5000 + b"}]", id="timestamp_5000_digits"),
    ],
)
def test_number_tokens_out_of_long_range_fail_the_body(body: bytes) -> None:
    assert parse_error(body) == "Unable to parse the given JSON"


# --- per-point validation, in OpenTSDB's order ----------------------------------------------


@pytest.mark.parametrize(
    ("body", "message", "echo"),
    [
        pytest.param(
            b"[null]", "Unexpected null datapoint encountered in set.", None, id="null_element"
        ),
        pytest.param(b"{}", "Metric name was empty", {"timestamp": 0}, id="empty_object"),
        pytest.param(
            point(metric=""),
            "Metric name was empty",
            {"metric": "", "timestamp": 1, "value": "1", "tags": {"k": "v"}},
            id="empty_metric",
        ),
        pytest.param(
            point(metric=None),
            "Metric name was empty",
            {"timestamp": 1, "value": "1", "tags": {"k": "v"}},
            id="null_metric",
        ),
        pytest.param(
            point(metric=None, timestamp=0, value=None, tags=None),
            "Metric name was empty",
            {"timestamp": 0},
            id="metric_checked_first",
        ),
        pytest.param(
            point(timestamp=0),
            "Invalid timestamp",
            {"metric": "m", "timestamp": 0, "value": "1", "tags": {"k": "v"}},
            id="zero_timestamp",
        ),
        pytest.param(
            point(timestamp=-1),
            "Invalid timestamp",
            {"metric": "m", "timestamp": -1, "value": "1", "tags": {"k": "v"}},
            id="negative_timestamp",
        ),
        pytest.param(
            point(timestamp=_MISSING),
            "Invalid timestamp",
            {"metric": "m", "timestamp": 0, "value": "1", "tags": {"k": "v"}},
            id="missing_timestamp",
        ),
        pytest.param(point(timestamp=None), "Invalid timestamp", None, id="null_timestamp_is_zero"),
        pytest.param(point(timestamp=""), "Invalid timestamp", None, id="empty_string_is_zero"),
        pytest.param(point(timestamp=" null "), "Invalid timestamp", None, id="null_string"),
        pytest.param(
            b'{"metric":"m","timestamp":NaN,"value":1,"tags":{"k":"v"}}',
            "Invalid timestamp",
            None,
            id="nan_timestamp_is_zero",
        ),
        pytest.param(point(timestamp=0.9), "Invalid timestamp", None, id="float_truncated"),
        pytest.param(
            point(value=_MISSING, tags=None),
            "Empty value",
            {"metric": "m", "timestamp": 1},
            id="missing_value",
        ),
        pytest.param(point(value=None), "Empty value", None, id="null_value"),
        pytest.param(point(value=""), "Empty value", None, id="empty_string_value"),
        pytest.param(
            point(tags=_MISSING),
            "Missing tags",
            {"metric": "m", "timestamp": 1, "value": "1"},
            id="missing_tags",
        ),
        pytest.param(point(tags=None), "Missing tags", None, id="null_tags"),
        pytest.param(
            point(tags={}, value="x"),
            "Missing tags",
            {"metric": "m", "timestamp": 1, "value": "x", "tags": {}},
            id="tags_checked_before_value",
        ),
    ],
)
def test_point_validation_order_and_messages(
    body: bytes, message: str, echo: dict[str, object] | None
) -> None:
    [result] = parse(body)
    assert isinstance(result, PutError)
    assert result.message == message
    if echo is not None or body == b"[null]":
        assert result.datapoint == echo


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b'"x"', id="word"),
        pytest.param(b'"12x"', id="suffix"),
        pytest.param(b'"NaN"', id="nan_string"),
        pytest.param(b'"Infinity"', id="infinity_string"),
        pytest.param(b"NaN", id="nan_token"),
        pytest.param(b"Infinity", id="infinity_token"),
        pytest.param(b"-Infinity", id="minus_infinity_token"),
        pytest.param(b"true", id="true"),
        pytest.param(b"false", id="false"),
        pytest.param(b'"0x10"', id="hex"),
        pytest.param(b'"1_000"', id="underscore"),
        pytest.param(b'" 5"', id="leading_space"),
        pytest.param(b'"1.2.3"', id="two_dots"),
        pytest.param(b"9223372036854775808", id="just_above_long_max"),
        pytest.param(b"18446744073709551615", id="u64_max"),
        pytest.param(b"18446744073709551616", id="beyond_u64"),
        pytest.param(b"-9223372036854775809", id="just_below_long_min"),
        pytest.param(b"1" * 400, id="huge_int"),
    ],
)
def test_unparseable_values(value: bytes) -> None:
    body = b'{"metric":"m","timestamp":1,"value":' + value + b',"tags":{"k":"v"}}'
    [result] = parse(body)
    assert result == PutError(
        "Unable to parse value to a number",
        {"metric": "m", "timestamp": 1, "value": value.strip(b'"').decode(), "tags": {"k": "v"}},
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param(b"1e400", "Infinity", id="token"),
        pytest.param(b"-1e400", "-Infinity", id="negative_token"),
        pytest.param(b'"1.0e999"', "Infinity", id="string"),
    ],
)
def test_infinite_values(value: bytes, shown: str) -> None:
    body = b'{"metric":"m","timestamp":7,"value":' + value + b',"tags":{"k":"v"}}'
    [result] = parse(body)
    assert isinstance(result, PutError)
    assert result.message == f"value is NaN or Infinite: {shown} for metric=m timestamp=7"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"timestamp": 10000000000000},
            "bad timestamp=10000000000000 when trying to add value=[1]/0 to metric=m, tags={k=v}",
            id="bad_timestamp_int",
        ),
        pytest.param(
            {"timestamp": 10000000000000, "value": 0.1},
            "bad timestamp=10000000000000 when trying to add value="
            "[63, -71, -103, -103, -103, -103, -103, -102]/15 to metric=m, tags={k=v}",
            id="bad_timestamp_double",
        ),
        pytest.param(
            {"tags": {c: str(i) for i, c in enumerate("abcdefghi")}},
            "Too many tags: 9 maximum allowed: 8, tags: "
            "{a=0, b=1, c=2, d=3, e=4, f=5, g=6, h=7, i=8}",
            id="nine_tags",
        ),
        pytest.param(
            {"metric": "a b"}, 'Invalid metric name ("a b"): illegal character:  ', id="space"
        ),
        pytest.param(
            {"metric": "a😀"},
            'Invalid metric name ("a😀"): illegal character: 😀',
            id="emoji_metric",
        ),
        pytest.param(
            {"tags": {"k k": "v"}},
            'Invalid tag name with value [v] ("k k"): illegal character:  ',
            id="tag_key",
        ),
        pytest.param(
            {"tags": {"k": "v:1"}},
            'Invalid tag value with key [k] ("v:1"): illegal character: :',
            id="tag_value",
        ),
        pytest.param(
            {"tags": {"k": None}}, "Invalid tag value with key [k]: null", id="null_tag_value"
        ),
        pytest.param(
            {"tags": {"k": ""}}, "Invalid tag value with key [k]: empty string", id="empty_tag"
        ),
        pytest.param(
            {"tags": {"": "v"}},
            "Invalid tag name with value [v]: empty string",
            id="empty_tag_key",
        ),
    ],
)
def test_illegal_argument_messages(fields: dict[str, object], message: str) -> None:
    [result] = parse(point(**fields))
    assert isinstance(result, PutError)
    assert result.message == message


def test_configured_rules_apply() -> None:
    rules = NameRules(special_chars=":", max_tags=1)
    assert parse(point(tags={"k": "v:1"}), rules) == [dp(1, k="v:1")]
    [result] = parse(point(tags={"a": "1", "b": "2"}), rules)
    assert isinstance(result, PutError)
    assert result.message == "Too many tags: 2 maximum allowed: 1, tags: {a=1, b=2}"


# --- accepted points and typing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(b"1", 1, id="int"),
        pytest.param(b"-0", 0, id="minus_zero_int"),
        pytest.param(b"1.0", 1.0, id="float_with_zero_fraction"),
        pytest.param(b"1e3", 1000.0, id="exponent_is_float"),
        pytest.param(b"1E+3", 1000.0, id="upper_exponent"),
        pytest.param(b"0.1", 0.1, id="double"),
        pytest.param(b"1e+21", 1e21, id="go_float_format"),
        pytest.param(b"9223372036854775807", 2**63 - 1, id="long_max"),
        pytest.param(b"-9223372036854775808", -(2**63), id="long_min"),
        pytest.param(b"9.3e18", 9.3e18, id="float_beyond_long"),
        pytest.param(b"1e-400", 0.0, id="underflow_is_zero"),
        pytest.param(b'"17"', 17, id="numeric_string_int"),
        pytest.param(b'"1.5"', 1.5, id="numeric_string_float"),
        pytest.param(b'"1.5f"', 1.5, id="java_float_suffix"),
        pytest.param(b'"+7"', 7, id="plus_sign_string"),
    ],
)
def test_values_keep_opentsdb_typing(value: bytes, expected: int | float) -> None:
    body = b'{"metric":"m","timestamp":1,"value":' + value + b',"tags":{"k":"v"}}'
    [result] = parse(body)
    assert isinstance(result, DataPoint)
    assert type(result.value) is type(expected)
    assert result.value == expected


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        pytest.param(b"1", 1, id="int"),
        pytest.param(b"1.9", 1, id="float_truncated"),
        pytest.param(b"1e9", 1000000000, id="exponent"),
        pytest.param(b'"42"', 42, id="string"),
        pytest.param(b'" 42 "', 42, id="string_trimmed"),
        pytest.param(b'"+42"', 42, id="string_plus"),
        pytest.param(b'"0000000000000000000042"', 42, id="string_leading_zeros"),
        pytest.param(b"4294967295", 4294967295, id="seconds_max"),
        pytest.param(b"4294967296", 4294967296, id="ms_from_here"),
        pytest.param(b"1795236834123", 1795236834123, id="ms"),
        pytest.param(b"9999999999999", 9999999999999, id="ms_max"),
    ],
)
def test_timestamps_coerce_like_jackson(timestamp: bytes, expected: int) -> None:
    body = b'{"metric":"m","timestamp":' + timestamp + b',"value":1,"tags":{"k":"v"}}'
    assert parse(body) == [dp(1, expected)]


def test_string_fields_take_a_numbers_source_text() -> None:
    body = b'{"metric":1.50,"timestamp":1,"value":1,"tags":{"k":2,"b":true,"z":-0}}'
    assert parse(body) == [dp(1, metric="1.50", k="2", b="true", z="-0")]


def test_unknown_fields_are_ignored_and_last_duplicate_wins() -> None:
    body = (
        b'{"metric":"x","metric":"m","timestamp":1,"value":1,"tags":{"k":"v"},'
        b'"tsuid":"000001","extra":{"deep":[1,{"a":null}]},"counter":true}'
    )
    assert parse(body) == [dp(1)]


def test_null_bytes_and_controls_around_the_body_are_trimmed() -> None:
    assert parse(b"\x00\x01 " + point() + b"\x00") == [dp(1)]


def test_letters_beyond_ascii_are_valid_names() -> None:
    body = '{"metric":"temp.μs","timestamp":1,"value":1,"tags":{"ville":"Zürich"}}'.encode()
    assert parse(body) == [DataPoint("temp.μs", 1, 1, (("ville", "Zürich"),))]


def test_invalid_utf8_becomes_replacement_chars_like_java() -> None:
    [result] = parse(b'{"metric":"a\xffb","timestamp":1,"value":1,"tags":{"k":"v"}}')
    assert isinstance(result, PutError)
    assert result.message == 'Invalid metric name ("a\ufffdb"): illegal character: \ufffd'


# --- the echo in errors ---------------------------------------------------------------------


def test_echo_keeps_source_text_drops_unknown_fields_and_orders_like_jackson() -> None:
    body = (
        b'{"tags":{"zz$":"1","a":"2"},"extra":1,"value":1.50e0,"timestamp":"42",'
        b'"tsuid":"0001","metric":"m"}'
    )
    [result] = parse(body)
    assert result == PutError(
        'Invalid tag name with value [1] ("zz$"): illegal character: $',
        {
            "metric": "m",
            "timestamp": 42,
            "value": "1.50e0",
            "tags": {"a": "2", "zz$": "1"},  # Java HashMap order
            "tsuid": "0001",
        },
    )


def test_mixed_batch_keeps_order() -> None:
    body = b"[" + b",".join([point(), point(value="x"), b"null", point(value=2.5)]) + b"]"
    assert _typed(parse(body)) == _typed(
        [
            dp(1),
            PutError(
                "Unable to parse value to a number",
                {"metric": "m", "timestamp": 1, "value": "x", "tags": {"k": "v"}},
            ),
            PutError("Unexpected null datapoint encountered in set.", None),
            dp(2.5),
        ]
    )


def test_datapoint_echo_of_an_accepted_point() -> None:
    point_ = DataPoint("m", 1, 0.5, (("host", "a"), ("dev", "sda")))
    assert datapoint_echo(point_) == {
        "metric": "m",
        "timestamp": 1,
        "value": "0.5",
        "tags": {"dev": "sda", "host": "a"},
    }


# --- replies --------------------------------------------------------------------------------

ERROR = PutError(
    "Unable to parse value to a number",
    {"metric": "sys.cpu", "timestamp": 1, "value": "x", "tags": {"host": "a"}},
)


def test_summary_body_with_details_matches_opentsdb() -> None:
    # The example of behaviour doc §1.1, keys in OpenTSDB's HashMap order.
    assert summary_body(1, 1, [ERROR], details=True, timeouts=None) == (
        b'{"success":1,"failed":1,"errors":[{"datapoint":{"metric":"sys.cpu","timestamp":1,'
        b'"value":"x","tags":{"host":"a"}},"error":"Unable to parse value to a number"}]}'
    )


def test_summary_body_variants() -> None:
    assert summary_body(3, 0, None, details=False, timeouts=None) == b'{"success":3,"failed":0}'
    assert summary_body(3, 0, [ERROR], details=False, timeouts=0) == (
        b'{"success":3,"timeouts":0,"failed":0}'
    )
    assert summary_body(0, 1, [], details=True, timeouts=2) == (
        b'{"success":0,"timeouts":2,"failed":1,"errors":[]}'
    )
    null_point = PutError("Unexpected null datapoint encountered in set.", None)
    assert summary_body(0, 1, [null_point], details=True, timeouts=None) == (
        b'{"success":0,"failed":1,"errors":[{"datapoint":null,'
        b'"error":"Unexpected null datapoint encountered in set."}]}'
    )


def test_summary_body_survives_lone_surrogates() -> None:
    [result] = parse(b'{"metric":"a\\ud800","timestamp":1,"value":1,"tags":{"k":"v"}}')
    assert isinstance(result, PutError)
    body = summary_body(0, 1, [result], details=True, timeouts=None)
    assert json.loads(body)["errors"][0]["datapoint"]["metric"] == "a\ud800"


@pytest.mark.parametrize(
    ("query", "flags"),
    [
        pytest.param({}, PutFlags(), id="none"),
        pytest.param({"details": ""}, PutFlags(details=True), id="bare_details"),
        pytest.param({"details": "false"}, PutFlags(details=True), id="presence_only"),
        pytest.param({"summary": "true"}, PutFlags(summary=True), id="summary"),
        pytest.param(
            {"sync": "", "sync_timeout": "5000"},
            PutFlags(sync=True, sync_timeout_ms=5000),
            id="sync_timeout",
        ),
        pytest.param({"sync_timeout": "+5"}, PutFlags(sync_timeout_ms=5), id="plus_sign"),
        pytest.param({"sync_timeout": "-5"}, PutFlags(sync_timeout_ms=-5), id="negative"),
        pytest.param({"other": "x"}, PutFlags(), id="unknown_key"),
    ],
)
def test_parse_put_flags(query: dict[str, str], flags: PutFlags) -> None:
    assert parse_put_flags(query) == flags


@pytest.mark.parametrize("text", ["abc", "", "1.5", "2147483648", "5ms"])
def test_parse_put_flags_refuses_bad_sync_timeout(text: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_put_flags({"sync_timeout": text})
    assert info.value.message == f'For input string: "{text}"'


def test_put_response_without_summary() -> None:
    assert put_response(PutFlags(), points=2, queued=2) == (204, b"")
    with pytest.raises(BadRequestError) as info:
        put_response(PutFlags(), points=2, queued=1, errors=[ERROR])
    assert (info.value.status, info.value.message, info.value.details) == (
        400,
        PUT_ERRORS_MESSAGE,
        PUT_ERRORS_DETAILS,
    )
    assert PUT_ERRORS_DETAILS == 'Please see the TSD logs or append "details" to the put request'
    with pytest.raises(BadRequestError):  # a failed sync write also makes it a 400
        put_response(PutFlags(sync=True), points=2, queued=2, good_writes=1, failed_writes=1)


def test_put_response_with_summary_and_details() -> None:
    assert put_response(PutFlags(summary=True), points=2, queued=2) == (
        200,
        b'{"success":2,"failed":0}',
    )
    assert put_response(PutFlags(details=True), points=2, queued=1, errors=[ERROR]) == (
        400,
        summary_body(1, 1, [ERROR], details=True, timeouts=None),
    )
    # Storage failures reported by sync are counted but do not make it a 400.
    flags = PutFlags(summary=True, sync=True, sync_timeout_ms=100)
    assert put_response(flags, points=3, queued=3, good_writes=2, failed_writes=1) == (
        200,
        b'{"success":2,"timeouts":0,"failed":1}',
    )


def test_put_timeout_response() -> None:
    with pytest.raises(BadRequestError) as info:
        put_timeout_response(
            PutFlags(sync=True), points=6, queued=6, good_writes=1, failed_writes=2, timeouts=3
        )
    assert info.value.message == (
        "The put call has timedout with 1 successful writes, 2 failed writes"
        " and 3 timed out writes."
    )
    flags = PutFlags(summary=True, sync=True, sync_timeout_ms=10)
    assert put_timeout_response(
        flags, points=5, queued=4, good_writes=1, failed_writes=2, timeouts=1
    ) == (400, b'{"success":1,"timeouts":1,"failed":3}')


# --- what real clients send (clients.md) ----------------------------------------------------


def test_scollector_gzip_array_after_inflating() -> None:
    points = [
        {"metric": "os.cpu", "timestamp": 1795237078, "value": 12345, "tags": {"host": "vm"}},
        {"metric": "os.mem.used", "timestamp": 1795237078, "value": 0.25, "tags": {"host": "vm"}},
    ]
    body = gzip.decompress(gzip.compress(json.dumps(points).encode()))
    assert _typed(parse(body)) == _typed(
        [
            DataPoint("os.cpu", 1795237078, 12345, (("host", "vm"),)),
            DataPoint("os.mem.used", 1795237078, 0.25, (("host", "vm"),)),
        ]
    )


def test_telegraf_json_encoder_layout() -> None:
    body = (
        b'[{"metric":"cpu_usage_idle","timestamp":1795237078,"value":99.5,'
        b'"tags":{"cpu":"cpu-total","host":"vm"}}\n,'
        b'{"metric":"big","timestamp":1795237078,"value":1e+21,"tags":{"host":"vm"}}\n]'
    )
    assert _typed(parse(body)) == _typed(
        [
            DataPoint("cpu_usage_idle", 1795237078, 99.5, (("cpu", "cpu-total"), ("host", "vm"))),
            DataPoint("big", 1795237078, 1e21, (("host", "vm"),)),
        ]
    )


def test_opentsdb_py_mixed_value_types() -> None:
    body = orjson.dumps(
        [
            {"metric": "a", "timestamp": 1795237078, "value": 17, "tags": {"host": "vm"}},
            {"metric": "b", "timestamp": 1795237078, "value": 1.5, "tags": {"host": "vm"}},
            {"metric": "c", "timestamp": 1795237078, "value": "17", "tags": {"host": "vm"}},
        ]
    )
    assert _typed(parse(body)) == _typed(
        [
            DataPoint("a", 1795237078, 17, (("host", "vm"),)),
            DataPoint("b", 1795237078, 1.5, (("host", "vm"),)),
            DataPoint("c", 1795237078, 17, (("host", "vm"),)),
        ]
    )


def test_tcollector_http_floats_and_ms() -> None:
    body = b'[{"metric":"t","timestamp":1795236834123,"value":42.0,"tags":{"host":"vm"}}]'
    [result] = parse(body)
    assert result == DataPoint("t", 1795236834123, 42.0, (("host", "vm"),))
    assert isinstance(result.value, float)
    assert struct.pack(">f", result.value) == struct.pack(">f", 42.0)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"timestamp": 0}, id="timestamp_zero"),
        pytest.param({"timestamp": -1}, id="timestamp_negative"),
        pytest.param({"timestamp": 10_000_000_000_000}, id="timestamp_14_digits"),
        pytest.param({"timestamp": 1.5}, id="timestamp_float"),
        pytest.param({"timestamp": "1"}, id="timestamp_string"),
        pytest.param({"value": 2**63}, id="value_over_long"),
        pytest.param({"value": 9.3e18}, id="value_float_over_long"),
        pytest.param({"value": True}, id="value_bool"),
        pytest.param({"value": "1"}, id="value_string"),
        pytest.param({"value": None}, id="value_null"),
        pytest.param({"metric": 1}, id="metric_number"),
        pytest.param({"tsuid": 1}, id="tsuid_number"),
        pytest.param({"tsuid": {"a": 1}}, id="tsuid_object"),
        pytest.param({"tags": {"k": "v"}, "extra": [1, {"b": None}]}, id="unknown_field"),
        pytest.param({"tsuid": "000001000001000001"}, id="tsuid_string"),
    ],
)
def test_a_known_series_with_unusual_fields_answers_as_the_general_path(
    fields: dict[str, object],
) -> None:
    """The series is known (from an earlier body); the second element of the same series
    has a field the hot paths must not take as usual."""
    check_with_known_series(b"[" + point() + b"," + point(**fields) + b"]")


def check_with_known_series(body: bytes) -> None:
    """parse_put_body's answer, body error included, with point()'s series known."""
    first: KnownPut[tuple[str, Tags]] = parse_put_body_known(b"[" + point() + b"]", {})
    known = known_after(first)
    assert len(known) == 2  # under both keys
    try:
        expected: object = _typed(parse_put_body(body))
    except BadRequestError as exc:
        expected = exc.message
    try:
        got: object = _typed(_rebuilt(parse_put_body_known(body, known)))
    except BadRequestError as exc:
        got = exc.message
    assert got == expected


def test_a_known_series_with_an_int_under_the_long_range() -> None:
    bad = point(value=0).replace(b":0", b":-9223372036854775809")
    check_with_known_series(b"[" + point() + b"," + bad + b"]")


def _large_body(points: int, series: int) -> bytes:
    return orjson.dumps(
        [
            {
                "metric": "sys.cpu.user",
                "timestamp": 1_356_998_400 + i,
                "value": i * 0.5 if i % 2 else i,
                "tags": {"host": f"web{i % series}", "dc": "lga", "cpu": str(i % 8)},
            }
            for i in range(points)
        ]
    )


def _parsed_memory(body: bytes, known: dict[object, tuple[str, Tags]]) -> tuple[Any, int, int]:
    """The pieces of ``body`` and the bytes they keep and peaked at while parsed."""
    tracemalloc.start()
    try:
        pieces = parse_put_body_pieces(body, known, DEFAULT_RULES, piece_elements=2048)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return pieces, kept, peak


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
def test_a_large_body_is_parsed_in_pieces_within_a_multiple_of_its_size() -> None:
    body = _large_body(16_000, 2_000)
    pieces, kept, peak = _parsed_memory(body, {})
    assert len(pieces) == 8
    assert peak < 16 * len(body)  # the whole body at once: about 21x
    known: dict[object, tuple[str, Tags]] = {}
    for piece in pieces:
        known.update(known_after(piece))
    del pieces
    pieces, kept, peak = _parsed_memory(body, known)
    assert sum(len(piece.points) for piece in pieces) == 16_000  # all of known series
    assert kept < 3 * len(body)
    assert peak < 16 * len(body)
