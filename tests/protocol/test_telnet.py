"""The telnet protocol: framing, command parsing, OpenTSDB's exact error lines, replies.

Messages are OpenTSDB 2.4.1's (PutDataPointRpc.importDataPoint/execute, Tags.parseLong,
TSDB.addPoint/checkTimestampAndTags, IncomingDataPoints.checkMetricAndTags, RpcManager,
RpcHandler). Client replays are the captures in /work/shared/reference/clients.md.
Every framing test feeds its bytes whole, one byte at a time and followed by an unfinished
line, and asserts the same outcome (h11's tr() pattern).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tsd import __version__
from tsd.data_points import DataPoint
from tsd.errors import BadRequestError
from tsd.protocol.names import NameRules
from tsd.protocol.rollup_put import RollupPoint
from tsd.protocol.telnet import (
    TELNET_COMMANDS,
    Command,
    DieDieDieCommand,
    DropCachesCommand,
    ExitCommand,
    HelpCommand,
    HistogramCommand,
    LineBuffer,
    PutCommand,
    RollupCommand,
    StatsCommand,
    UnknownCommand,
    VersionCommand,
    format_diediedie,
    format_drop_caches,
    format_error,
    format_help,
    format_unknown_command,
    format_version,
    line_too_long,
    parse_command,
    telnet_command_names,
)

Outcome = Command | str  # a parsed command, or the error line's text

# --- the three-way feeding helper -----------------------------------------------------------


def _drain(buffer: LineBuffer, out: list[bytes | str]) -> None:
    while True:
        try:
            line = buffer.maybe_next_line()
        except BadRequestError as exc:
            out.append(exc.message)
            continue
        if line is None:
            return
        out.append(line)


def _lines_fed(chunks: Iterable[bytes], max_line_bytes: int) -> list[bytes | str]:
    buffer = LineBuffer(max_line_bytes)
    out: list[bytes | str] = []
    for chunk in chunks:
        buffer.feed(chunk)
        _drain(buffer, out)
    return out


def _lines_taken(chunks: Iterable[bytes], max_line_bytes: int) -> list[bytes | str]:
    """The same through take_lines (a whole read at a time, None for a line too long)."""
    buffer = LineBuffer(max_line_bytes)
    out: list[bytes | str] = []
    for chunk in chunks:
        buffer.feed(chunk)
        for line in buffer.take_lines():
            out.append(
                format_error(line_too_long(max_line_bytes))[:-1].decode() if line is None else line
            )
    return out


def split_lines(data: bytes, max_line_bytes: int = 1024) -> list[bytes | str]:
    """Lines (or too-long error texts) from ``data``, identical whichever way it is fed,
    one line at a time (maybe_next_line) or a read at a time (take_lines)."""
    whole = _lines_fed([data], max_line_bytes)
    bytewise = [data[i : i + 1] for i in range(len(data))]
    trailing = [data + b"put m"[:max_line_bytes]]
    assert _lines_fed(bytewise, max_line_bytes) == whole
    assert _lines_fed(trailing, max_line_bytes) == whole
    for chunks in ([data], bytewise, trailing):
        assert _lines_taken(chunks, max_line_bytes) == whole
    return whole


DEFAULT_RULES = NameRules()


def run(data: bytes, rules: NameRules = DEFAULT_RULES, max_line_bytes: int = 1024) -> list[Outcome]:
    """Everything a connection sending ``data`` would be answered about, in order."""
    outcomes: list[Outcome] = []
    for item in split_lines(data, max_line_bytes):
        if isinstance(item, str):
            outcomes.append(item)
            continue
        try:
            outcomes.append(parse_command(item, rules))
        except BadRequestError as exc:
            outcomes.append(exc.message)
    return outcomes


def put(metric: str, timestamp: int, value: int | float, **tags: str) -> PutCommand:
    return PutCommand(DataPoint(metric, timestamp, value, tuple(sorted(tags.items()))))


# --- LineBuffer -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        pytest.param(b"a\n", [b"a"], id="lf"),
        pytest.param(b"a\r\n", [b"a"], id="crlf"),
        pytest.param(b"a\nb\r\nc\n", [b"a", b"b", b"c"], id="mixed_terminators"),
        pytest.param(b"\n\r\n", [b"", b""], id="empty_lines"),
        pytest.param(b"a\rb\n", [b"a\rb"], id="inner_cr_kept"),
        pytest.param(b"a\r\r\n", [b"a\r"], id="only_one_cr_dropped"),
        pytest.param(b"\r", [], id="lone_cr_waits"),
        pytest.param(b"abc", [], id="no_newline_yet"),
        pytest.param(b"\xff\x00 \t\n", [b"\xff\x00 \t"], id="any_bytes"),
    ],
)
def test_line_buffer_splits_lines(data: bytes, lines: list[bytes]) -> None:
    assert split_lines(data) == lines


def test_line_buffer_accepts_a_line_of_exactly_the_limit() -> None:
    line = b"x" * 16
    assert split_lines(line + b"\n", max_line_bytes=16) == [line]
    assert split_lines(line + b"\r\n", max_line_bytes=16) == [line]


TOO_LONG_16 = "error: line too long: more than 16 bytes; line discarded"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"x" * 17 + b"\nnext\n", id="one_over"),
        pytest.param(b"x" * 17 + b"\r\nnext\n", id="one_over_crlf"),
        pytest.param(b"x" * 18 + b"\nnext\n", id="two_over"),
        pytest.param(b"x" * 1000 + b"\nnext\n", id="far_over"),
        pytest.param(b"x" * 16 + b"\r\r\nnext\n", id="cr_counts_when_not_last"),
    ],
)
def test_line_buffer_reports_a_long_line_once_and_goes_on(data: bytes) -> None:
    assert split_lines(data, max_line_bytes=16) == [TOO_LONG_16, b"next"]


def test_line_buffer_keeps_memory_bounded_while_discarding() -> None:
    buffer = LineBuffer(64)
    errors = 0
    for _ in range(1000):
        buffer.feed(b"y" * 1000)
        try:
            assert buffer.maybe_next_line() is None
        except BadRequestError:
            errors += 1
        assert len(buffer) <= 65
    buffer.feed(b"tail\nput m 1 1 k=v\n")
    assert buffer.maybe_next_line() == b"put m 1 1 k=v"
    assert errors == 1


def test_line_buffer_take_lines_keeps_memory_bounded_while_discarding() -> None:
    buffer = LineBuffer(64)
    taken: list[bytes | None] = []
    for _ in range(1000):
        buffer.feed(b"y" * 1000)
        taken += buffer.take_lines()
        assert len(buffer) <= 65
    buffer.feed(b"tail\nput m 1 1 k=v\nnext")
    taken += buffer.take_lines()
    assert taken == [None, b"put m 1 1 k=v"]


def test_line_buffer_refuses_a_zero_limit() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineBuffer(0)


# --- put: accepted --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "command"),
    [
        pytest.param(b"put m 1 2 k=v", put("m", 1, 2, k="v"), id="minimal"),
        pytest.param(b"put m 1 -2 k=v", put("m", 1, -2, k="v"), id="negative_int"),
        pytest.param(b"put m 1 +2 k=v", put("m", 1, 2, k="v"), id="plus_int"),
        pytest.param(b"put m 1 2.5 k=v", put("m", 1, 2.5, k="v"), id="float"),
        pytest.param(b"put m 1 1.0 k=v", put("m", 1, 1.0, k="v"), id="float_with_zero"),
        pytest.param(b"put m 1 1e3 k=v", put("m", 1, 1000.0, k="v"), id="exponent_is_float"),
        pytest.param(b"put m 1 1E-7 k=v", put("m", 1, 1e-7, k="v"), id="upper_exponent"),
        pytest.param(
            b"put m 1 9223372036854775807 k=v", put("m", 1, 2**63 - 1, k="v"), id="long_max"
        ),
        pytest.param(
            b"put m 1 -9223372036854775808 k=v", put("m", 1, -(2**63), k="v"), id="long_min"
        ),
        pytest.param(
            b"put m 1234567890.123 1 k=v", put("m", 1234567890123, 1, k="v"), id="dotted_ms"
        ),
        pytest.param(
            b"put m 1234567890.5 1 k=v", put("m", 12345678905, 1, k="v"), id="dot_just_removed"
        ),
        pytest.param(b"put m 1.2.3 1 k=v", put("m", 123, 1, k="v"), id="every_dot_removed"),
        pytest.param(b"put m 4294967295 1 k=v", put("m", 4294967295, 1, k="v"), id="seconds_max"),
        pytest.param(b"put m 9999999999999 1 k=v", put("m", 9999999999999, 1, k="v"), id="ms_max"),
        pytest.param(
            b"put m 1 1 b=2 a=1 c=3", put("m", 1, 1, a="1", b="2", c="3"), id="tags_sorted"
        ),
        pytest.param(b"put m 1 1 k=v k=v", put("m", 1, 1, k="v"), id="repeated_same_tag"),
        pytest.param(b"put m 1 1 k=v  ", put("m", 1, 1, k="v"), id="trailing_spaces"),
        pytest.param(b"put m 1 1  a=1   b=2", put("m", 1, 1, a="1", b="2"), id="double_spaces"),
        pytest.param(
            b"put m 1 1 " + b" ".join(b"k%d=v" % i for i in range(8)),
            put("m", 1, 1, **{f"k{i}": "v" for i in range(8)}),
            id="eight_tags",
        ),
        pytest.param(b"put \xb5s 1 1 k=\xe9", put("µs", 1, 1, k="é"), id="latin1_letters"),
        pytest.param(b"put m 1 1 k=v\r", put("m", 1, 1, k="v"), id="cr_from_crlf"),
    ],
)
def test_put_parses(line: bytes, command: PutCommand) -> None:
    assert run(line + b"\n") == [command]


def test_put_allows_configured_special_chars() -> None:
    rules = NameRules(special_chars="$:")
    assert run(b"put a$b 1 1 k:=v$\n", rules) == [put("a$b", 1, 1, **{"k:": "v$"})]


def test_put_honours_configured_max_tags() -> None:
    assert run(b"put m 1 1 a=1 b=2\n", NameRules(max_tags=1)) == [
        "put: illegal argument: Too many tags: 2 maximum allowed: 1, tags: {a=1, b=2}"
    ]


# --- put: refused, with OpenTSDB's reply line -----------------------------------------------

NINE_TAGS = b" ".join(b"%c=%d" % (c, i) for i, c in enumerate(b"abcdefghi"))


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        pytest.param(b"put", "not enough arguments (need least 4, got 0)", id="bare_put"),
        pytest.param(b"put m 1 2", "not enough arguments (need least 4, got 3)", id="no_tags"),
        pytest.param(b"put m 1", "not enough arguments (need least 4, got 2)", id="two_words"),
        pytest.param(b"put  m 1 2 k=v", "empty metric name", id="double_space_before_metric"),
        pytest.param(b"put m 0 1 k=v", "invalid timestamp: 0", id="zero_timestamp"),
        pytest.param(b"put m -5 1 k=v", "invalid timestamp: -5", id="negative_timestamp"),
        pytest.param(b"put m 0.0 1 k=v", "invalid timestamp: 0", id="dotted_zero"),
        pytest.param(b"put m 1  k=v x=y", "empty value", id="double_space_before_value"),
        pytest.param(b"put m 1 1 foo", "invalid tag: foo", id="tag_without_equals"),
        pytest.param(b"put m 1 1 =v", "invalid tag: =v", id="tag_empty_key"),
        pytest.param(b"put m 1 1 k=", "invalid tag: k=", id="tag_empty_value"),
        pytest.param(b"put m 1 1 k=v=w", "invalid tag: k=v=w", id="tag_two_equals"),
        pytest.param(b"put m 1 1 k=v k=w", "duplicate tag: k=w, tags={k=v}", id="duplicate_tag"),
        pytest.param(b"put m 1 x foo", "invalid tag: foo", id="tags_checked_before_value"),
        pytest.param(
            b"put m 1 1 ", "Need at least one tag (metric=m, tags={})", id="trailing_space_no_tag"
        ),
        pytest.param(
            b"put m 1 1  ", "Need at least one tag (metric=m, tags={})", id="only_empty_words"
        ),
        pytest.param(
            b"put m 1 1e400 k=v",
            "value is NaN or Infinite: Infinity for metric=m timestamp=1",
            id="float_overflow",
        ),
        pytest.param(
            b"put m 1 -1e400 k=v",
            "value is NaN or Infinite: -Infinity for metric=m timestamp=1",
            id="negative_float_overflow",
        ),
        pytest.param(
            b"put m 10000000000000 1 k=v",
            "bad timestamp=10000000000000 when trying to add value=[1]/0 to metric=m, tags={k=v}",
            id="timestamp_over_13_digits",
        ),
        pytest.param(
            b"put m 10000000000000 0.5 k=v",
            "bad timestamp=10000000000000 when trying to add value=[63, 0, 0, 0]/11"
            " to metric=m, tags={k=v}",
            id="bad_timestamp_shows_float_bytes",
        ),
        pytest.param(
            b"put m 10000000000000 1e400 k=v",
            "value is NaN or Infinite: Infinity for metric=m timestamp=10000000000000",
            id="nan_check_before_timestamp_range",
        ),
        pytest.param(
            b"put m 10000000000000 1 " + NINE_TAGS,
            "bad timestamp=10000000000000 when trying to add value=[1]/0 to metric=m, tags="
            "{a=0, b=1, c=2, d=3, e=4, f=5, g=6, h=7, i=8}",
            id="timestamp_range_before_tag_count",
        ),
        pytest.param(
            b"put m 1 1 " + NINE_TAGS,
            "Too many tags: 9 maximum allowed: 8, tags: "
            "{a=0, b=1, c=2, d=3, e=4, f=5, g=6, h=7, i=8}",
            id="nine_tags",
        ),
        pytest.param(
            b"put a\xbcb 1 1 k=v",
            'Invalid metric name ("a¼b"): illegal character: ¼',
            id="latin1_non_letter_in_metric",
        ),
        pytest.param(
            b"put a$b 1 1 k=v", 'Invalid metric name ("a$b"): illegal character: $', id="dollar"
        ),
        pytest.param(
            b"put m 1 1 k$=v",
            'Invalid tag name with value [v] ("k$"): illegal character: $',
            id="bad_tag_key",
        ),
        pytest.param(
            b"put m 1 1 k=v\t",
            'Invalid tag value with key [k] ("v\t"): illegal character: \t',
            id="tab_is_not_a_separator",
        ),
        pytest.param(
            b"put m 1 1 zz$=1 a$=2",
            'Invalid tag name with value [2] ("a$"): illegal character: $',
            id="java_hash_order_picks_the_tag",
        ),
        pytest.param(
            b"put m 1 1 k=v\r\r",
            'Invalid tag value with key [k] ("v\r"): illegal character: \r',
            id="second_cr_kept",
        ),
        pytest.param(
            "put m 1 1 k=\u00b5\u00c2".encode("utf-8"),
            'Invalid tag value with key [k] ("\u00c2\u00b5\u00c3\u0082"): '
            "illegal character: \u0082",
            id="utf8_is_read_as_latin1",
        ),
    ],
)
def test_put_refuses_with_illegal_argument(line: bytes, reply: str) -> None:
    assert run(line + b"\n") == [f"put: illegal argument: {reply}"]


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        pytest.param(b"put m 12x 1 k=v", "Invalid character 'x' in 12x", id="timestamp_char"),
        pytest.param(b"put m x 1 foo", "Invalid character 'x' in x", id="timestamp_before_tags"),
        pytest.param(b"put m  1 k=v x=y", "Empty string", id="empty_timestamp_word"),
        pytest.param(b"put m . 1 k=v", "Empty string", id="timestamp_only_a_dot"),
        pytest.param(b"put m + 1 k=v", "Just a sign, no value: +", id="timestamp_only_sign"),
        pytest.param(b"put m 1e9 1 k=v", "Invalid character 'e' in 1e9", id="timestamp_exponent"),
        pytest.param(
            b"put m 99999999999999999999 1 k=v",
            "Value too long: 99999999999999999999",
            id="timestamp_20_digits",
        ),
        pytest.param(
            b"put m 9223372036854775808 1 k=v",
            "Overflow in 9223372036854775808",
            id="timestamp_overflow",
        ),
        pytest.param(b"put m 1 x k=v", "Invalid character 'x' in x", id="value_word"),
        pytest.param(b"put m 1 12x k=v", "Invalid character 'x' in 12x", id="value_suffix"),
        pytest.param(b"put m 1 NaN k=v", "Invalid character 'N' in NaN", id="nan"),
        pytest.param(b"put m 1 nan k=v", "Invalid character 'n' in nan", id="nan_lower"),
        pytest.param(b"put m 1 -nan k=v", "Invalid character 'n' in -nan", id="minus_nan"),
        pytest.param(b"put m 1 inf k=v", "Invalid character 'i' in inf", id="inf"),
        pytest.param(
            b"put m 1 Infinity k=v", "Invalid character 'I' in Infinity", id="java_infinity"
        ),
        pytest.param(b"put m 1 0x10 k=v", "Invalid character 'x' in 0x10", id="hex"),
        pytest.param(b"put m 1 1_000 k=v", "Invalid character '_' in 1_000", id="underscore"),
        pytest.param(b"put m 1 1.2.3 k=v", 'For input string: "1.2.3"', id="two_dots"),
        pytest.param(b"put m 1 1e k=v", 'For input string: "1e"', id="bare_exponent"),
        pytest.param(
            b"put m 1 18446744073709551615 k=v",
            "Value too long: 18446744073709551615",
            id="unsigned_counter_above_2_63",
        ),
        pytest.param(
            b"put m 1 9223372036854775808 k=v",
            "Overflow in 9223372036854775808",
            id="just_above_long_max",
        ),
    ],
)
def test_put_refuses_with_invalid_value(line: bytes, reply: str) -> None:
    assert run(line + b"\n") == [f"put: invalid value: {reply}"]


# --- other commands -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "command"),
    [
        pytest.param(b"version", VersionCommand(), id="version"),
        pytest.param(b"version extra words", VersionCommand(), id="version_ignores_words"),
        pytest.param(b"stats", StatsCommand(), id="stats"),
        pytest.param(b"help", HelpCommand(), id="help"),
        pytest.param(b"dropcaches", DropCachesCommand(), id="dropcaches"),
        pytest.param(b"exit", ExitCommand(), id="exit"),
        pytest.param(b"diediedie", DieDieDieCommand(), id="diediedie"),
        pytest.param(b"", UnknownCommand(""), id="empty_line"),
        pytest.param(b" put m 1 1 k=v", UnknownCommand(""), id="leading_space"),
        pytest.param(b"Put m 1 1 k=v", UnknownCommand("Put"), id="case_sensitive"),
        pytest.param(b"VERSION", UnknownCommand("VERSION"), id="upper_case"),
        pytest.param(
            b"rollup 1h-sum m 1 1 k=v",
            RollupCommand(RollupPoint("m", 1, "1", {"k": "v"}, "1h", "sum", None, True)),
            id="rollup",
        ),
        pytest.param(
            b"histogram m 1 x k=v",
            HistogramCommand(("histogram", "m", "1", "x", "k=v")),
            id="histogram",
        ),
        pytest.param(b"version\t", UnknownCommand("version\t"), id="tab_is_part_of_word"),
        pytest.param(b"\xe9t\xe9", UnknownCommand("été"), id="latin1_word"),
    ],
)
def test_commands_dispatch_on_the_first_word(line: bytes, command: Command) -> None:
    assert run(line + b"\r\n") == [command]


def test_disabled_commands_are_unknown() -> None:
    read_only = telnet_command_names("ro", allow_diediedie=False)
    assert read_only == ("stats", "dropcaches", "version", "exit", "help")
    assert parse_command(b"put m 1 1 k=v", commands=read_only) == UnknownCommand("put")
    assert parse_command(b"diediedie", commands=read_only) == UnknownCommand("diediedie")
    assert parse_command(b"version", commands=read_only) == VersionCommand()


def test_command_names_follow_opentsdb_modes() -> None:
    assert telnet_command_names() == TELNET_COMMANDS
    assert telnet_command_names("wo") == TELNET_COMMANDS
    assert telnet_command_names("anything") == TELNET_COMMANDS
    assert "put" not in telnet_command_names("ro")
    assert "diediedie" not in telnet_command_names(allow_diediedie=False)


# --- replies --------------------------------------------------------------------------------


def test_help_lists_commands_with_a_trailing_space() -> None:
    assert format_help() == (
        b"available commands: stats dropcaches version exit help put rollup histogram diediedie \n"
    )
    assert format_help(("stats", "help")) == b"available commands: stats help \n"


def test_unknown_command_reply() -> None:
    assert format_unknown_command("foo") == b"unknown command: foo.  Try `help'.\n"
    assert format_unknown_command("") == b"unknown command: .  Try `help'.\n"
    assert format_unknown_command("\xe9") == "unknown command: \xe9.  Try `help'.\n".encode()


def test_version_has_opentsdb_two_line_shape() -> None:
    reply = format_version()
    first, second, rest = reply.split(b"\n")
    assert first == f"tsd {__version__} built at revision unknown (UNKNOWN)".encode()
    assert second == b"Built on unknown by unknown@unknown:unknown"
    assert rest == b""
    custom = format_version(short_revision="abc1234", repo_status="MINT", date="2026/01/01")
    assert custom.startswith(f"tsd {__version__} built at revision abc1234 (MINT)\n".encode())
    assert b"Built on 2026/01/01 by" in custom


def test_fixed_replies() -> None:
    assert format_drop_caches() == b"Caches dropped.\n"
    assert format_diediedie() == b"Cleaning up and exiting now.\n"


def test_error_reply_is_the_message_and_a_newline_in_utf8() -> None:
    error = BadRequestError(
        'put: illegal argument: Invalid metric name ("a¼"): illegal character: ¼'
    )
    assert format_error(error) == (
        b'put: illegal argument: Invalid metric name ("a\xc2\xbc"): illegal character: \xc2\xbc\n'
    )


# --- what real clients send (captures from clients.md) --------------------------------------


def test_collectd_write_tsdb_batch() -> None:
    # "put %s %.0f %s fqdn=%s %s %s\r\n": CRLF, two spaces when tsdb_tags is empty, and
    # unsigned COUNTERs and -nan/inf that reach the TSD; one 1428-byte write holds many lines.
    data = (
        b"put memory.used.memory 1795236716 110944256 fqdn=cd-test-host  env=test\r\n"
        b"put load.load.shortterm 1795236716 0.5703125 fqdn=cd-test-host  env=test\r\n"
        b"put cpu.idle.percent 1795236717 98.9847715736041 fqdn=cd-test-host  env=test\r\n"
        b"put cpu.0.cpu.user 1795236803 5407 fqdn=cd-test-host  \r\n"
        b"put if.octets.rx 1795236803 18446744073709551615 fqdn=cd-test-host  \r\n"
        b"put df.used 1795236803 1.23456789012346e+15 fqdn=cd-test-host  \r\n"
        b"put cpu.wait 1795236803 -nan fqdn=cd-test-host  \r\n"
        b"put cpu.steal 1795236803 inf fqdn=cd-test-host  \r\n"
        b"put memory.free.memory 1795236804 24067649536 fqdn=cd-test-host  env=test\r\n"
    )
    host = {"fqdn": "cd-test-host"}
    assert run(data) == [
        put("memory.used.memory", 1795236716, 110944256, env="test", **host),
        put("load.load.shortterm", 1795236716, 0.5703125, env="test", **host),
        put("cpu.idle.percent", 1795236717, 98.9847715736041, env="test", **host),
        put("cpu.0.cpu.user", 1795236803, 5407, **host),
        "put: invalid value: Value too long: 18446744073709551615",
        put("df.used", 1795236803, 1.23456789012346e15, **host),
        "put: invalid value: Invalid character 'n' in -nan",
        "put: invalid value: Invalid character 'i' in inf",
        put("memory.free.memory", 1795236804, 24067649536, env="test", **host),
    ]


def test_tcollector_batch_with_version_check_and_ms_timestamps() -> None:
    data = (
        b"version\n"
        b"put tcollector.reader.lines_collected 1795236835 4  env=test host=vm\n"
        b"put test.const 1795236834 42 dev=sda env=test host=vm\n"
        b"put test.float 1795236834 0.000 env=test host=vm\n"
        b"put test.ms 1795236834123 0 env=test host=vm\n"
    )
    tags = {"env": "test", "host": "vm"}
    assert run(data) == [
        VersionCommand(),
        put("tcollector.reader.lines_collected", 1795236835, 4, **tags),
        put("test.const", 1795236834, 42, dev="sda", **tags),
        put("test.float", 1795236834, 0.0, **tags),
        put("test.ms", 1795236834123, 0, **tags),
    ]


def test_potsdb_and_opentsdb_py_lines() -> None:
    data = (
        b"put potsdb.float 1795237078 0.1 dev=sda host=vm\n"
        b"put potsdb.tiny 1795237078 1e-07 dev=sda host=vm\n"
        b"put opentsdb.py 1795237078 17 host=vm\n"
    )
    assert run(data) == [
        put("potsdb.float", 1795237078, 0.1, dev="sda", host="vm"),
        put("potsdb.tiny", 1795237078, 1e-07, dev="sda", host="vm"),
        put("opentsdb.py", 1795237078, 17, host="vm"),
    ]


def test_telegraf_lines() -> None:
    # Fixed 6-decimal floats, uint64 beyond int64, and a trailing space when there are no tags.
    data = (
        b"put cpu_usage_idle 1795237078 99.500000 cpu=cpu-total host=vm\n"
        b"put net_bytes_recv 1795237078 12345678901234567890 host=vm interface=eth0\n"
        b"put big_float 1795237078 12345678901234567890.000000 host=vm\n"
        b"put no_tags 1795237078 1 \n"
    )
    assert run(data) == [
        put("cpu_usage_idle", 1795237078, 99.5, cpu="cpu-total", host="vm"),
        "put: invalid value: Value too long: 12345678901234567890",
        put("big_float", 1795237078, 12345678901234567890.0, host="vm"),
        "put: illegal argument: Need at least one tag (metric=no_tags, tags={})",
    ]


def test_long_line_does_not_end_the_stream() -> None:
    data = b"put m 1 1 k=" + b"v" * 2000 + b"\nput m 2 2 k=v\n"
    assert run(data) == [
        "error: line too long: more than 1024 bytes; line discarded",
        put("m", 2, 2, k="v"),
    ]
