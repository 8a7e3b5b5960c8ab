"""Telnet framing: received bytes in, typed items out (pure: no loop, no I/O).

One :class:`TelnetFramer` per connection turns what a socket read gave into the items the
daemon's one line loop (:mod:`tsd.server.telnet`) handles, whether the framer runs in the
daemon or in a telnet worker process (:mod:`tsd.server.worker_process`, which sends the
items over its channel as they are):

* puts of series known by their ref (the row-key templates in ``refs``, keyed by
  :func:`~tsd.protocol.telnet.put_line_key`) are encoded into the connection's own rows
  as they are typed (:func:`~tsd.protocol.telnet.take_known_puts_into`), and handed over
  sealed: ``seal(rows, points)`` makes the item (the write path's encoded part, which this
  pure module does not know);
* :class:`KnownPuts`: puts of series known by key only (``keys``: a worker remembers the
  keys of every put it parsed, the daemon resolves them), as columns;
* :class:`NewPuts`: a run of plain put lines of series not known here (a burst of new
  series), parsed into columns in one call (no object per line);
* :class:`ParsedPut`: a put parsed in full, with its key;
* :class:`CommandLine`: any other line (the daemon parses and runs its commands);
* :class:`EmptyLines`: a run of empty lines (each an unknown command ``""``);
* :class:`LineError`: a line refused by the parser, with OpenTSDB's reply.

Order is kept: a part is sealed before any command or error item (a reply comes after
every put before it). Puts of series known by ref go into the part ahead of later parsed
puts of other series, which order does not matter to.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

from tsd.codec import SeriesKey
from tsd.data_points import DataPoint, Tags
from tsd.errors import BadRequestError, PutLineError
from tsd.protocol.names import NameRules
from tsd.protocol.ref_table import RefTable
from tsd.protocol.telnet import (
    LineBuffer,
    PutCommand,
    format_error,
    line_too_long,
    parse_command,
    parse_plain_put,
    put_line_key,
    take_known_puts,
    take_known_puts_into,
    take_new_plain,
)

__all__ = [
    "FRAME_BYTES",
    "MAX_KEYS",
    "PART_DELAY_S",
    "PART_POINTS",
    "CommandLine",
    "EmptyLines",
    "KnownPuts",
    "LineError",
    "NewPuts",
    "ParsedPut",
    "TelnetFramer",
    "items_from_wire",
    "items_to_wire",
    "remember_key",
]

#: Keys remembered as valid puts before the memory is cleared; the daemon's map of the
#: same keys (a worker's) clears at the same count (both see the same first puts, in order).
MAX_KEYS = 1_000_000

#: A connection's encoded points are sealed into a part once this many are encoded ...
PART_POINTS = 16_384
#: ... or, by the caller's timer, this long after the first of them (a few reads' worth
#: under load: the writer's and the head's cost is per row of a part, so bigger parts cost
#: them less per point).
PART_DELAY_S = 0.01
#: :meth:`TelnetFramer.take_items` splits at most this many buffered bytes into lines at a
#: time (a daemon's connection may have megabytes buffered after reading was paused)
FRAME_BYTES = 128 * 1024

Part = TypeVar("Part")
#: a connection's encoded rows: row key -> qualifier -> value
Rows = dict[bytes, dict[bytes, bytes]]


class KnownPuts(NamedTuple):
    """Puts of series known by key (a put of each parsed in full before), not by ref."""

    keys: tuple[bytes, ...]
    timestamps: tuple[int, ...]
    values: tuple[int | float, ...]


class NewPuts(NamedTuple):
    """Plain put lines of series not known by ref, in a row (a burst of new series), as
    columns (:func:`~tsd.protocol.telnet.take_new_plain`): line ``i``'s
    :func:`put_line_key` and its point's fields."""

    keys: list[bytes]
    metrics: list[str]
    tags: list[Tags]
    timestamps: list[int]
    values: list[int | float]

    def point(self, at: int) -> DataPoint:
        """Line ``at``'s point."""
        return DataPoint(self.metrics[at], self.timestamps[at], self.values[at], self.tags[at])


class ParsedPut(NamedTuple):
    """A put line parsed in full, and its :func:`put_line_key`."""

    key: bytes
    point: DataPoint


class CommandLine(NamedTuple):
    """A line that is not a put (a command, or nothing known): the daemon parses it when
    it runs it, as the commands are its own (stats, dropcaches, rollup, ...)."""

    line: bytes


class EmptyLines(NamedTuple):
    """``lines`` empty lines in a row (OpenTSDB answers each: unknown command ``""``)."""

    lines: int


class LineError(NamedTuple):
    """A line the parser refused: OpenTSDB's reply (newline included), and whether it
    counts as an invalid value (else an illegal argument)."""

    reply: bytes
    invalid_value: bool


