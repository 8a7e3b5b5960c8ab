"""Fuzz invariants for the write-path parsers (h11 fuzz/afl-server.py's rule): any bytes
either parse or raise BadRequestError, never anything else. Also: the telnet framing gives
the same answers however the bytes are chunked, /api/put's fast and exact paths agree, and
whatever is accepted is storable (OpenTSDB's timestamp, value and tag limits hold).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol.test_put_json import check_known_path
from tsd.data_points import DataPoint
from tsd.errors import BadRequestError
from tsd.protocol import put_json, put_reply
from tsd.protocol.names import NameRules, validate_string
from tsd.protocol.put_json import parse_put_body
from tsd.protocol.put_reply import PutError
from tsd.protocol.telnet import Command, LineBuffer, PutCommand, line_too_long, parse_command

pytestmark = pytest.mark.slow  # many generated inputs

fuzz_settings = settings(max_examples=300, deadline=None)
RULES = NameRules(max_tags=3)

# --- telnet ---------------------------------------------------------------------------------

_SEPARATORS = [b" ", b" ", b" ", b"  "]
_METRICS = [b"m", b"sys.cpu", b"\xb5s", b"a$", b"", b"\xbc", b"PUT"]
_TIMESTAMPS = [
    b"1",
    b"1795236834",
    b"4294967296",
    b"1795236834123",
    b"9999999999999",
    b"10000000000000",
    b"1234567890.123",
    b"0",
    b"-1",
    b"x",
    b"9" * 20,
    b".",
    b"1e9",
]
_VALUES = [
    b"1",
    b"-7",
    b"0.5",
    b"0.1",
    b"1e3",
    b"1e400",
    b"NaN",
    b"9" * 19,
    b"18446744073709551615",
    b"x",
    b"",
    b"0x10",
]
_TAGS = [
    b"k=v", b"host=web01", b"a=1", b"b=2", b"c=3", b"d=4", b"k=w", b"k$=v", b"foo", b"=v", b"",
    b"\xb5=\xe9", b"k=v=w",
]  # fmt: skip
_put_line = st.builds(
    lambda command, words, end: command + b"".join(sep + word for sep, word in words) + end,
    st.sampled_from([b"put", b"put", b"put", b"version", b"Put", b""]),
    st.tuples(
        st.tuples(st.sampled_from(_SEPARATORS), st.sampled_from(_METRICS)),
        st.tuples(st.sampled_from(_SEPARATORS), st.sampled_from(_TIMESTAMPS)),
        st.tuples(st.sampled_from(_SEPARATORS), st.sampled_from(_VALUES)),
    ).flatmap(
        lambda head: st.lists(
            st.tuples(st.sampled_from(_SEPARATORS), st.sampled_from(_TAGS)), max_size=5
        ).map(lambda tags: [*head, *tags])
    ),
    st.sampled_from([b"\n", b"\r\n"]),
)


def _answers(chunks: list[bytes], max_line_bytes: int) -> list[Command | str]:
    buffer = LineBuffer(max_line_bytes)
    out: list[Command | str] = []
    for chunk in chunks:
        buffer.feed(chunk)
        while True:
            try:
                line = buffer.maybe_next_line()
                if line is None:
                    break
                out.append(parse_command(line, RULES))
            except BadRequestError as exc:
                out.append(exc.message)
    return out


def _answers_taken(chunks: list[bytes], max_line_bytes: int) -> list[Command | str]:
    """The same, a read at a time (LineBuffer.take_lines, as the daemon frames)."""
    buffer = LineBuffer(max_line_bytes)
    out: list[Command | str] = []
    for chunk in chunks:
        buffer.feed(chunk)
        for line in buffer.take_lines():
            if line is None:
                out.append(line_too_long(max_line_bytes).message)
                continue
            try:
                out.append(parse_command(line, RULES))
            except BadRequestError as exc:
                out.append(exc.message)
    return out


def _assert_storable(point: DataPoint) -> None:
    assert 0 < point.timestamp <= 9_999_999_999_999
    if isinstance(point.value, int):
        assert -(2**63) <= point.value < 2**63
    else:
        assert math.isfinite(point.value)
    assert 1 <= len(point.tags) <= RULES.max_tags
    assert list(point.tags) == sorted(point.tags)
    assert len({k for k, _ in point.tags}) == len(point.tags)
    for name in [point.metric, *(n for pair in point.tags for n in pair)]:
        validate_string("name", name)  # raises for a name OpenTSDB refuses


def _check_telnet(data: bytes, cuts: list[int], max_line_bytes: int) -> None:
    whole = _answers([data], max_line_bytes)
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    assert _answers(chunks, max_line_bytes) == whole
    assert _answers_taken(chunks, max_line_bytes) == whole
    for answer in whole:
        if isinstance(answer, PutCommand):
            _assert_storable(answer.point)


@fuzz_settings
@given(st.binary(max_size=300), st.lists(st.integers(0, 300)), st.integers(1, 80))
def test_any_bytes_parse_or_raise_bad_request(
    data: bytes, cuts: list[int], max_line_bytes: int
) -> None:
    _check_telnet(data, cuts, max_line_bytes)


@fuzz_settings
@given(st.lists(_put_line, max_size=8), st.lists(st.integers(0, 500)))
def test_put_lines_parse_or_raise_bad_request(lines: list[bytes], cuts: list[int]) -> None:
    _check_telnet(b"".join(lines), cuts, 1024)


# --- /api/put -------------------------------------------------------------------------------


def _parse_both(body: bytes) -> object:
    """The outcome of both paths, which must be identical."""
    try:
        fast: object = parse_put_body(body, RULES)
    except BadRequestError as exc:
        fast = ("error", exc.message)
    try:
        exact: object = put_json._parse_exact(body, RULES)
    except BadRequestError as exc:
        exact = ("error", exc.message)
    try:
        known: object = put_json.parse_put_body_known(body, {}, RULES)
    except BadRequestError as exc:
        known = ("error", exc.message)
    if isinstance(fast, list):
        assert isinstance(exact, list)
        check_known_path(body, RULES, fast)
        typed = [(type(r.value) if isinstance(r, DataPoint) else None, r) for r in fast]
        assert typed == [(type(r.value) if isinstance(r, DataPoint) else None, r) for r in exact]
        for result in fast:
            if isinstance(result, DataPoint):
                _assert_storable(result)
            else:
                assert isinstance(result, PutError)
                put_reply.summary_body(0, 1, [result], details=True, timeouts=None)
    else:
        assert fast == exact == known
    return fast


@fuzz_settings
@given(st.binary(max_size=300))
def test_any_body_parses_or_raises_bad_request(body: bytes) -> None:
    _parse_both(body)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "m", "1", "1.5", "x", " 7 ", "null", "1e400", "NaN", "a b", "μ", "v$"]),
    st.text(max_size=6),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_good_name = st.sampled_from(["m", "sys.cpu", "web01", "0", "μs", "a-b_c/d"])


def _mostly(
    good: st.SearchStrategy[object], wild: st.SearchStrategy[object]
) -> st.SearchStrategy[object]:
    """``good`` about three times in four, so that many generated points are accepted."""
    return st.one_of(good, good, good, wild)


_point = st.fixed_dictionaries(
    {
        "metric": _mostly(_good_name, _scalars),
        "timestamp": _mostly(
            st.integers(min_value=1, max_value=2**34),
            st.one_of(
                st.sampled_from([0, 4294967296, 9999999999999, 10000000000000, "42", 1.5]),
                st.integers(min_value=-(2**65), max_value=2**65),
                _scalars,
            ),
        ),
        "value": _mostly(
            st.one_of(
                st.integers(min_value=-(2**63), max_value=2**63 - 1),
                st.floats(allow_nan=False, allow_infinity=False),
                st.sampled_from(["17", "1.5", "-0.25", "1e3"]),
            ),
            _scalars,
        ),
        "tags": _mostly(
            st.dictionaries(_good_name, _good_name, min_size=1, max_size=4),
            st.one_of(
                _json,
                st.dictionaries(st.sampled_from(["k", "a$", "", "zz"]), _scalars, max_size=5),
            ),
        ),
    },
    optional={"tsuid": _scalars, "extra": _json},
)


@fuzz_settings
@given(st.one_of(_point, st.lists(st.one_of(_point, _point, _point, st.none(), _json), max_size=4)))
def test_structured_bodies_agree_on_both_paths(document: object) -> None:
    # json.dumps writes NaN/Infinity tokens for non-finite floats: Jackson reads them too.
    _parse_both(json.dumps(document).encode())
