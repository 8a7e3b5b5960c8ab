"""parse_plain_put (the compiled parser of a put line of a new series in its plain form)
answers exactly as the full parser, parse_command, for every line it takes; it takes the
lines collectors send; everything else (errors included) is left to the full parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tests.protocol.test_telnet_known_puts import numbers, put_lines
from tsd.errors import BadRequestError
from tsd.protocol.names import NameRules
from tsd.protocol.telnet import PutCommand, parse_command, parse_plain_put

BUILT = native.load("tsd.protocol._parse") is not None

needs_c = pytest.mark.skipif(not BUILT, reason="tsd/protocol/_parse.c is not built")

PLAIN = "abcXYZ019./_-"
names = st.text(alphabet=PLAIN, min_size=1, max_size=6)
odd_names = st.one_of(
    names, names, names, st.sampled_from(["", "a=b", "é", "a b", "a\tb", "*", "a,b", "日本"])
)
tag_words = st.one_of(
    st.tuples(names, names).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.tuples(odd_names, odd_names).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.sampled_from(["", "=", "a", "a==b", "a=b=c", "=b", "a="]),
)
usual_numbers = st.one_of(
    st.integers(-(10**19), 10**19).map(lambda i: b"%d" % i),
    st.floats().map(lambda f: repr(f).encode()),
    numbers,
)
stamps = st.one_of(
    st.integers(1, 10**13 - 1).map(lambda i: b"%d" % i),
    st.integers(1, 10**13 - 1).map(lambda i: b"%d" % i),
    usual_numbers,
)
#: put lines, mostly plain, with every kind of departure from the plain form
lines = st.builds(
    lambda metric, stamp, value, tags, sep: sep.join(
        [b"put", metric.encode("utf-8"), stamp, value, *(t.encode("utf-8") for t in tags)]
    ),
    odd_names,
    stamps,
    usual_numbers,
    st.lists(tag_words, min_size=1, max_size=9),
    st.sampled_from([b" ", b" ", b" ", b"  "]),
)


def full_parse(line: bytes, rules: NameRules) -> tuple[object, bytes] | None:
    """parse_command's point and the telnet key of an accepted put; None otherwise."""
    try:
        command = parse_command(line, rules)
    except BadRequestError:
        return None
    if not isinstance(command, PutCommand):
        return None
    words = line.split(b" ", 4)
    return command.point, words[1] + b" " + words[4]


def check(line: bytes, rules: NameRules) -> bool:
    plain = parse_plain_put(line, rules)
    if plain is None:
        return False
    expected = full_parse(line, rules)
    assert expected is not None, line
    point, alias = plain
    want_point, want_alias = expected
    assert alias == want_alias
    assert point == want_point
    assert type(point) is type(want_point)
    assert [type(v) for v in point] == [type(v) for v in want_point]
    return True


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@needs_c
@settings(max_examples=2000, deadline=None)
@given(lines | put_lines, st.integers(1, 8))
def test_a_line_taken_is_parsed_as_the_full_parser_parses_it(line: bytes, max_tags: int) -> None:
    check(line, NameRules(max_tags=max_tags))


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@needs_c
@settings(max_examples=300, deadline=None)
@given(
    names,
    st.integers(1, 10**13 - 1),
    st.integers(-(10**18) + 1, 10**18 - 1) | st.floats(allow_nan=False, allow_infinity=False),
    st.dictionaries(names, names, min_size=1, max_size=8),
)
def test_collectors_lines_are_taken(
    metric: str, stamp: int, value: int | float, tags: dict[str, str]
) -> None:
    """Every plain line with distinct tag keys is taken (the fast path is not a no-op)."""
    text = " ".join(f"{k}={v}" for k, v in tags.items())
    line = f"put {metric} {stamp} {value!r} {text}".encode()
    assert check(line, NameRules())


@needs_c
def test_interned_names_and_the_limit_of_tags() -> None:
    first = parse_plain_put(b"put sys.cpu.user 1356998400 42 host=web01 cpu=0")
    assert first is not None
    point, alias = first
    assert alias == b"sys.cpu.user host=web01 cpu=0"
    assert point.tags == (("cpu", "0"), ("host", "web01"))
    second = parse_plain_put(b"put sys.cpu.user 1356998401 1 host=web02 cpu=1")
    assert second is not None
    assert second[0].metric is point.metric  # interned, as the full parser does
    assert second[0].tags[0][0] is point.tags[0][0]
    line = b"put m 1 1 " + b" ".join(b"k%d=v" % i for i in range(3))
    assert parse_plain_put(line, NameRules(max_tags=3)) is not None
    assert parse_plain_put(line, NameRules(max_tags=2)) is None  # the full parser's error
    for no_tags in (0, -5):  # a configuration with no room for tags takes nothing here
        assert parse_plain_put(line, NameRules(max_tags=no_tags)) is None


@needs_c
def test_names_seen_lately_are_one_object_and_every_name_reads_right() -> None:
    """The parser keeps the names it made last (metric, tag keys): a line of the same
    names gets the same objects (interned, as Python's own parse of them), and names past
    its table's size, colliding in it, still come out as written."""
    rules = NameRules()
    lines = [b"put m.%d 1356998400 1 host%d=a dc=x" % (i % 300, i % 7) for i in range(900)]
    points = [parse_plain_put(line, rules) for line in lines]
    for line, parsed in zip(lines, points, strict=True):
        assert parsed is not None
        point, _ = parsed
        words = line.decode().split(" ")
        assert point.metric == words[1]
        assert dict(point.tags) == dict(word.split("=") for word in words[4:])
    first = points[0]
    again = parse_plain_put(b"put m.0 1356998400 2 host0=b dc=y", rules)
    assert first is not None
    assert again is not None
    assert again[0].metric is first[0].metric
    assert [k for k, _ in again[0].tags] == [k for k, _ in first[0].tags]
    assert all(a is b for (a, _), (b, _) in zip(again[0].tags, first[0].tags, strict=True))