def remember_key(keys: dict[Any, Any], key: Any, value: Any) -> bool:
    """Add ``key`` (clearing past MAX_KEYS first); False when it was there. A worker and
    the daemon call this for the same keys in the same order, so their maps stay equal."""
    if key in keys:
        return False
    if len(keys) >= MAX_KEYS:
        keys.clear()
    keys[key] = value
    return True


def _refusal(error: BadRequestError) -> LineError:
    invalid = isinstance(error, PutLineError) and error.kind == PutLineError.INVALID_VALUE
    return LineError(format_error(error), invalid)


class TelnetFramer(Generic[Part]):
    """Frames and parses one connection's bytes into items (see the module's docstring).

    ``refs``: put_line_key -> row-key template of series whose puts are encoded here
    (read only). ``keys``: where keys of fully parsed puts are remembered (a worker's; None
    in the daemon, which resolves a parsed put's series itself). ``seal(rows, points)``:
    the item of encoded points; ``part_points``: seal once this many points are encoded
    (:meth:`frame` seals at the end of every read with 0).
    """

    __slots__ = (
        "_commands",
        "_keys",
        "_lines",
        "_max_line",
        "_next",
        "_new_runs",
        "_points",
        "_puts",
        "_refs",
        "_rows",
        "_rules",
        "_seal",
        "_seal_each_read",
        "_taken",
        "part_points",
    )

    def __init__(
        self,
        *,
        rules: NameRules,
        commands: Collection[str],
        max_line_bytes: int,
        refs: Mapping[Hashable, SeriesKey],
        seal: Callable[[Rows, int], Part],
        keys: dict[Any, Any] | None = None,
        part_points: int = 0,
    ) -> None:
        self._rules = rules
        self._commands = commands
        self._max_line = max_line_bytes
        self._puts = "put" in commands
        self._refs = refs
        self._keys = keys
        # the daemon's framer takes runs of new series' plain lines in one call (a
        # worker's remembers every parsed put's key: line by line)
        self._new_runs = keys is None and (isinstance(refs, dict) or type(refs) is RefTable)
        self._seal = seal
        self.part_points = part_points
        self._seal_each_read = part_points <= 0
        self._lines = LineBuffer(max_line_bytes)
        #: the lines of the last read, framed up to ``_next`` (take_items)
        self._taken: list[bytes | None] = []
        self._next = 0
        self._rows: Rows = {}
        self._points = 0

    @property
    def encoded(self) -> int:
        """Points encoded and not sealed yet."""
        return self._points

    def frame(self, data: bytes) -> list[Any]:
        """The items of every complete line buffered after ``data``, in order."""
        self._lines.feed(data)
        items: list[Any] = []
        lines = self._taken
        if self._next < len(lines):  # left by take_items: they come first
            self._frame_lines(lines, self._next, len(lines), items)
        lines = self._taken = self._lines.take_lines()
        self._next = len(lines)
        if lines:
            self._frame_lines(lines, 0, len(lines), items)
        if self._seal_each_read or self._points >= self.part_points:
            self.take_part(items)
        return items

    def feed(self, data: bytes) -> None:
        """Buffer ``data``, to be framed by :meth:`take_items`."""
        self._lines.feed(data)

    def take_items(self, max_lines: int) -> tuple[int, list[Any]]:
        """How many lines were framed, and the items of them: the next ``max_lines``
        complete lines buffered at most (so that a caller serving other clients too frames
        a flood of lines a slice at a time); no line when none complete is left. Puts of
        known series make no item until their part is sealed: lines framed without items
        mean more may follow."""
        lines, start = self._taken, self._next
        if start >= len(lines):
            lines = self._taken = self._lines.take_lines(FRAME_BYTES)
            start = 0
        end = min(len(lines), start + max_lines)
        self._next = end
        items: list[Any] = []
        if start < end:
            self._frame_lines(lines, start, end, items)
        if self._seal_each_read or self._points >= self.part_points:
            self.take_part(items)
        return end - start, items

    def take_part(self, items: list[Any]) -> None:
        """Append the points encoded so far as one sealed item to ``items``, if any."""
        if self._points:
            rows, points = self._rows, self._points
            self._rows, self._points = {}, 0
            items.append(self._seal(rows, points))

    def _frame_lines(
        self, lines: list[bytes | None], index: int, count: int, items: list[Any]
    ) -> None:
        """Frame ``lines[index:count]`` into ``items``."""
        refs, keys, puts = self._refs, self._keys, self._puts
        rules = self._rules
        while index < count:
            if puts:
                if refs:
                    limit = count - index
                    taken, _ = take_known_puts_into(lines, index, refs, self._rows, limit)
                    if taken:
                        index += taken
                        self._points += taken
                        continue
                if keys:
                    known: list[tuple[Any, int, int | float]] = []
                    index = take_known_puts(lines, index, keys, known, count - index)
                    if known:
                        # encoded points go first: a series known by key here may have
                        # points in the part (its ref forgotten since: evicted past
                        # tsd.core.series_cache.size), and a later point of a cell wins
                        self.take_part(items)
                        # columns: the daemon maps and zips them at C speed
                        keys_, stamps, values = zip(*known, strict=True)
                        items.append(KnownPuts(keys_, stamps, values))
                        continue
                if self._new_runs:
                    # a burst of new series: its plain lines parsed in one call, each
                    # after the points encoded before it (a later point of a cell wins)
                    self.take_part(items)
                    at = index
                    new = NewPuts([], [], [], [], [])
                    index = take_new_plain(lines, index, count - index, refs, rules.max_tags, *new)
                    if index > at:
                        items.append(new)
                        continue
            line = lines[index]
            index += 1
            if line is None:  # over tsd.rpc.telnet.max_line
                self.take_part(items)
                items.append(_refusal(line_too_long(self._max_line)))
                continue
            if not line:
                run = 1
                while index < count and lines[index] == b"":
                    run += 1
                    index += 1
                self.take_part(items)
                items.append(EmptyLines(run))
                continue
            if puts:
                if (plain := parse_plain_put(line, rules)) is not None:
                    point, key = plain
                    if keys is not None:
                        remember_key(keys, key, key)
                    # encoded points go first: this one may be of the same series (its
                    # ref forgotten meanwhile), and a later point of a cell wins
                    self.take_part(items)
                    items.append(ParsedPut(key, point))
                    continue
                if line.startswith(b"put "):
                    put = self._parse_put(line)
                    if type(put) is ParsedPut and keys is not None:
                        remember_key(keys, put.key, put.key)
                    self.take_part(items)  # as above; a reply comes after every put before it
                    items.append(put)
                    continue
            self.take_part(items)  # a command answers after every put before it
            items.append(CommandLine(line))

    def _parse_put(self, line: bytes) -> ParsedPut | LineError:
        try:
            command = parse_command(line, self._rules, self._commands)
        except BadRequestError as exc:
            return _refusal(exc)
        assert type(command) is PutCommand  # the line's first word is "put"
        return ParsedPut(put_line_key(line), command.point)


