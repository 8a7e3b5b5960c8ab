"""The telnet hot path (take_known_puts) answers exactly as the full parser does.

A connection is simulated as TelnetProtocol runs it: runs of lines are offered to
take_known_puts with the series remembered so far (keyed by the raw metric word and tag
text of lines the full parser accepted); the line it stops at goes through parse_command.
The outcome of every line, taken or not, must equal parse_command's alone, values bit for
bit. Hypothesis draws the lines from a grammar of usual and unusual words.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.data_points import Tags
from tsd.errors import BadRequestError
from tsd.protocol.names import NameRules
from tsd.protocol.telnet import PutCommand, parse_command, put_line_key, take_known_puts

RULES = NameRules(max_tags=3)

Series = tuple[str, Tags]
#: a put as (series, timestamp, value type, value bits), or an error / command text
Outcome = tuple[Series, int, type, bytes] | str


def _typed(series: Series, timestamp: int, value: int | float) -> Outcome:
    bits = struct.pack(">d", value) if isinstance(value, float) else str(value).encode()
    return series, timestamp, type(value), bits


def full_outcome(line: bytes) -> Outcome:
    try:
        command = parse_command(line, RULES)
    except BadRequestError as exc:
        return exc.message
    if isinstance(command, PutCommand):
        point = command.point
        return _typed((point.metric, point.tags), point.timestamp, point.value)
    return repr(command)


def connection_outcomes(lines: list[bytes], limit: int) -> tuple[list[Outcome], int]:
    """What a connection answers, through the hot path where it applies; and how many
    lines the hot path took."""
    known: dict[bytes, Series] = {}
    outcomes: list[Outcome] = []
    taken = 0
    index = 0
    while index < len(lines):
        points: list[tuple[Series, int, int | float]] = []
        stop = take_known_puts(lines, index, known, points, limit)
        assert stop - index == len(points)  # every line up to the stop was taken
        outcomes += [_typed(*point) for point in points]
        taken += len(points)
        if stop >= len(lines):
            break
        line = lines[stop]
        outcome = full_outcome(line)
        outcomes.append(outcome)
        if not isinstance(outcome, str):
            known[put_line_key(line)] = outcome[0]
        index = stop + 1
    return outcomes, taken


def check(lines: list[bytes], limit: int = 1_000_000) -> int:
    outcomes, taken = connection_outcomes(lines, limit)
    assert outcomes == [full_outcome(line) for line in lines]
    return taken


_METRICS = [b"m", b"sys.cpu", b"\xb5s", b"a$", b"", b"PUT"]
_TAG_TEXTS = [b"k=v", b"host=web01 dc=lga", b"a=1  b=2", b"k=v ", b"k$=v", b"foo", b"k=v=w", b""]
_NUMBERS = [
    b"1",
    b"0",
    b"-0",
    b"007",
    b"-7",
    b"+5",
    b"-",
    b"",
    b"1795236834",
    b"1795236834123",
    b"9999999999999",
    b"10000000000000",
    b"0000000000001",
    b"1234567890.123",
    b"9" * 18,
    b"-" + b"9" * 18,
    b"9" * 19,
    b"-" + b"9" * 19,
    b"18446744073709551615",
    b"0.5",
    b"0.1",
    b"-0.0",
    b"1.",
    b".5",
    b"-.5",
    b"1e3",
    b"1E-7",
    b"1.e5",
    b"1e400",
    b"-1e400",
    b"1" * 400 + b".0",
    b"1_000",
    b"1_0.5",
    b"0x10",
    b"0x1.8p1",
    b"NaN",
    b"Infinity",
    b"1.5f",
    b"1.5d",
    b"\xd9\xa3",
    b"1\t",
    b" 1",
]
numbers = st.sampled_from(_NUMBERS) | st.text(alphabet="0123456789.-+eE_", max_size=22).map(
    str.encode
)
put_lines = st.builds(
    lambda command, metric, timestamp, value, tags: b" ".join(
        [command, metric, timestamp, value, *([tags] if tags is not None else [])]
    ),
    st.sampled_from([b"put", b"put", b"put", b"put", b"version", b"Put"]),
    st.sampled_from(_METRICS),
    numbers,
    numbers,
    st.none() | st.sampled_from(_TAG_TEXTS),
)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@given(st.lists(put_lines, max_size=30), st.integers(1, 5))
def test_hot_path_answers_as_the_full_parser(lines: list[bytes], limit: int) -> None:
    check(lines, limit)


def test_usual_lines_take_the_hot_path() -> None:
    """Not only equal answers: the usual forms are actually taken once the series is known."""
    values = [b"42", b"-7", b"0.5", b"1e-07", b"9" * 18, b"-1.25E3", b"0"]
    lines = [b"put sys.cpu 1795236834 1 host=web01 dc=lga"]
    lines += [
        b"put sys.cpu %d %s host=web01 dc=lga" % (1795236835 + i, v) for i, v in enumerate(values)
    ]
    lines += [b"put sys.cpu 1795236834123 5 host=web01 dc=lga"]
    assert check(lines) == len(lines) - 1


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"9" * 19, id="19_digits"),
        pytest.param(b"+5", id="plus"),
        pytest.param(b"1e400", id="infinite"),
        pytest.param(b"0x1.8p1", id="hex_float"),
        pytest.param(b"1.5f", id="java_suffix"),
    ],
)
def test_unusual_values_go_to_the_full_parser(value: bytes) -> None:
    lines = [b"put m 1795236834 1 k=v", b"put m 1795236835 " + value + b" k=v"]
    assert check(lines) == 0


def test_a_line_too_long_is_never_taken() -> None:
    known = {b"m k=v": "series"}
    points: list[tuple[str, int, int | float]] = []
    assert take_known_puts([b"put m 1 1 k=v", None, b"put m 2 2 k=v"], 0, known, points, 9) == 1
    assert points == [("series", 1, 1)]


def test_other_commands_with_a_known_series_words_are_not_puts() -> None:
    lines = [b"put m 1795236834 1 k=v", b"Put m 1795236835 2 k=v", b"version m 1795236835 2 k=v"]
    assert check(lines) == 0
