"""``tsdb import FILE...``: load OpenTSDB's text import format through the daemon's write path.

The format (OpenTSDB ``src/tools/TextImporter.java``): one data point per line,
``metric timestamp value tagk=tagv ...``, which is a telnet ``put`` line without ``put``.
Each line is taken as the daemon's telnet takes a ``put`` line (the telnet put parser,
:func:`tsd.protocol.telnet.parse_put`, and for lines of series already seen its hot path,
:func:`~tsd.protocol.telnet.take_known_puts`) and handed to the daemon's ingest service
(:mod:`tsd.write.ingest`, with meta tracking wired as the daemon wires it), so a point is
typed, checked, encoded, batched and compacted exactly as if a collector had sent it. Where
OpenTSDB's importer has its own parsing, tsd follows its telnet parser instead: a
timestamp may contain dots (``1356998400.500`` is in milliseconds) and a decimal value
becomes a float32 only when that keeps it exact (the importer always stores float32).

Reading, as OpenTSDB's importer reads: text in UTF-8; lines end with ``\\n``, ``\\r\\n`` or
``\\r``; ``-`` is standard input; a ``.gz`` name is gunzipped, and so (beyond OpenTSDB) is
any file that starts with gzip's magic bytes.

Errors, as OpenTSDB's importer handles them: the first bad line (unparseable, or a new
metric while ``tsd.core.auto_create_metrics`` is off: pass ``--auto-metric``) stops the
import; ``--skip-errors`` reports it and goes on. Each is reported on stderr with its file
and line number: ``points.txt:12: illegal argument: invalid tag: x line=[...]``. The points
read before a stop are still written. Exit status 0 when every line was imported (or
skipped with ``--skip-errors``), 1 after a stop or when storage lost points.

Output: a progress bar on stderr while stderr is a terminal; on stdout one line per file
and a total, with OpenTSDB's wording: ``Total: imported 1000000 data points in 7.412s
(134916.4 points/s)``. A file's time covers reading, parsing and buffering its points; the
total also covers writing the last of them to storage (``sync``: the store holds every
point when the line is printed). Rows whose hour has closed are then compacted, as the
daemon does when it stops (within the writer's shutdown budget; rows left over stay
uncompacted, which every reader accepts), which the total does not include; on the
embedded store every row leaves the in-memory head as one compacted cell, and is counted
in ``Compacted N rows``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TextIO, cast

from tsd.config import Config
from tsd.data_points import DataPoint
from tsd.errors import PutLineError
from tsd.protocol.names import NameRules
from tsd.protocol.ref_table import RefTable
from tsd.protocol.telnet import TELNET_REF_CACHE, parse_put, put_line_key, take_known_puts
from tsd.stats import StatsRegistry
from tsd.storage_setup import rollup_setup
from tsd.tools.common import (
    add_store_options,
    name_rules,
    open_store,
    own_rollups,
    run_async,
    tool_config,
)
from tsd.write.ingest import IngestService, IngestSession, Put, RefPoint, Refused
from tsd.write.pipeline import WritePath

#: bytes read per block (a block is split into lines at once)
BLOCK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
#: seconds between progress bar updates
PROGRESS_EVERY_S = 0.2
#: characters of a bad line shown in its error report
SHOWN_LINE_CHARS = 200


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Gzipped files (.gz, or gzip's magic bytes) are read directly."
    add_store_options(parser, auto_metric=True)
    parser.add_argument(
        "--skip-errors",
        action="store_true",
        help="report bad lines and go on (default: stop at the first)",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE", help="files to import; - is stdin")


# -- reading ----------------------------------------------------------------------------------


class LineSource:
    """The lines of one file (plain or gzip), read in blocks, with the position read so far."""

    def __init__(self, path: str, stdin: BinaryIO | None = None) -> None:
        self.path = path
        raw: BinaryIO = stdin if stdin is not None and path == "-" else open(path, "rb")  # noqa: SIM115
        self._raw = raw
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
        compressed = path.endswith(".gz") or buffered.peek(2)[:2] == GZIP_MAGIC
        self._stream: io.BufferedIOBase = (
            gzip.GzipFile(fileobj=buffered) if compressed else buffered
        )
        try:
            self.size: int | None = os.fstat(raw.fileno()).st_size if path != "-" else None
        except (OSError, ValueError):
            self.size = None

    def position(self) -> int:
        """Bytes of the file (compressed, for gzip) consumed so far."""
        try:
            return self._raw.tell()
        except OSError:
            return 0

    def blocks(self, prefix: bytes = b"") -> Iterator[list[bytes]]:
        """Lists of complete lines (bytes), in order, split at Java's readLine line ends
        (LF, CRLF, CR), each starting with ``prefix``. Lines are not decoded here."""
        read = self._stream.read
        pending = b""  # the start of a line whose end is not read yet
        while True:
            data = read(BLOCK_BYTES)
            final = not data
            text = pending + data if pending else data
            held = b""
            if not final and text.endswith(b"\r"):  # maybe the first half of a CRLF
                text, held = text[:-1], b"\r"
            if b"\r" in text:
                text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if final:
                if text.endswith(b"\n"):
                    text = text[:-1]
                elif not text:
                    return
                yield _split(text, prefix)
                return
            cut = text.rfind(b"\n")
            if cut < 0:
                pending = text + held
                continue
            pending = text[cut + 1 :] + held
            yield _split(text[:cut], prefix)

    def close(self) -> None:
        self._stream.close()
        if self._raw is not sys.stdin.buffer:
            self._raw.close()


def _split(text: bytes, prefix: bytes) -> list[bytes]:
    if prefix:  # one pass over the block rather than a concatenation per line
        text = prefix + text.replace(b"\n", b"\n" + prefix)
    return text.split(b"\n")


# -- progress ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Progress:
    """A one-line progress bar redrawn on a terminal (stderr), at most every 0.2 s."""

    out: TextIO
    enabled: bool
    _next: float = 0.0
    _shown: bool = field(default=False)

    def update(self, source: LineSource, points: int, started: float) -> None:
        now = time.monotonic()
        if not self.enabled or now < self._next:
            return
        self._next = now + PROGRESS_EVERY_S
        elapsed = max(now - started, 1e-9)
        text = f"{source.path}: {points:,} points, {points / elapsed:,.0f} points/s"
        if source.size:
            done = min(1.0, source.position() / source.size)
            bar = "#" * int(done * 30)
            text = f"{source.path}: {done:6.1%} [{bar:<30}] {points:,} points, " + (
                f"{points / elapsed:,.0f} points/s"
            )
        self.out.write("\r\x1b[K" + text)
        self.out.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._shown = False


# -- importing --------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """Counts of an import so far."""

    points: int = 0
    bad_lines: int = 0
    stopped: bool = False


def report_bad_line(err: TextIO, path: str, lineno: int, reason: str, line: str) -> None:
    shown = line if len(line) <= SHOWN_LINE_CHARS else line[:SHOWN_LINE_CHARS] + "..."
    print(f"{path}:{lineno}: {reason} line=[{shown}]", file=err)


class _BadLine(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: what turns an import line into a telnet put line
PUT = b"put "


def _parse_line(line: bytes, rules: NameRules) -> DataPoint:
    """The telnet put parser on the line decoded as UTF-8, as OpenTSDB's importer reads
    files."""
    try:
        return parse_put(line.decode("utf-8", "replace").split(" "), rules)
    except PutLineError as exc:
        raise _BadLine(exc.without_command) from None


async def import_source(
    source: LineSource,
    ingest: IngestService,
    rules: NameRules,
    *,
    skip_errors: bool,
    progress: Progress,
    err: TextIO,
) -> Outcome:
    """Parse every line of ``source`` into ``ingest``; stops at the first bad line unless
    ``skip_errors``. Returns when the points are buffered (not necessarily stored).

    Each line becomes a telnet put line and takes the daemon's telnet path: runs of lines
    of series seen before are typed in bulk (:func:`tsd.protocol.telnet.take_known_puts`,
    which leaves every unusual or bad line to the full parser) and appended by ref, never
    more than the writer has room for; any other line is parsed on its own and appended
    once its series is resolved.
    """
    outcome = Outcome()
    started = time.monotonic()
    first_lineno = 1  # of the block's first line
    points = 0
    refs = ingest.ref_cache(TELNET_REF_CACHE, RefTable)
    refusals: list[Refused] = []
    session: IngestSession[None] = ingest.session(
        cache=refs, on_refused=lambda _tag, _point, refused: refusals.append(refused)
    )
    try:
        for lines in source.blocks(PUT):
            index, end = 0, len(lines)
            while index < end:
                await session.wait_room()
                known: list[RefPoint] = []
                index = take_known_puts(lines, index, refs, known, session.room())
                if known:
                    session.append_run(known)
                    points += len(known)
                    continue
                line = lines[index]
                index += 1
                try:
                    point = _parse_line(line, rules)
                    # one line at a time: its series resolved before the next line
                    refusals.clear()
                    while (taken := session.put(point, None, (put_line_key(line),))) is Put.BUSY:
                        await session.wait_lookup()
                    if taken is Put.QUEUED:
                        await session.settle()
                    if refusals:
                        raise _BadLine(refusals.pop().message)
                except _BadLine as bad:
                    progress.clear()  # the report goes on a line of its own
                    text = line[len(PUT) :].decode("utf-8", "replace")
                    report_bad_line(err, source.path, first_lineno + index - 1, bad.reason, text)
                    outcome.bad_lines += 1
                    if skip_errors:
                        continue
                    outcome.stopped = True
                    outcome.points = points
                    return outcome
                points += 1
            first_lineno += end
            progress.update(source, points, started)
    except (OSError, EOFError) as exc:  # unreadable, or a damaged or truncated gzip stream
        progress.clear()
        print(f"tsdb import: {source.path}: {exc}", file=err)
        outcome.stopped = True
    outcome.points = points
    return outcome


async def import_files(
    cfg: Config, paths: list[str], *, skip_errors: bool, out: TextIO, err: TextIO
) -> int:
    """Import ``paths`` in order through one Writer; prints the rate lines; the exit status."""
    registry = StatsRegistry()
    rules = name_rules(cfg)
    progress = Progress(err, enabled=err.isatty())
    total = Outcome()
    async with open_store(cfg) as store:
        # Wired as the daemon wires it: meta tracking (tsd.core.meta.*) sees each new series.
        write_path = WritePath.build(
            store.storage,
            store.uids,
            cfg,
            registry,
            logged=False,
            rollups=own_rollups(cfg),
            rollup_intervals=rollup_setup(cfg).intervals(),
        )
        await write_path.start()
        writer = write_path.writer
        started = time.monotonic()
        try:
            for path in paths:
                outcome = await _import_path(
                    path, write_path.ingest, rules, skip_errors, progress, out, err
                )
                total.points += outcome.points
                total.bad_lines += outcome.bad_lines
                if outcome.stopped:
                    total.stopped = True
                    break
            await writer.flush()  # every point is in storage from here
            elapsed = max(time.monotonic() - started, 1e-9)
            stored = total.points - _count(registry, "datapoints.dropped", "storage_errors")
            print(
                f"Total: imported {stored} data points in {elapsed:.3f}s"
                f" ({stored / elapsed:.1f} points/s)",
                file=out,
                flush=True,
            )
        finally:
            progress.clear()
            compacting = time.monotonic()
            await write_path.close()  # compacts the rows whose hour has closed
            compacting = time.monotonic() - compacting
    # rows compacted: by the compactor (HBase) or written out of the head as one compacted
    # cell each (embedded)
    rows = _count(registry, "compaction.count", "rows") + _count(registry, "head.flushed", "rows")
    if rows:
        print(f"Compacted {rows} rows in {compacting:.3f}s", file=out)
    if total.bad_lines:
        print(f"{total.bad_lines} bad line(s){'' if skip_errors else ': import stopped'}", file=err)
    if stored < total.points:
        print(f"storage failed to write {total.points - stored} data points", file=err)
    return 1 if total.stopped or stored < total.points else 0


def _count(registry: StatsRegistry, name: str, kind: str) -> int:
    return registry.counter(name, type=kind).value


async def _import_path(
    path: str,
    ingest: IngestService,
    rules: NameRules,
    skip_errors: bool,
    progress: Progress,
    out: TextIO,
    err: TextIO,
) -> Outcome:
    started = time.monotonic()
    try:
        source = LineSource(path, sys.stdin.buffer)
    except OSError as exc:
        print(f"tsdb import: {path}: {exc.strerror or exc}", file=err)
        return Outcome(stopped=True)
    try:
        outcome = await import_source(
            source, ingest, rules, skip_errors=skip_errors, progress=progress, err=err
        )
    finally:
        source.close()
    progress.clear()
    elapsed_ms = max(int((time.monotonic() - started) * 1000), 1)
    print(
        f"Processed {path} in {elapsed_ms} ms, {outcome.points} data points"
        f" ({outcome.points * 1000 / elapsed_ms:.1f} points/s)",
        file=out,
    )
    return outcome


def run(args: argparse.Namespace) -> int:
    for path in args.paths:
        if path != "-" and not os.path.isfile(path):
            print(f"tsdb import: {path}: no such file", file=sys.stderr)
            return 1
    cfg = tool_config(args)
    return run_async(
        import_files(
            cfg, list(args.paths), skip_errors=args.skip_errors, out=sys.stdout, err=sys.stderr
        )
    )
