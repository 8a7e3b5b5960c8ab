"""The telnet-style protocol: line framing, command parsing and reply texts.

Theory of operation (behaviour doc §0 "Telnet pipeline" and §2; OpenTSDB 2.4.1
``src/tsd/PipelineFactory.java``, ``WordSplitter.java``, ``RpcHandler.java``,
``RpcManager.java``, ``PutDataPointRpc.java`` importDataPoint/execute, ``src/core/Tags.java``):

* Framing. Lines end with ``\\n``, a ``\\r`` right before it is dropped. ``LineBuffer``
  remembers how far it has searched for ``\\n`` so bytes arriving one at a time are scanned
  once (the h11 ``_receivebuffer`` idea). OpenTSDB (its own ``src/tsd/LineBasedFrameDecoder``,
  limit 1024) *closes the connection* once more than 1024 bytes sit in its buffer without a
  newline, while a longer line that arrives whole with its newline passes: the outcome
  depends on TCP segmentation. tsd applies its limit (``tsd.rpc.telnet.max_line``) to every
  line however it arrives, discards a long line up to its newline without buffering it,
  reports it once as ``BadRequestError`` (``LINE_TOO_LONG``) and keeps the connection.
  An empty line is a command named ``""``, unknown, as in OpenTSDB.
* Words. A line is decoded as ISO-8859-1 and split on every single space, so double spaces
  make empty words (Tags.splitString). The first word picks the command, case-sensitively,
  through a dict. Commands other than ``put`` ignore their extra words.
* ``put <metric> <timestamp> <value> <k=v>...``, checked in OpenTSDB's order: word count
  (empty words count), empty metric, timestamp (every ``.`` removed, then the strict
  Tags.parseLong; ``1234567890.123`` is 1234567890123 ms), timestamp > 0, empty value, tags
  (empty words skipped), value typing (``tsd.codec.value.parse_value``), NaN/Infinite,
  timestamp range (``bad timestamp=`` above 9999999999999), tag count and names.
* Errors. Every failure raises ``BadRequestError`` whose message is exactly the line
  OpenTSDB writes back, without the newline; a refused put line raises its subclass
  ``PutLineError``, whose ``kind`` says which: ``put: illegal argument: ...`` for its
  IllegalArgumentException, ``put: invalid value: ...`` for its NumberFormatException (a
  bad timestamp is reported as an invalid *value* too, as OpenTSDB does).
* The hot path. ``LineBuffer.take_lines`` hands out every complete line of a read at once,
  and ``take_known_puts`` types runs of put lines of series already seen (same raw metric
  word and tag text as a line that parsed cleanly) without ``parse_command``: only their
  timestamp and value, in their usual forms; anything else stops the run and goes
  through the full parser, so every answer stays the one above.
* Commands. tsd registers ``stats dropcaches version exit help put diediedie`` in
  OpenTSDB's order (``put`` only in rw/wo mode, ``diediedie`` unless disabled). OpenTSDB
  also lists ``rollup`` and ``histogram``, which tsd does not implement, so they are
  unknown commands here and absent from ``help``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from sys import intern
from typing import Any, Final, NamedTuple, TypeVar, cast

import tsd.native as native
from tsd import __version__
from tsd.codec import SeriesKey
from tsd.codec.qualifier import ENCODER_TABLES, encode_points_into
from tsd.codec.value import encode_value, parse_value
from tsd.data_points import MAX_MS_TIMESTAMP, DataPoint, Tags
from tsd.errors import BadRequestError, IllegalValueError, NumberFormatError, PutLineError
from tsd.java_text import format_java_bytes
from tsd.protocol.names import (
    DEFAULT_NAME_RULES,
    PLAIN_NAME_CHARS,
    NameRules,
    check_metric_and_tags,
    format_java_map,
    is_plain_name,
    parse_tag,
)
from tsd.protocol.rollup_put import UNEXPECTED, RollupError, RollupPoint, parse_rollup_line
from tsd.protocol.telnet_words import metric_and_timestamp

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "LINE_TOO_LONG",
    "TELNET_COMMANDS",
    "TELNET_REF_CACHE",
    "Command",
    "DieDieDieCommand",
    "DropCachesCommand",
    "ExitCommand",
    "HelpCommand",
    "LineBuffer",
    "PutCommand",
    "StatsCommand",
    "UnknownCommand",
    "VersionCommand",
    "check_timestamp",
    "format_diediedie",
    "format_drop_caches",
    "format_error",
    "format_help",
    "format_unknown_command",
    "format_version",
    "line_too_long",
    "parse_command",
    "parse_put",
    "put_line_key",
    "take_known_puts",
    "take_known_puts_into",
    "take_new_plain",
    "telnet_command_names",
]

#: OpenTSDB's LineBasedFrameDecoder limit. tsd's default (config ``tsd.rpc.telnet.max_line``)
#: is larger; this is only the fallback for callers that pass nothing.
DEFAULT_MAX_LINE_BYTES: Final = 1024

# --- Framing ---------------------------------------------------------------------------------


class LineBuffer:
    """Accumulates received bytes and hands out complete lines, without their terminator.

    ``maybe_next_line()`` returns ``None`` when more bytes are needed. A line longer than
    ``max_line_bytes`` (terminator excluded, as Netty counts) raises ``BadRequestError``
    once; its bytes are dropped, including any that arrive later up to its newline, so the
    buffer never holds much more than one maximal line.
    """

    __slots__ = ("_data", "_discarding", "_max", "_searched")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
        self._max = max_line_bytes
        self._data = bytearray()
        self._searched = 0  # bytes of _data already known to hold no b"\n"
        self._discarding = False  # inside an over-long line, waiting for its newline

    def __len__(self) -> int:
        return len(self._data)

    def feed(self, data: bytes) -> None:
        self._data += data

    def maybe_next_line(self) -> bytes | None:
        data = self._data
        while True:
            end = data.find(b"\n", self._searched)
            if end < 0:
                self._no_newline_yet()
                return None
            self._searched = 0
            if self._discarding:  # the tail of a line already reported as too long
                self._discarding = False
                del data[: end + 1]
                continue
            length = end - 1 if end and data[end - 1] == 0x0D else end
            line = bytes(data[:length])
            # bytearray deletes from the front in O(1) (it keeps a start offset).
            del data[: end + 1]
            if length > self._max:
                raise line_too_long(self._max)
            return line

    def take_lines(self, max_bytes: int = 0) -> list[bytes | None]:
        """Every complete line buffered, in order, as :meth:`maybe_next_line` would hand
        them out one by one; a line over the limit is ``None`` in its place (reported once,
        as the BadRequestError of ``maybe_next_line`` is: see :func:`line_too_long`).
        ``max_bytes`` (when positive): only the complete lines within the first that many
        bytes, if there is one (a caller framing a slice at a time keeps its lines in the
        CPU's cache: splitting megabytes at once costs several times more per line).

        The usual case, whole lines of a sane length, costs a few C-level passes over the
        buffer (split, strip of the CRs), not a Python step per line.
        """
        data = self._data
        end = data.rfind(b"\n", 0, max_bytes) if 0 < max_bytes < len(data) else -1
        sliced = end >= 0  # complete lines may be left after it: checked by a later call
        if not sliced:
            end = data.rfind(b"\n")
        if end < 0 or self._discarding:
            return self._take_one_by_one()
        chunk = bytes(data[:end])
        del data[: end + 1]
        self._searched = 0
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
            if chunk[-1:] == b"\r":  # the last line's CR (its LF was cut off above)
                chunk = chunk[:-1]
        parts = chunk.split(b"\n")
        lines = cast("list[bytes | None]", parts)
        limit = self._max
        if len(chunk) > limit and max(map(len, parts)) > limit:
            lines = [None if len(line) > limit else line for line in parts]
        if sliced:
            return lines
        try:
            self._no_newline_yet()
        except BadRequestError:  # the unfinished line is already over the limit
            lines.append(None)
        return lines

    def _take_one_by_one(self) -> list[bytes | None]:
        lines: list[bytes | None] = []
        while True:
            try:
                line = self.maybe_next_line()
            except BadRequestError:
                lines.append(None)
                continue
            if line is None:
                return lines
            lines.append(line)

    def _no_newline_yet(self) -> None:
        data = self._data
        if self._discarding:
            data.clear()
            self._searched = 0
            return None
        # One byte of slack: a line of exactly max bytes may be waiting for "\n" after "\r".
        if len(data) > self._max + 1:
            data.clear()
            self._searched = 0
            self._discarding = True
            raise line_too_long(self._max)
        self._searched = len(data)
        return None


#: The reply to an over-long line (tsd's own: OpenTSDB closes the connection instead).
LINE_TOO_LONG: Final = "error: line too long: more than {max_line_bytes} bytes; line discarded"


def line_too_long(max_line_bytes: int) -> BadRequestError:
    return BadRequestError(LINE_TOO_LONG.format(max_line_bytes=max_line_bytes))


# --- Commands --------------------------------------------------------------------------------


class PutCommand(NamedTuple):
    """A put line, parsed (a NamedTuple: one per line, built without a frozen dataclass's
    ``object.__setattr__``)."""

    point: DataPoint


@dataclass(frozen=True, slots=True)
class RollupCommand:
    """A ``rollup`` line, parsed (its checks against the rollup config come when stored).
    None: a line OpenTSDB fails on with a runtime exception and answers nothing."""

    point: RollupPoint | None


@dataclass(frozen=True, slots=True)
class HistogramCommand:
    """A ``histogram`` line's words (checked when handled: the first check is whether
    histograms are configured, tsd.protocol.histogram_put.parse_histogram_line)."""

    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VersionCommand:
    pass


@dataclass(frozen=True, slots=True)
class StatsCommand:
    pass


@dataclass(frozen=True, slots=True)
class HelpCommand:
    pass


@dataclass(frozen=True, slots=True)
class DropCachesCommand:
    pass


@dataclass(frozen=True, slots=True)
class ExitCommand:
    pass


@dataclass(frozen=True, slots=True)
class DieDieDieCommand:
    pass


@dataclass(frozen=True, slots=True)
class UnknownCommand:
    """A first word that names no enabled command (may be empty: an empty line)."""

    name: str


Command = (
    PutCommand
    | RollupCommand
    | HistogramCommand
    | VersionCommand
    | StatsCommand
    | HelpCommand
    | DropCachesCommand
    | ExitCommand
    | DieDieDieCommand
    | UnknownCommand
)

_VERSION: Final = VersionCommand()
_STATS: Final = StatsCommand()
_HELP: Final = HelpCommand()
_DROP_CACHES: Final = DropCachesCommand()
_EXIT: Final = ExitCommand()
_DIEDIEDIE: Final = DieDieDieCommand()

_Parser = Callable[[list[str], NameRules], Command]


def _parse_put_command(words: list[str], rules: NameRules) -> Command:
    return PutCommand(parse_put(words, rules))


def _parse_rollup_command(words: list[str], rules: NameRules) -> Command:
    try:
        return RollupCommand(parse_rollup_line(words))
    except RollupError as exc:
        if exc.kind == UNEXPECTED:
            return RollupCommand(None)
        raise PutLineError(exc.kind, exc.message, "rollup") from None


#: Every command tsd implements, in OpenTSDB's registration order (the ``help`` order).
_PARSERS: Final[Mapping[str, _Parser]] = {
    "stats": lambda words, rules: _STATS,
    "dropcaches": lambda words, rules: _DROP_CACHES,
    "version": lambda words, rules: _VERSION,
    "exit": lambda words, rules: _EXIT,
    "help": lambda words, rules: _HELP,
    "put": _parse_put_command,
    "rollup": _parse_rollup_command,
    "histogram": lambda words, rules: HistogramCommand(tuple(words)),
    "diediedie": lambda words, rules: _DIEDIEDIE,
}

#: All command words, in ``help`` order.
TELNET_COMMANDS: Final[tuple[str, ...]] = tuple(_PARSERS)


def telnet_command_names(mode: str = "rw", allow_diediedie: bool = True) -> tuple[str, ...]:
    """The commands OpenTSDB registers for ``tsd.mode`` and ``tsd.no_diediedie``.

    ``put`` exists in ``rw`` and ``wo`` (and any unknown mode string, which OpenTSDB treats
    as ``rw``), not in ``ro``.
    """
    names = ["stats", "dropcaches", "version", "exit", "help"]
    if mode != "ro":
        names += ["put", "rollup", "histogram"]
    if allow_diediedie:
        names.append("diediedie")
    return tuple(names)


def parse_command(
    line: bytes,
    rules: NameRules = DEFAULT_NAME_RULES,
    commands: Collection[str] = TELNET_COMMANDS,
) -> Command:
    """Parse one line (without its terminator) into a command.

    ``commands`` is the set of enabled command words (see ``telnet_command_names``); other
    words give ``UnknownCommand``. Raises BadRequestError with OpenTSDB's reply line.
    """
    words = line.decode("iso-8859-1").split(" ")
    name = words[0]
    parser = _PARSERS.get(name)
    if parser is None or name not in commands:
        return UnknownCommand(name)
    return parser(words, rules)


#: A tag word that parse_tag and validate_string accept whatever the configuration.
_PLAIN_TAG: Final = re.compile(f"{PLAIN_NAME_CHARS}+={PLAIN_NAME_CHARS}+")


def _illegal(message: str) -> PutLineError:
    return PutLineError(PutLineError.ILLEGAL_ARGUMENT, message)


def _invalid_value(message: str) -> PutLineError:
    return PutLineError(PutLineError.INVALID_VALUE, message)


def parse_put(words: list[str], rules: NameRules = DEFAULT_NAME_RULES) -> DataPoint:
    """PutDataPointRpc.importDataPoint over the split words (``words[0]`` is ``put``)."""
    if len(words) < 5:
        raise _illegal(f"not enough arguments (need least 4, got {len(words) - 1})")
    metric, timestamp = metric_and_timestamp(words[1], words[2], "put")
    text = words[3]
    if not text:
        raise _illegal("empty value")
    tags: dict[str, str] = {}
    all_plain = True  # every tag word is k=v with names valid under any configuration
    try:
        for word in words[4:]:
            if _PLAIN_TAG.fullmatch(word) is not None:
                key, _, tagv = word.partition("=")
                old = tags.setdefault(intern(key), tagv)
                if old == tagv:
                    continue
            elif not word:
                continue
            else:
                all_plain = False
            parse_tag(tags, word)  # raises "invalid tag" / "duplicate tag", or adds it
    except BadRequestError as exc:
        raise _illegal(exc.message) from None
    try:
        value = parse_value(text, metric=metric, timestamp=timestamp)
    except NumberFormatError as exc:
        raise _invalid_value(exc.message) from None
    except IllegalValueError as exc:
        raise _illegal(exc.message) from None
    try:
        check_timestamp(metric, timestamp, value, tags)
        # The common case needs no per-name work: the words were checked above.
        if not (all_plain and 0 < len(tags) <= rules.max_tags and is_plain_name(metric)):
            check_metric_and_tags(metric, tags, rules)
    except BadRequestError as exc:
        raise _illegal(exc.message) from None
    # Metric and tag key names are interned: every series keeps its parsed names (the
    # ingest service's key of it), and a million series of one metric would otherwise
    # hold a million copies of the same few strings (~50 bytes each).
    return DataPoint(intern(metric), timestamp, value, tuple(sorted(tags.items())))


# the compiled helper (setup.py); without it every line takes parse_command
_c_parse_plain_put: Any = native.attribute("tsd.protocol._parse", "parse_plain_put")


def parse_plain_put(
    line: bytes, rules: NameRules = DEFAULT_NAME_RULES
) -> tuple[DataPoint, bytes] | None:
    """A put line of any series in the plain form collectors send, parsed as
    :func:`parse_put` parses it, with its :func:`put_line_key` (the key of
    :data:`TELNET_REF_CACHE`); None for every other line, to be parsed by
    :func:`parse_command` (errors included, so replies stay OpenTSDB's).

    Plain: ``put``, single spaces, a metric and 1 to ``rules.max_tags`` tags ``k=v`` of
    PLAIN_NAME_CHARS with distinct keys (names valid under any configuration, so no name
    rule applies), a timestamp and value in the forms :func:`take_known_puts` types. The
    compiled helper (``tsd/protocol/_parse.c``) does it in one pass: the line of a new
    series (a burst of them when collectors restart) costs about a third of the full
    parser's time."""
    if _c_parse_plain_put is None:
        return None
    return cast(
        "tuple[DataPoint, bytes] | None",
        _c_parse_plain_put(line, rules.max_tags, DataPoint),
    )


def python_take_new_plain(
    lines: list[bytes | None],
    start: int,
    limit: int,
    known: Mapping[Any, Any],
    max_tags: int,
    keys: list[bytes],
    metrics: list[str],
    tags: list[Tags],
    timestamps: list[int],
    values: list[int | float],
) -> int:
    """Consecutive plain put lines of series not in ``known`` (a burst of new series),
    from ``lines[start]``, at most ``limit``: each parsed by :func:`parse_plain_put` and
    appended as columns, its :func:`put_line_key` to ``keys`` and its point's fields to
    ``metrics``, ``tags``, ``timestamps`` and ``values`` (no object per line); the index
    of the first line it stops at (not a plain put, or of a known series). The
    specification of the compiled ``take_new_plain`` (``tsd/protocol/_parse.c``: a dict
    ``known``, a list of lines), which takes the run in one call; without it
    :func:`parse_plain_put` parses nothing, so neither does this."""
    rules = NameRules(max_tags=max_tags)
    end = min(len(lines), start + max(limit, 0))
    index = max(start, 0)
    while index < end:
        line = lines[index]
        plain = parse_plain_put(line, rules) if line else None
        if plain is None or plain[1] in known:
            break
        point, key = plain
        keys.append(key)
        metrics.append(point.metric)
        tags.append(point.tags)
        timestamps.append(point.timestamp)
        values.append(point.value)
        index += 1
    return index


take_new_plain: Callable[..., int] = native.attribute(
    "tsd.protocol._parse", "take_new_plain", python_take_new_plain
)


# --- The hot path: puts of known series -----------------------------------------------------
# A put line whose metric word and tag text (the bytes after the value) were seen in an
# earlier line that parsed cleanly stands for the same series: the split, the decoding and
# the tag rules give the same answer for the same bytes. Only its timestamp and value are
# new, and those are typed here in their usual forms only; anything else (and every error)
# is left to parse_command, so replies stay OpenTSDB's.

#: Decimal and exponent forms of a double that Java and Python read alike (with a '.' or
#: an 'e', so OpenTSDB types them as floats); '+', hex, suffixes and spaces are left out.
_PLAIN_FLOAT: Final = re.compile(
    rb"-?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|-?[0-9]+[eE][-+]?[0-9]+"
)
_DOUBLE_MAX: Final = 1.7976931348623157e308


_Series = TypeVar("_Series")

#: The name under which the ingest service keeps the keys :func:`take_known_puts` looks
#: series up by (the daemon's telnet and ``tsdb import`` share the form).
TELNET_REF_CACHE: Final = "telnet"


def put_line_key(line: bytes) -> bytes:
    """The key of a put line's series in :data:`TELNET_REF_CACHE`: its metric word and tag
    text (``line.split(b" ", 4)[1]`` and ``[4]``) joined by one space, for a line
    :func:`parse_put` accepted. A metric word has no space, so each key names one pair.
    One bytes object rather than a pair: a known line then costs one allocation and one
    hash, which the compiled helper (``series_words`` in ``tsd/protocol/_parse.c``) builds
    the same way."""
    _, metric, _, _, tags = line.split(b" ", 4)
    return metric + b" " + tags


# the compiled helper (setup.py); python_take_known_puts is its fallback and spec
_c_take_known_puts: Any = native.attribute("tsd.protocol._parse", "take_known_puts")
_c_take_known_into: Any = native.attribute("tsd.protocol._parse", "take_known_into")


_KeyTable: Any = native.attribute("tsd.protocol._parse", "KeyTable")


def _c_known(known: object) -> bool:
    """Whether the compiled parsers look series up in ``known``: a dict, or the compiled
    ref table (tsd.protocol.ref_table)."""
    return isinstance(known, dict) or (_KeyTable is not None and type(known) is _KeyTable)


def take_known_puts(
    lines: Sequence[bytes | None],
    start: int,
    known: Mapping[Any, _Series],
    out: list[tuple[_Series, int, int | float]],
    limit: int,
) -> int:
    """:func:`python_take_known_puts` (the specification), by the compiled helper
    (``tsd/protocol/_parse.c``) when it is built and the arguments are a list of lines, a
    dict of known series and a list out."""
    if _c_take_known_puts is not None and type(lines) is list and _c_known(known):
        return cast(int, _c_take_known_puts(lines, start, known, out, limit))
    return python_take_known_puts(lines, start, known, out, limit)


def take_known_puts_into(
    lines: list[bytes | None],
    start: int,
    known: Mapping[Any, SeriesKey],
    rows: dict[bytes, dict[bytes, bytes]],
    limit: int,
) -> tuple[int, int]:
    """:func:`take_known_puts` with the points encoded into ``rows`` (a writer batch's
    cells) as :func:`~tsd.codec.qualifier.encode_points_into` encodes them: in one pass
    by the compiled helper, without an object per point; (points taken, cells added)."""
    if _c_take_known_into is not None and type(lines) is list and _c_known(known):
        _, taken, added = _c_take_known_into(lines, start, known, rows, limit, *ENCODER_TABLES)
        return cast(int, taken), cast(int, added)
    points: list[tuple[SeriesKey, int, int | float]] = []
    python_take_known_puts(lines, start, known, points, limit)
    return len(points), encode_points_into(rows, points)


def python_take_known_puts(
    lines: Sequence[bytes | None],
    start: int,
    known: Mapping[Any, _Series],
    out: list[tuple[_Series, int, int | float]],
    limit: int,
) -> int:
    """Type the put lines of known series from ``lines[start:]``, at most ``limit`` of
    them, appending ``(series, timestamp, value)`` to ``out``; the index of the first line
    not taken (``len(lines)`` when all were).

    ``known`` maps :func:`put_line_key` to the series of a line that :func:`parse_put`
    accepted. A line is not taken when it is not such a put or its numbers are unusual:
    the caller parses it with :func:`parse_command` and carries on from the next one.
    Taken: a timestamp of 1 to 13 ASCII digits above 0 (always within OpenTSDB's range), an
    integer of up to 18 digits with an optional minus sign (always within a long), a plain
    decimal or exponent float that is finite; each typed exactly as :func:`parse_put` types
    it. ``None`` (a line over the limit, from :meth:`LineBuffer.take_lines`) is never
    taken.
    """
    get = known.get
    append = out.append
    is_float = _PLAIN_FLOAT.fullmatch
    index = start
    # Collectors send a whole round of series with one timestamp: type each text once.
    last_text = b" "  # no timestamp word has a space: the first line is always typed
    timestamp = 0
    value: int | float
    line: Any  # None (a line too long) fails the split below
    try:
        # Indexes, not a slice: a slice copies every line after ``start``, and the telnet
        # server calls this again after each line of a new series (a read of thousands).
        for position in range(start, min(len(lines), start + limit)):
            line = lines[position]
            # Inline, not a helper per line: a call per line costs a tenth of the whole line.
            command, metric, text, value_text, tags = line.split(b" ", 4)
            series = get(metric + b" " + tags)  # put_line_key, inline: no call per line
            if series is None or command != b"put":
                return index
            if text != last_text:
                if not text.isdigit() or len(text) > 13:
                    return index
                timestamp = int(text)
                if not timestamp:
                    return index
                last_text = text
            if value_text.isdigit():
                if len(value_text) > 18:
                    return index
                value = int(value_text)
            elif value_text[:1] == b"-" and value_text[1:].isdigit():
                if len(value_text) > 19:
                    return index
                value = int(value_text)
            elif is_float(value_text) is not None:
                value = float(value_text)
                if not -_DOUBLE_MAX <= value <= _DOUBLE_MAX:
                    return index
            else:
                return index
            append((series, timestamp, value))
            index += 1
    except (ValueError, AttributeError):  # fewer than 5 words; None (a line too long)
        return index
    return index


def check_timestamp(
    metric: str, timestamp: int, value: int | float, tags: Mapping[str, str | None]
) -> None:
    """TSDB.checkTimestampAndTags' range check: seconds up to 2**32-1, then ms up to 13 digits.

    Raises BadRequestError with OpenTSDB's IllegalArgumentException text, which shows the
    encoded value bytes and flags.
    """
    # OpenTSDB: refuse < 0, and ms (any of the high 32 bits set) above 13 digits.
    if 0 <= timestamp <= MAX_MS_TIMESTAMP:
        return
    flags, data = encode_value(value)
    kind = "negative " if timestamp < 0 else "bad"  # sic: "negative  timestamp" in OpenTSDB
    raise BadRequestError(
        f"{kind} timestamp={timestamp} when trying to add value={format_java_bytes(data)}"
        f"/{flags} to metric={metric}, tags={format_java_map(tags)}"
    )


# --- Replies ---------------------------------------------------------------------------------
# OpenTSDB writes replies through Netty's StringEncoder, i.e. the JVM's default charset
# (UTF-8 on Linux). Every function returns the exact bytes to write, newline included.


def _line(text: str) -> bytes:
    return (text + "\n").encode("utf-8", "replace")


def format_error(error: BadRequestError) -> bytes:
    """The reply line for a command that failed."""
    return _line(error.message)


def format_version(
    *,
    package: str = "tsd",
    version: str = __version__,
    short_revision: str = "unknown",
    repo_status: str = "UNKNOWN",
    date: str = "unknown",
    user: str = "unknown",
    host: str = "unknown",
    repo: str = "unknown",
) -> bytes:
    """The two lines of ``version`` (BuildData.revisionString and buildString's shape)."""
    return _line(f"{package} {version} built at revision {short_revision} ({repo_status})") + (
        _line(f"Built on {date} by {user}@{host}:{repo}")
    )


def format_help(commands: Collection[str] = TELNET_COMMANDS) -> bytes:
    """``available commands: `` then each command followed by a space (trailing space kept)."""
    return _line("available commands: " + "".join(f"{name} " for name in commands))


def format_unknown_command(name: str) -> bytes:
    return _line(f"unknown command: {name}.  Try `help'.")


def format_drop_caches() -> bytes:
    return _line("Caches dropped.")


def format_diediedie() -> bytes:
    return _line("Cleaning up and exiting now.")
