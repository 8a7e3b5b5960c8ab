"""TelnetProtocol: OpenTSDB's line protocol on an asyncio transport. Thin: parsing and reply
texts live in :mod:`tsd.protocol.telnet`, the write path behind :mod:`tsd.write.ingest`.

Each connection is a loop of frame -> parse -> ingest -> reply over one
:class:`~tsd.write.ingest.IngestSession`. The framing and parsing is one pure step,
:class:`~tsd.protocol.telnet_frame.TelnetFramer`: each read becomes typed items (puts of
known series encoded into a part, parsed puts, commands, refused lines), the same items
whether the framer runs here or in a telnet worker process (:mod:`tsd.server.worker_pool`).
One loop (:meth:`TelnetProtocol._run_items`) handles them, in order, without suspending
while every put is for a known series (a part, or a run by ref: one call each). A put for
a new series is queued for its lookup; a command after such puts, a full writer, or a
session whose lookups are all busy needs to await: reading is then paused and a task
carries on with the items left until none is, then resumes reading. So one connection
never holds more than what the kernel and one read gave us, and back-pressure from
storage reaches the client's socket.

Replies are flow-controlled (:class:`~tsd.server.flow.FlowControl`): when the client does
not read them and the transport's buffer passes its high-water mark, reading stops, and
line handling waits, until it has drained.

Lines that are not puts of known series (commands, refused lines, empty lines) cost a
parse and a reply each: their replies are gathered and written to the socket together
(``CORK_BYTES`` at a time, not a send per line), a run of empty lines is answered in one
step (OpenTSDB's ``unknown command: .  Try `help'.`` per line, as its framer hands an empty
line to the command lookup), and after ``LINE_BUDGET`` such lines the connection yields to
the event loop, so a client sending a million of them does not stall the others.

A client that closes right after its last line (Telegraf, potsdb) loses nothing: the
lines already received are handled before the connection is finished. A final line without
its newline is dropped, as OpenTSDB's framer drops it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import islice, repeat
from operator import attrgetter, is_not
from typing import Any, cast

from tsd.data_points import DataPoint, Tags
from tsd.errors import BadRequestError, PutLineError, TsdError
from tsd.log import TELNET, get_logger
from tsd.protocol import rollup_put
from tsd.protocol.histogram_put import HistogramCodecs, line_histogram, parse_histogram_line
from tsd.protocol.names import NameRules
from tsd.protocol.ref_table import RefTable
from tsd.protocol.telnet import (
    TELNET_REF_CACHE,
    Command,
    DieDieDieCommand,
    DropCachesCommand,
    ExitCommand,
    HelpCommand,
    HistogramCommand,
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
    parse_command,
    put_line_key,
)
from tsd.protocol.telnet_frame import (
    PART_DELAY_S,
    PART_POINTS,
    EmptyLines,
    KnownPuts,
    LineError,
    NewPuts,
    ParsedPut,
    TelnetFramer,
)
from tsd.server.flow import FlowControl
from tsd.server.listener import TrackedProtocol
from tsd.server.peer import is_loopback
from tsd.stats import StatsRegistry, format_lines
from tsd.uid.service import UidService
from tsd.wal.record import EncodedPart, seal_part
from tsd.write.histogram_store import HistogramCell
from tsd.write.ingest import IngestService, IngestSession, Put, RefusalKind, Refused, SeriesRef

log = get_logger(TELNET)

#: OpenTSDB's reply prefixes for put failures found after parsing (PutDataPointRpc).
UNKNOWN_METRIC = "put: unknown metric: "
HBASE_ERROR = "put: HBase error: "
#: tsd's prefix for the same failures on the embedded store (there is no HBase to blame).
STORAGE_ERROR = "put: storage error: "
UNEXPECTED = "put: Unexpected runtime exception: "
#: tsd's refusal of diediedie from a remote client (OpenTSDB has no such check).
DIEDIEDIE_REFUSED = "diediedie: refused: only allowed from the loopback interface"


@dataclass(frozen=True, slots=True)
class TelnetContext:
    """What every telnet connection of one daemon shares."""

    ingest: IngestService
    uids: UidService
    registry: StatsRegistry
    #: the extra tags of every ``stats`` line (``host=<name>``)
    stats_tags: tuple[tuple[str, str], ...]
    version_reply: bytes
    #: enabled commands (``telnet_command_names(mode, allow_diediedie)``)
    commands: tuple[str, ...]
    rules: NameRules
    #: the ``histogram`` command's codecs (None: histograms off)
    histogram_codecs: HistogramCodecs | None
    max_line_bytes: int
    return_errors: bool
    diediedie_loopback_only: bool
    request_shutdown: Callable[[], None]
    #: tsd.core.socket.timeout: close a connection idle this long (0 = never)
    idle_timeout_s: float = 0.0
    #: the prefix of storage failures: OpenTSDB's on HBase, ``STORAGE_ERROR`` embedded
    storage_error: str = HBASE_ERROR


#: Lines other than puts of known series one connection handles before it yields to the
#: event loop (other clients are served in between).
LINE_BUDGET = 2048
#: Lines framed at a time (a read's worth of puts; a slice of a flood of commands).
FRAME_LINES = 2048
#: Replies gathered before they are written to the socket (one send, not one per line).
CORK_BYTES = 64 * 1024
#: An empty line: the empty word is an unknown command; OpenTSDB's reply to it.
EMPTY_LINE = UnknownCommand("")
EMPTY_LINE_REPLY = format_unknown_command("")

#: Batches of UID lookups one connection runs at once (a burst of new series: the misses
#: of one socket read form one batch).
SLOW_PUT_WINDOW = 4


@dataclass(frozen=True, slots=True)
class _SlowPut:
    """A put whose series is not resolved yet, and the raw words its line is known by."""

    point: DataPoint
    alias: bytes


@dataclass(frozen=True, slots=True)
class _Barrier:
    """A command that must wait for the UID lookups of the puts before it."""

    command: Command


class _Yield:
    """The connection used up its ``LINE_BUDGET``: go round the event loop, then go on."""


_YIELD = _Yield()

#: a ParsedPut's point and key (as map takes them: a run's at C speed)
_point = attrgetter("point")
_key = attrgetter("key")


class _Settle:
    """Every item is handled, some puts wait for their series' lookups: wait for those."""