# -- the wire: items as plain tuples (a worker's channel) ----------------------------------------
# Pickle builds a NamedTuple through a Python call per item (some microseconds): a flood of
# lines would hold the daemon's loop for seconds. Plain tuples, tagged by kind, cost a tenth.

_KNOWN, _PARSED, _EMPTY, _ERROR, _COMMAND, _PART, _NEW = range(7)


def items_to_wire(items: list[Any]) -> list[tuple[Any, ...]]:
    """``items`` as plain tagged tuples (:func:`items_from_wire` makes them items again);
    any item of another type is a sealed part, itself a tuple."""
    wire: list[tuple[Any, ...]] = []
    append = wire.append
    for item in items:
        kind = type(item)
        if kind is ParsedPut:
            append((_PARSED, item.key, tuple(item.point)))
        elif kind is KnownPuts:
            append((_KNOWN, *item))
        elif kind is NewPuts:
            append((_NEW, *item))
        elif kind is CommandLine:
            append((_COMMAND, item.line))
        elif kind is EmptyLines:
            append((_EMPTY, item.lines))
        elif kind is LineError:
            append((_ERROR, *item))
        else:
            append((_PART, *item))
    return wire


def items_from_wire(
    wire: list[tuple[Any, ...]], part: Callable[..., Part]
) -> list[KnownPuts | NewPuts | ParsedPut | CommandLine | EmptyLines | LineError | Part]:
    """The items :func:`items_to_wire` was given (``part``: the parts' type)."""
    items: list[KnownPuts | NewPuts | ParsedPut | CommandLine | EmptyLines | LineError | Part] = []
    append = items.append
    for entry in wire:
        kind = entry[0]
        if kind == _PARSED:
            append(ParsedPut(entry[1], DataPoint(*entry[2])))
        elif kind == _KNOWN:
            append(KnownPuts(entry[1], entry[2], entry[3]))
        elif kind == _NEW:
            append(NewPuts(*entry[1:]))
        elif kind == _COMMAND:
            append(CommandLine(entry[1]))
        elif kind == _EMPTY:
            append(EmptyLines(entry[1]))
        elif kind == _ERROR:
            append(LineError(entry[1], entry[2]))
        else:
            append(part(*entry[1:]))
    return items