_SETTLE = _Settle()


class TelnetStats:
    """The counters the telnet side keeps (OpenTSDB's names)."""

    def __init__(self, registry: StatsRegistry) -> None:
        self.received = registry.counter("rpc.received", type="telnet")
        self.invalid_values = registry.counter("rpc.errors", type="invalid_values")
        self.illegal_arguments = registry.counter("rpc.errors", type="illegal_arguments")
        self.unknown_metrics = registry.counter("rpc.errors", type="unknown_metrics")
        self.exceptions = registry.counter("rpc.exceptions")
        # tsd's own, next to /api/put's: the ingest session counts the points it takes
        # and refuses into this pair, the protocol adds the lines it refuses.
        self.points = registry.counter("ingest.points", protocol="telnet")
        self.errors = registry.counter("ingest.errors", protocol="telnet")


def telnet_factory(context: TelnetContext) -> Callable[[], TelnetProtocol]:
    """A protocol factory for the listener; the counters are shared by all connections."""
    stats = TelnetStats(context.registry)
    return lambda: TelnetProtocol(context, stats)


class TelnetProtocol(TrackedProtocol):
    """One telnet connection."""

    def __init__(self, context: TelnetContext, stats: TelnetStats) -> None:
        self._context = context
        self._stats = stats
        self._refs = context.ingest.ref_cache(TELNET_REF_CACHE, RefTable)
        self._session: IngestSession[None] = context.ingest.session(
            cache=self._refs,
            window=SLOW_PUT_WINDOW,
            on_refused=self._refused,
            on_batch_failed=self._batch_failed if context.return_errors else None,
            protocol="telnet",
        )
        self._framer = TelnetFramer(
            rules=context.rules,
            commands=context.commands,
            max_line_bytes=context.max_line_bytes,
            refs=self._refs,
            seal=seal_part,
            part_points=PART_POINTS,
        )
        #: seals the points encoded ahead PART_DELAY_S after the first of them
        self._part_timer: asyncio.TimerHandle | None = None
        #: what was framed and not handled yet (here, or in a worker process)
        self._items: deque[Any] = deque()
        self._at = 0  # position in the run at the head of _items
        self._transport: asyncio.Transport | None = None
        self._flow: FlowControl | None = None
        self._peer = ""
        self._loopback = False
        self._task: asyncio.Task[None] | None = None
        self._exiting = False  # exit/diediedie/shutdown: no more lines
        self._eof = False
        self._lost = False
        self._loop = asyncio.get_running_loop()
        self._finished = self._loop.create_future()
        self._last_read = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._budget = LINE_BUDGET  # lines left before the next yield
        self._corked: list[bytes] | None = None  # replies gathered while handling lines
        self._corked_bytes = 0

    # -- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._flow = FlowControl(self._transport)
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else ""
        self._peer = f"{host}:{peer[1]}" if host else str(peer)
        self._loopback = is_loopback(host)
        if self._context.idle_timeout_s > 0:
            self._last_read = self._loop.time()
            self._idle_timer = self._loop.call_later(self._context.idle_timeout_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self._arrived(data, None)

    def _arrived(self, data: bytes, framed: list[Any] | None) -> None:
        """A read: its bytes (framed here as the loop gets to them), or the items a
        worker process framed of it."""
        if self._exiting:
            return
        self._last_read = self._loop.time()
        if framed is None:
            self._framer.feed(data)
        else:
            self._items.extend(framed)
        if self._task is None:
            self._handle_available()

    def _seal_part(self) -> None:
        """Hand the points encoded ahead to the loop now (the part's delay passed, or the
        connection ends)."""
        if self._part_timer is not None:
            self._part_timer.cancel()
            self._part_timer = None
        items: list[Any] = []
        self._framer.take_part(items)
        if items:
            self._items.extend(items)
            if self._task is None:
                self._handle_available()

    def eof_received(self) -> bool:
        self._eof = True
        self._seal_part()
        # While a task handles lines already read, keep the socket (half-closed) open.
        return self._task is not None

    def pause_writing(self) -> None:
        if self._flow is not None:
            self._flow.pause_writing()

    def resume_writing(self) -> None:
        if self._flow is not None:
            self._flow.resume_writing()

    @property
    def flow(self) -> FlowControl | None:
        return self._flow

    def connection_lost(self, exc: Exception | None) -> None:
        if self._flow is not None:
            self._flow.connection_lost()
        self._transport = None
        self._seal_part()  # what was read counts
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._lost = True
        self._transport = None
        self._maybe_finished()

    def _check_idle(self) -> None:
        """tsd.core.socket.timeout: close after that long without receiving anything."""
        timeout = self._context.idle_timeout_s
        idle_since = self._last_read
        if self._task is None and self._loop.time() - idle_since >= timeout:
            log.info("telnet.idle_timeout", peer=self._peer)
            self.close()
            return
        due = max(idle_since + timeout, self._loop.time() + 0.001)
        self._idle_timer = self._loop.call_at(due, self._check_idle)

    # -- graceful shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Handle what was received, then close (daemon shutdown)."""
        self._eof = True
        self._seal_part()
        if self._task is None and self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._finished)

    # -- line handling ------------------------------------------------------------------------

    def _handle_available(self) -> None:
        """Handle every complete line without suspending; hand over to a task if one must."""
        blocked = self._run_corked()
        if blocked is not None:
            if self._flow is not None:
                self._flow.hold()
            self._task = asyncio.get_running_loop().create_task(self._run_blocked(blocked))
        elif (self._eof or self._exiting) and self._transport is not None:
            self._transport.close()

    def _run_corked(self) -> _SlowPut | _Barrier | _Yield | _Settle | bool | None:
        """:meth:`_run_items` with its replies gathered (see ``CORK_BYTES``), on a fresh
        ``LINE_BUDGET``."""
        self._budget = LINE_BUDGET
        self._corked = []
        try:
            return self._run_items()
        finally:
            self._uncork()
            self._corked = None

    def _run_items(self) -> _SlowPut | _Barrier | _Yield | _Settle | bool | None:
        """Handle framed items (:mod:`tsd.protocol.telnet_frame`), whichever process framed
        them, until none is left (None), a put needs a lookup slot (a :class:`_SlowPut`),
        a command must wait for the lookups before it (a :class:`_Barrier`), the budget
        is used up (a :class:`_Yield`), or the writer is full or the client is not
        reading its replies (True).

        Encoded parts and runs of known series go to the session in one call each, runs
        at most as many points as the writer has room for; every other item is a line.
        """
        session, items = self._session, self._items
        received = self._stats.received
        flow = self._flow
        blocked: _SlowPut | _Barrier | _Yield | None
        while not self._exiting:
            if flow is not None and flow.writing_paused:
                return True
            if not items:
                if session.is_full():
                    return True
                framer = self._framer
                # no more lines than the writer has room for beside what is encoded ahead
                room = session.room() - framer.encoded
                taken, framed = framer.take_items(min(FRAME_LINES, room)) if room > 0 else (0, [])
                if room <= 0:
                    framer.take_part(framed)
                if framed:
                    items.extend(framed)
                    continue
                if taken:  # puts encoded ahead into the part: lines may be left
                    continue
                if framer.encoded and self._part_timer is None:
                    self._part_timer = self._loop.call_later(PART_DELAY_S, self._seal_part)
                # Puts queued for their series' lookups: reading waits for those (a
                # burst of new series is resolved a read at a time).
                return _SETTLE if session.has_pending() else None
            item = items[0]
            kind = type(item)
            if kind is EncodedPart:
                if session.is_full():
                    return True
                items.popleft()
                received.value += item.points
                self._took_part(item.points)
                session.append_part(item)
                continue
            if kind is KnownPuts:
                if session.is_full():
                    return True
                blocked = self._known_puts(item)
            elif kind is EmptyLines:
                blocked = self._empty_lines(item.lines)
            elif kind is NewPuts:
                blocked = self._new_puts(item)
            elif kind is ParsedPut:
                blocked = self._parsed_puts()
            else:
                items.popleft()
                received.value += 1
                if kind is LineError:
                    self._count_error(item.invalid_value)
                    self._write(item.reply)
                    blocked = None
                else:
                    blocked = self._command_line(item.line)
                self._budget -= 1
                if blocked is None and self._budget <= 0:
                    return _YIELD
            if blocked is not None:
                return blocked
        return None

    def _parsed_puts(self) -> _SlowPut | _Yield | None:
        """The parsed puts at the head of the items (a burst of new series' lines comes as
        a run of them), :meth:`_put` of each as the loop of :meth:`_run_items` would, in
        one call (:meth:`IngestSession.put_run`): until another item, the budget is spent,
        a put needs a lookup slot, or the client stops reading its replies."""
        items, flow = self._items, self._flow
        if flow is not None and flow.writing_paused:
            return None  # the caller's loop answers for it
        budget = self._budget
        run = list(islice(items, max(budget, 1)))
        others = list(map(is_not, map(type, run), repeat(ParsedPut)))
        if True in others:  # the run ends at the first item of another kind
            del run[others.index(True) :]
        metrics, stamps, values, tags = zip(*map(_point, run), strict=True)
        taken = self._session.put_run(metrics, tags, stamps, values, list(map(_key, run)))
        used = min(taken + 1, len(run))  # a put that found no lookup slot is taken out too
        if used == len(items):
            items.clear()
        else:
            for _ in range(used):
                items.popleft()
        self._stats.received.value += used
        self._budget = budget - used
        if taken < len(run):
            item = run[taken]
            return _SlowPut(item.point, item.key)
        return _YIELD if self._budget <= 0 else None

    def _new_puts(self, item: NewPuts) -> _SlowPut | _Yield | None:
        """A burst of new series' lines (columns from the framer), from ``_at``: as
        :meth:`_parsed_puts` takes a run of parsed puts, at most the budget left in one
        :meth:`IngestSession.put_run`, without an object per point."""
        flow = self._flow
        if flow is not None and flow.writing_paused:
            return None  # the caller's loop answers for it
        budget = self._budget
        start = self._at
        count = len(item.keys)
        stop = min(count, start + max(budget, 1))
        if start == 0 and stop == count:
            taken = self._session.put_run(*item[1:], item.keys)
        else:
            taken = self._session.put_run(
                item.metrics[start:stop],
                item.tags[start:stop],
                item.timestamps[start:stop],
                item.values[start:stop],
                item.keys[start:stop],
            )
        used = min(taken + 1, stop - start)  # a put that found no lookup slot is taken out too
        at = start + used
        if at >= count:
            self._items.popleft()
            self._at = 0
        else:
            self._at = at
        self._stats.received.value += used
        self._budget = budget - used
        if start + taken < stop:
            busy = start + taken
            return _SlowPut(item.point(busy), item.keys[busy])
        return _YIELD if self._budget <= 0 else None

    def _known_puts(self, item: KnownPuts) -> _SlowPut | None:
        """Puts of series a worker knows by key only: those the daemon knows by ref go
        by ref (at most what the writer has room for), the first it does not (its ref
        forgotten, or its first put still being resolved) goes as a parsed put."""
        session, refs = self._session, self._refs
        received = self._stats.received
        keys = item.keys
        start, count = self._at, len(keys)
        stop = min(count, start + session.room())
        found = list(map(refs.get, keys[start:stop]))
        try:
            taken = found.index(None)
        except ValueError:
            taken = len(found)
        if taken:
            end = start + taken
            received.value += taken
            known = cast(list[SeriesRef], found[:taken])
            stamps, values = item.timestamps[start:end], item.values[start:end]
            session.append_run(list(zip(known, stamps, values, strict=True)))
            self._learned(keys[start:end], known)
        at = start + taken
        if at >= count:
            self._items.popleft()
            self._at = 0
            return None
        if at == stop:  # the writer's room ran out: checked again by the caller
            self._at = at
            return None
        key = keys[at]
        self._at = at + 1
        received.value += 1
        metric, tags = self._series_of(key)
        return self._put(DataPoint(metric, item.timestamps[at], item.values[at], tags), key)

    def _empty_lines(self, count: int) -> _Barrier | _Yield | None:
        """Answer empty lines (unknown command ``""``) from the head of a run of
        ``count``: at most the budget left, in one write, or one line after the lookups
        before it."""
        left = count - self._at
        run = 1 if self._session.has_pending() else min(left, max(self._budget, 1))
        if run >= left:
            self._items.popleft()
            self._at = 0
        else:
            self._at += run
        self._stats.received.value += run
        self._budget -= run
        if run == 1 and self._session.has_pending():
            return _Barrier(EMPTY_LINE)
        self._write(EMPTY_LINE_REPLY * run)
        if self._budget <= 0:
            return _YIELD
        return None

    def _command_line(self, line: bytes) -> _SlowPut | _Barrier | None:
        """A line that is not a put the framer took: parsed and run (or answered)."""
        context = self._context
        try:
            command = parse_command(line, context.rules, context.commands)
        except BadRequestError as exc:
            self._count_error(isinstance(exc, PutLineError) and exc.kind == exc.INVALID_VALUE)
            self._write(format_error(exc))
            return None
        if type(command) is PutCommand:
            return self._put(command.point, put_line_key(line))
        if type(command) in (RollupCommand, HistogramCommand) or self._session.has_pending():
            # A rollup is checked and stored by awaiting; other commands answer after the
            # puts before them (tcollector's version probe then means "everything sent so
            # far is handled").
            return _Barrier(command)
        self._run_command(command)
        return None

    def _put(self, point: DataPoint, alias: bytes) -> _SlowPut | None:
        """A parsed put: buffered now or queued for its series' lookup, or a
        :class:`_SlowPut` when the session's lookups are all busy."""
        if self._session.put(point, None, (alias,)) is Put.BUSY:
            return _SlowPut(point, alias)
        return None

    # -- what a worker's connection adds (tsd.server.worker_pool.RemoteTelnet) --------------------

    def _took_part(self, points: int) -> None:
        """A part of ``points`` encoded points is being appended."""

    def _learned(self, keys: Sequence[Hashable], refs: list[SeriesRef]) -> None:
        """Puts of ``keys`` went by the daemon's refs (``refs``)."""

    def _series_of(self, key: Hashable) -> tuple[str, Tags]:
        """The metric and tags of a put known by ``key`` (a worker's :class:`KnownPuts`:
        the daemon's own framing makes none)."""
        raise LookupError(key)

    async def _run_blocked(self, first: _SlowPut | _Barrier | _Yield | _Settle | bool) -> None:
        """Handle lines that need awaiting (UID lookups run in the session's window)."""
        blocked: _SlowPut | _Barrier | _Yield | _Settle | bool | None = first
        session = self._session
        try:
            while blocked is not None:
                while blocked is not None:
                    if isinstance(blocked, _SlowPut):
                        await session.wait_lookup()
                        session.put(blocked.point, None, (blocked.alias,))
                    elif blocked is _YIELD:
                        await asyncio.sleep(0)
                    elif blocked is _SETTLE:
                        await session.settle()
                    elif isinstance(blocked, _Barrier):
                        await session.settle()
                        if isinstance(blocked.command, RollupCommand):
                            await self._run_rollup(blocked.command)
                        elif isinstance(blocked.command, HistogramCommand):
                            await self._run_histogram(blocked.command)
                        else:
                            self._run_command(blocked.command)
                    elif session.is_full():
                        await session.wait_room()
                    elif self._flow is not None and self._flow.writing_paused:
                        await self._flow.drain()
                    blocked = self._run_corked()
                await session.settle()
                # What arrived meanwhile (nothing here, reading is paused; a worker's
                # connection gets its next reads): handled before the task ends.
                blocked = self._run_corked()
        except Exception:
            self._stats.exceptions.inc()
            log.exception("telnet.crashed", peer=self._peer)
            self._exiting = True
        finally:
            self._task = None
        transport = self._transport
        if transport is None:
            self._maybe_finished()
        elif self._eof or self._exiting:
            transport.close()
        elif self._flow is not None:
            self._flow.release()

    def _refused(self, tag: None, point: DataPoint | None, refused: Refused) -> None:
        """OpenTSDB's reply to a put it could not take (PutDataPointRpc's errbacks)."""
        if refused.kind is RefusalKind.UNKNOWN_METRIC:
            self._stats.unknown_metrics.inc()
            self._write_line(UNKNOWN_METRIC + refused.message)
        elif refused.kind is RefusalKind.ILLEGAL_ARGUMENT:  # a name the store cannot hold
            self._stats.illegal_arguments.inc()
            self._stats.errors.inc()
            self._write_line(f"put: {PutLineError.ILLEGAL_ARGUMENT}: {refused.message}")
        elif self._context.return_errors:  # tsd.rpc.telnet.return_errors
            self._write_line(self._context.storage_error + refused.message)

    def _batch_failed(self, error: TsdError, points: int) -> None:
        """One line per failed batch (as OpenTSDB's PutErrback), naming how many of this
        connection's points it held: OpenTSDB's line alone hides a loss of thousands."""
        noun = "data point" if points == 1 else "data points"
        self._write_line(
            f"{self._context.storage_error}{error.message}: {points} {noun} not stored"
        )

    def _count_error(self, invalid_value: bool) -> None:
        """A line refused by the parser: an invalid value or an illegal argument."""
        self._stats.errors.inc()
        if invalid_value:
            self._stats.invalid_values.inc()
        else:
            self._stats.illegal_arguments.inc()

    # -- the other commands -------------------------------------------------------------------

    def _run_command(self, command: Command) -> None:
        context = self._context
        if isinstance(command, VersionCommand):
            self._write(context.version_reply)
        elif isinstance(command, StatsCommand):
            stats = context.registry.collect()
            self._write(format_lines(stats, int(time.time()), context.stats_tags).encode())
        elif isinstance(command, HelpCommand):
            self._write(format_help(context.commands))
        elif isinstance(command, DropCachesCommand):
            context.uids.drop_caches()
            context.ingest.drop_caches()
            self._write(format_drop_caches())
        elif isinstance(command, ExitCommand):
            self._exiting = True
        elif isinstance(command, DieDieDieCommand):
            self._diediedie()
        elif isinstance(command, UnknownCommand):
            self._write(format_unknown_command(command.name))

    async def _run_rollup(self, command: RollupCommand) -> None:
        """RollupDataPointRpc: store the point; a refusal is answered with OpenTSDB's line
        (failures in the write itself only with ``tsd.rpc.telnet.return_errors``)."""
        point = command.point
        if point is None:
            self._stats.exceptions.inc()
            return
        try:
            await self._session.put_cell(point)
        except rollup_put.RollupError as exc:
            if exc.kind == rollup_put.STORAGE:
                if self._context.return_errors:
                    self._write_line(f"rollup: HBase error: {exc.message}")
                return
            if exc.kind == rollup_put.UNKNOWN_METRIC:
                self._stats.unknown_metrics.inc()
            elif exc.kind == rollup_put.INVALID_VALUE:
                self._stats.invalid_values.inc()
            else:
                self._stats.illegal_arguments.inc()
            self._write_line(f"rollup: {exc.kind}: {exc.message}")

    async def _run_histogram(self, command: HistogramCommand) -> None:
        """HistogramDataPointRpc: the words' failures answer ``histogram: illegal argument``
        (or ``invalid value``); what fails afterwards OpenTSDB reports from its write
        callback, ``histogram: HBase error: <message>`` (with
        ``tsd.rpc.telnet.return_errors``)."""
        codecs = self._context.histogram_codecs
        try:
            line = parse_histogram_line(list(command.words), codecs is not None)
        except PutLineError as exc:
            self._count_error(exc.kind == PutLineError.INVALID_VALUE)
            self._write(format_error(exc))
            return
        assert codecs is not None
        try:
            histogram = line_histogram(line, codecs)
        except TsdError as exc:
            # OpenTSDB's errback parses the text form again to log the point, fails the
            # same way, and so never writes its reply: only the base64 form is answered.
            if line.codec_id is not None and self._context.return_errors:
                self._write_line(f"histogram: HBase error: {exc.message}")
            return
        try:
            await self._session.put_cell(
                HistogramCell(line.metric, line.timestamp, histogram, line.tags)
            )
        except TsdError as exc:
            if self._context.return_errors:
                self._write_line(f"histogram: HBase error: {exc.message}")

    def _diediedie(self) -> None:
        if self._context.diediedie_loopback_only and not self._loopback:
            log.warning("telnet.diediedie_refused", peer=self._peer)
            self._write_line(DIEDIEDIE_REFUSED)
            return
        log.warning("telnet.diediedie", peer=self._peer)
        self._write(format_diediedie())
        self._exiting = True
        self._context.request_shutdown()

    # -- output -------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        corked = self._corked
        if corked is None:
            self._send(data)
            return
        corked.append(data)
        self._corked_bytes += len(data)
        if self._corked_bytes >= CORK_BYTES:
            self._uncork()

    def _uncork(self) -> None:
        """Send the replies gathered so far (the transport may then pause writing)."""
        corked = self._corked
        if corked:
            self._send(corked[0] if len(corked) == 1 else b"".join(corked))
            corked.clear()
        self._corked_bytes = 0

    def _send(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _write_line(self, text: str) -> None:
        self._write((text + "\n").encode("utf-8", "replace"))

    def _maybe_finished(self) -> None:
        if self._lost and self._task is None and not self._finished.done():
            self._finished.set_result(None)
            if self.on_lost is not None:
                self.on_lost(self)
