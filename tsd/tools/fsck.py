"""``tsdb fsck``: check the data table for corrupt rows and cells, and fix them (OpenTSDB's Fsck).

    tsdb fsck [flags] --full-scan
    tsdb fsck [flags] START-DATE [END-DATE] QUERY [QUERIES...]

Each row of the scan is checked as OpenTSDB 2.4.1 checks it: its key (length; metric
and tag UIDs that resolve), each cell's qualifier (unknown columns, annotations, appends,
objects of a future version), compacted columns that do not decode or are out of order,
points written twice for one timestamp, values whose length disagrees with their
qualifier, floats stored on 8 bytes with a 4-byte flag, integers that would fit in fewer
bytes. Every finding is printed on stdout with OpenTSDB's message, then the counters of
its final report ("Key Values Processed: N", ..., "Total Errors Fixed: N").

Nothing is changed without ``--fix`` (or ``--fix-all``), and each kind of deletion needs
its own flag as in OpenTSDB: ``--delete-bad-rows``, ``--delete-orphans``,
``--delete-unknown-columns``, ``--delete-bad-values``, ``--delete-bad-compacts``,
``--resolve-duplicates`` (keeping the first stored, or the last with
``--last-write-wins``). ``--fix`` alone rewrites 8-byte floats flagged as 4 bytes and
integers on more bytes than they need (VLE).

Departures: tsd's storage keeps no cell write times, so duplicates are ordered by storage
(qualifier) order instead of write time, and cells print as ``KeyValue(key=..., family=...,
qualifier=..., value=...)`` without a timestamp; ``--compact`` (rewrite rows compacted) is
not offered, so a duplicate inside a compacted column is reported but not fixed;
``--threads`` and ``--sync`` are accepted and ignored (one scan, every fix awaited).
Exit status: 0 when no error was found, 1 when some were (fixed or not), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import struct
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TextIO

from tsd.codec import KeyLayout, decode_row_key, is_append_qualifier, is_ms_qualifier
from tsd.codec.compaction import split_cell
from tsd.codec.tsuid import uid_to_hex
from tsd.config import Config
from tsd.errors import IllegalDataError, NoSuchUniqueId, UsageError
from tsd.java_text import format_java_bytes, java_double_to_string
from tsd.protocol.cli_query import USAGE, parse_cli_query
from tsd.query.engine import QueryEngine
from tsd.storage.base import Cell, Delete, Put, Row, ScanSpec
from tsd.tools import status
from tsd.tools.common import ToolStore, add_store_options, open_store, run_async, tool_config
from tsd.tools.query import cli_queries

__all__ = ["Counters", "FsckOptions", "configure", "fsck", "run"]

#: Annotation.PREFIX: the first byte of an annotation's qualifier
ANNOTATION_PREFIX = 0x01
#: Const.MS_MIXED_COMPACT: the largest meta byte a compacted column may end with
MS_MIXED_COMPACT = 1
FLAG_FLOAT = 0x8
LENGTH_MASK = 0x7

DELETE_FLAGS = (
    ("resolve_duplicates", "keep the first stored duplicate (the last: --last-write-wins)"),
    ("delete_orphans", "delete rows whose metric or tag UIDs do not resolve"),
    ("delete_unknown_columns", "delete columns that do not belong to OpenTSDB"),
    ("delete_bad_values", "delete single-point columns with bad values"),
    ("delete_bad_rows", "delete rows with invalid keys"),
    ("delete_bad_compacts", "delete compacted columns that cannot be parsed"),
)


@dataclass(frozen=True, slots=True)
class FsckOptions:
    """What to fix (FsckOptions): ``fix`` gates every change."""

    fix: bool = False
    resolve_duplicates: bool = False
    last_write_wins: bool = False
    delete_orphans: bool = False
    delete_unknown_columns: bool = False
    delete_bad_values: bool = False
    delete_bad_rows: bool = False
    delete_bad_compacts: bool = False


@dataclass(slots=True)
class Counters:
    """Fsck's counters, in the order of its report (label, attribute)."""

    kvs_processed: int = 0
    rows_processed: int = 0
    valid_datapoints: int = 0
    annotations: int = 0
    bad_key: int = 0
    bad_key_fixed: int = 0
    duplicates: int = 0
    duplicates_fixed: int = 0
    orphans: int = 0
    orphans_fixed: int = 0
    future: int = 0
    unknown: int = 0
    unknown_fixed: int = 0
    bad_values: int = 0
    bad_values_deleted: int = 0
    value_encoding: int = 0
    value_encoding_fixed: int = 0
    bad_compacted_columns: int = 0
    bad_compacted_columns_deleted: int = 0
    vle: int = 0
    vle_fixed: int = 0
    vle_bytes: int = 0
    append_dps: int = 0
    fixable_compacted_columns: int = 0

    def total_errors(self) -> int:
        return (
            self.bad_key
            + self.duplicates
            + self.orphans
            + self.unknown
            + self.bad_values
            + self.bad_compacted_columns
            + self.fixable_compacted_columns
            + self.value_encoding
        )

    def total_fixed(self) -> int:
        return (
            self.bad_key_fixed
            + self.duplicates_fixed
            + self.orphans_fixed
            + self.unknown_fixed
            + self.value_encoding_fixed
            + self.bad_values_deleted
        )

    def report(self) -> list[str]:
        """Fsck.logResults's lines (the duration line left out)."""
        return [
            f"Key Values Processed: {self.kvs_processed}",
            f"Rows Processed: {self.rows_processed}",
            f"Valid Datapoints: {self.valid_datapoints}",
            f"Annotations: {self.annotations}",
            f"Invalid Row Keys Found: {self.bad_key}",
            f"Invalid Rows Deleted: {self.bad_key_fixed}",
            f"Duplicate Datapoints: {self.duplicates}",
            f"Duplicate Datapoints Resolved: {self.duplicates_fixed}",
            f"Orphaned UID Rows: {self.orphans}",
            f"Orphaned UID Rows Deleted: {self.orphans_fixed}",
            f"Possible Future Objects: {self.future}",
            f"Unknown Objects: {self.unknown}",
            f"Unknown Objects Deleted: {self.unknown_fixed}",
            f"Unparseable Datapoint Values: {self.bad_values}",
            f"Unparseable Datapoint Values Deleted: {self.bad_values_deleted}",
            f"Improperly Encoded Floating Point Values: {self.value_encoding}",
            f"Improperly Encoded Floating Point Values Fixed: {self.value_encoding_fixed}",
            f"Unparseable Compacted Columns: {self.bad_compacted_columns}",
            f"Unparseable Compacted Columns Deleted: {self.bad_compacted_columns_deleted}",
            f"Datapoints Qualified for VLE : {self.vle}",
            f"Datapoints Compressed with VLE: {self.vle_fixed}",
            f"Bytes Saved with VLE: {self.vle_bytes}",
            f"Total Errors: {self.total_errors()}",
            f"Total Correctable Errors: {self.total_errors()}",
            f"Total Errors Fixed: {self.total_fixed()}",
        ]


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument("--full-scan", action="store_true", help="scan the entire data table")
    parser.add_argument("--fix", action="store_true", help="fix errors (with the flags below)")
    parser.add_argument("--fix-all", action="store_true", help="--fix and every flag below")
    for name, help_text in DELETE_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), action="store_true", help=help_text)
    parser.add_argument(
        "--last-write-wins", action="store_true", help="keep the last stored duplicate"
    )
    parser.add_argument("--threads", type=int, metavar="NUMBER", help="accepted, ignored")
    parser.add_argument("--sync", action="store_true", help="accepted (every fix is awaited)")
    parser.add_argument("words", nargs="*", metavar="WORD", help="a query, as for tsdb query")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "query words:\n  " + USAGE.replace("\n", "\n  ")


def options_from(args: argparse.Namespace) -> FsckOptions:
    every = bool(args.fix_all)
    picked = {name: every or bool(getattr(args, name)) for name, _ in DELETE_FLAGS}
    return FsckOptions(
        fix=every or bool(args.fix), last_write_wins=bool(args.last_write_wins), **picked
    )


def pretty(data: bytes) -> str:
    """asynchbase's Bytes.pretty: a quoted string with escapes, or the signed byte list
    when fewer than half the bytes are printable."""
    out = []
    ascii_count = 0
    for b in data:
        if 0x20 <= b <= 0x7E:
            ascii_count += 1
            out.append(chr(b))
        elif 0 < b < 0x21:
            out.append({0x0A: "\\n", 0x09: "\\t"}.get(b, "^" + chr(0x40 + b)))
        else:
            out.append(f"\\x{b:02X}")
    if ascii_count < len(data) // 2:
        return format_java_bytes(data)
    return '"' + "".join(out) + '"'


def kv_text(key: bytes, cell: Cell) -> str:
    """asynchbase's KeyValue.toString, without the write time tsd does not keep."""
    return (
        f"KeyValue(key={pretty(key)}, family={pretty(cell.family.encode())}, "
        f"qualifier={pretty(cell.qualifier)}, value={pretty(cell.value)})"
    )


def java_date_ms(ms: int) -> str:
    """``new Date(ms).toString()`` in UTC."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%a %b %d %H:%M:%S UTC %Y")


@dataclass(slots=True)
class _Point:
    """One data point of a row: its own qualifier and value, and the cell it came from."""

    cell: Cell
    qualifier: bytes
    value: bytes
    compacted: bool


def _value_length(qualifier: bytes) -> int:
    return (qualifier[-1] & LENGTH_MASK) + 1


def _point_value_text(point: _Point) -> str:
    """Internal.extract{Integer,FloatingPoint}Value appended to a StringBuilder."""
    value = point.value
    if point.qualifier[-1] & FLAG_FLOAT:
        if len(value) == 4:
            return java_double_to_string(struct.unpack(">f", value)[0])
        if len(value) == 8:
            return java_double_to_string(struct.unpack(">d", value)[0])
        raise IllegalDataError("Floating point value @ 0 not on 8 or 4 bytes")
    if len(value) not in (1, 2, 4, 8):
        raise IllegalDataError("Integer value @ 0 not on 8/4/2/1 bytes")
    return str(int.from_bytes(value, "big", signed=True))


class Fsck:
    """One run: the counters, the lines printed, the fixes written."""

    def __init__(self, store: ToolStore, options: FsckOptions, out: TextIO) -> None:
        self.store = store
        self.options = options
        self.out = out
        self.counters = Counters()
        self.layout = KeyLayout.from_storage_config(store.cfg.storage)
        self.table = store.cfg.storage.data_table
        self.known_series: set[bytes] = set()

    def say(self, text: str) -> None:
        self.out.write(text + "\n")

    async def _delete(self, *deletes: Delete) -> None:
        await self.store.storage.delete(self.table, list(deletes))

    async def _delete_cell(self, key: bytes, cell: Cell) -> None:
        await self._delete(Delete(key, cell.family, cell.qualifier))

    async def check_rows(self, rows: AsyncIterator[Row]) -> None:
        async for row in rows:
            self.counters.rows_processed += 1
            await self.check_row(row)

    async def check_key(self, key: bytes) -> bool:
        """Fsck.fsckKey: False when the row is not to be read further."""
        c = self.counters
        layout = self.layout
        prefix = layout.tags_start
        if len(key) < prefix or (len(key) - prefix) % layout.tag_pair_width:
            self.say(f"Invalid row key.\n\tKey: {uid_to_hex(key)}")
            c.bad_key += 1
            if self.options.fix and self.options.delete_bad_rows:
                await self._delete(Delete(key))
                c.bad_key_fixed += 1
            return False
        series = key[layout.salt_width : layout.salt_width + layout.metric_width] + key[prefix:]
        if series in self.known_series:
            return True
        problem = await self._unresolved(key)
        if problem is None:
            self.known_series.add(series)
            return True
        what, exc = problem
        self.say(f"Unable to resolve {what} from the row key.\n\tKey: {uid_to_hex(key)}\n\t{exc}")
        c.orphans += 1
        if self.options.fix and self.options.delete_orphans:
            await self._delete(Delete(key))
            c.orphans_fixed += 1
        return False

    async def _unresolved(self, key: bytes) -> tuple[str, NoSuchUniqueId] | None:
        """What fails to resolve in ``key`` (RowKey.metricNameAsync, Tags.resolveIds)."""
        parts = decode_row_key(self.layout, key)
        uids = self.store.uids
        try:
            await uids.metrics.get_name(parts.metric_uid)
        except NoSuchUniqueId as exc:
            return "the metric", exc
        try:
            for tagk, tagv in parts.tags:
                await uids.tagk.get_name(tagk)
                await uids.tagv.get_name(tagv)
        except NoSuchUniqueId as exc:
            return "the a tagk or tagv", exc
        return None

    async def check_row(self, row: Row) -> None:
        """Fsck.fsckRow then fsckDataPoints."""
        c = self.counters
        key = row.key
        if not await self.check_key(key):
            return
        base_time = decode_row_key(self.layout, key).base_time_s
        points: dict[int, list[_Point]] = {}
        for cell in row.cells:
            c.kvs_processed += 1
            qual, value = cell.qualifier, cell.value
            fix_unknown = self.options.fix and self.options.delete_unknown_columns
            if len(qual) < 2:
                c.unknown += 1
                self.say(f"Invalid qualifier, must be on 2 bytes or more.\n\t{kv_text(key, cell)}")
                if fix_unknown:
                    await self._delete_cell(key, cell)
                    c.unknown_fixed += 1
                continue
            if len(qual) % 2:
                if len(qual) not in (3, 5):
                    c.unknown += 1
                    self.say(
                        "Unknown qualifier, must be 2, 3, 5 or an even number of bytes."
                        f"\n\t{kv_text(key, cell)}"
                    )
                    if fix_unknown:
                        await self._delete_cell(key, cell)
                        c.unknown_fixed += 1
                elif qual[0] == ANNOTATION_PREFIX:
                    c.annotations += 1
                elif is_append_qualifier(qual):
                    c.append_dps += 1
                else:
                    self.say(
                        "Found an object possibly from a future version of OpenTSDB"
                        f"\n\t{kv_text(key, cell)}"
                    )
                    c.future += 1
                continue
            if len(qual) > 4 or (len(qual) == 4 and not is_ms_qualifier(qual)):
                await self._compacted(key, base_time, cell, points)
                continue
            offset_ms = _offset_ms(qual)
            points.setdefault(base_time * 1000 + offset_ms, []).append(
                _Point(cell, qual, value, compacted=False)
            )
        if points:
            await self._check_points(key, points)

    async def _compacted(
        self, key: bytes, base_time: int, cell: Cell, points: dict[int, list[_Point]]
    ) -> None:
        c = self.counters
        if not cell.value or cell.value[-1] > MS_MIXED_COMPACT:
            c.bad_compacted_columns += 1
            self.say(
                "The last byte of a compacted should be 0 or 1. Either this value is"
                " corrupted or it was written by a future version of OpenTSDB."
                f"\n\t{kv_text(key, cell)}"
            )
            return
        try:
            entries = split_cell(cell.qualifier, cell.value)
        except IllegalDataError as exc:
            c.bad_compacted_columns += 1
            # OpenTSDB's message names the cell too (and the cells decoded before the fault)
            self.say(f"{exc}: {kv_text(key, cell)}")
            if self.options.fix and self.options.delete_bad_compacts:
                await self._delete_cell(key, cell)
                c.bad_compacted_columns_deleted += 1
            return
        for offset_ms, qual, value in entries:
            points.setdefault(base_time * 1000 + offset_ms, []).append(
                _Point(cell, qual, value, compacted=True)
            )
        if b"".join(q for _, q, _ in entries) != cell.qualifier:
            self.say(f"Compacted column was out of order or requires a fixup: {kv_text(key, cell)}")
            c.fixable_compacted_columns += 1

    async def _check_points(self, key: bytes, points: dict[int, list[_Point]]) -> None:
        """Fsck.fsckDataPoints, without the re-compaction (see the module's departures)."""
        c = self.counters
        has_duplicates = False
        has_value_error = False
        for timestamp in sorted(points):
            same = points[timestamp]
            if len(same) == 1:
                c.valid_datapoints += 1
                has_value_error |= await self._check_value(key, same[0])
                continue
            has_duplicates = True
            lines = [
                "More than one column had a value for the same timestamp: "
                f"({timestamp} - {java_date_ms(timestamp)})\n    row key: ({uid_to_hex(key)})"
            ]
            keep_at = len(same) - 1 if self.options.last_write_wins else 0
            keep = same[keep_at]
            if not self.options.last_write_wins:
                lines.append(_point_info(keep) + " <--- keep oldest")
            c.valid_datapoints += 1
            has_value_error |= await self._check_value(key, keep)
            for index, point in enumerate(same):
                if index == keep_at:
                    continue
                c.duplicates += 1
                try:
                    lines.append(f"{_point_info(point)} value: {_point_value_text(point)}")
                except IllegalDataError:
                    lines.append(f"Unexpected exception processing DP: {kv_text(key, point.cell)}")
                fix = self.options.fix and self.options.resolve_duplicates
                if fix and not point.compacted:
                    await self._delete_cell(key, point.cell)
                    c.duplicates_fixed += 1
            if self.options.last_write_wins:
                lines.append(_point_info(keep) + " <--- keep latest")
            self.say("\n".join(lines) + "\n")
        if (has_duplicates and not self.options.resolve_duplicates) or (
            has_value_error and not self.options.delete_bad_values
        ):
            self.say("One or more errors found in row that were not marked for repair")

    async def _check_value(self, key: bytes, point: _Point) -> bool:
        """Fsck.fsckFloat / fsckInteger: True for an error left unrepaired."""
        if point.qualifier[-1] & FLAG_FLOAT:
            return await self._check_float(key, point)
        return await self._check_integer(key, point)

    async def _bad_value(self, key: bytes, point: _Point, message: str) -> bool:
        c = self.counters
        c.bad_values += 1
        self.say(message)
        if self.options.fix and self.options.delete_bad_values and not point.compacted:
            await self._delete_cell(key, point.cell)
            c.bad_values_deleted += 1
            return False
        if point.compacted:
            self.say("The previous value was in a compacted column. This should not be possible.")
            c.bad_compacted_columns += 1
        return True

    async def _check_float(self, key: bytes, point: _Point) -> bool:
        c = self.counters
        qual, value = point.qualifier, point.value
        length = _value_length(qual)
        kv = kv_text(key, point.cell)
        if length == 4 and len(value) == 8:
            if value[:4] == b"\xff\xff\xff\xff" and len(qual) == 2:
                message = (
                    "Floating point value with 0xFF most significant bytes, probably caused"
                    " by sign extension bug present in revisions [96908436..607256fc].\n"
                    f"\t{kv}"
                )
            elif value[:4] != b"\0\0\0\0":
                return await self._bad_value(
                    key,
                    point,
                    "Floating point value was marked as 4 bytes long but was actually 8 bytes"
                    f" long and the first four bytes were not zeroed\n\t{kv}",
                )
            else:
                message = (
                    "Floating point value was marked as 4 bytes long but was actually 8 bytes"
                    f" long\n\t{kv}"
                )
            c.value_encoding += 1
            self.say(message)
            if not self.options.fix or point.compacted:
                return True
            await self.store.storage.put(self.table, [Put(key, point.cell.family, qual, value[4:])])
            c.value_encoding_fixed += 1
            return False
        if length == 8 and len(value) == 4:
            return await self._bad_value(
                key,
                point,
                "This floating point value was marked as 8 bytes long but was only"
                f" {len(value)} bytes.\n\t{kv}",
            )
        if len(value) not in (4, 8):
            return await self._bad_value(
                key,
                point,
                "This floating point value must be encoded either on 4 or 8 bytes, but"
                f" it's on {len(value)} bytes.\n\t{kv}",
            )
        return False

    async def _check_integer(self, key: bytes, point: _Point) -> bool:
        c = self.counters
        qual, value = point.qualifier, point.value
        length = _value_length(qual)
        if len(value) != length:
            return await self._bad_value(
                key,
                point,
                f"The integer value is {len(value)} bytes long but should be {length} bytes."
                f"\n\t{kv_text(key, point.cell)}",
            )
        if length != 8:
            return False
        decoded = int.from_bytes(value, "big", signed=True)
        for size in (1, 2, 4):
            if -(1 << (size * 8 - 1)) <= decoded < 1 << (size * 8 - 1):
                break
        else:
            return False
        c.vle += 1
        c.vle_bytes += 8 - size
        if self.options.fix and not point.compacted:
            new_qual = qual[:-1] + bytes([(qual[-1] & ~LENGTH_MASK & 0xFF) | (size - 1)])
            new_value = decoded.to_bytes(size, "big", signed=True)
            family = point.cell.family
            await self.store.storage.put(self.table, [Put(key, family, new_qual, new_value)])
            await self._delete(Delete(key, family, qual))
            c.vle_fixed += 1
        return False  # a VLE saving is not an error


def _offset_ms(qualifier: bytes) -> int:
    """Internal.getOffsetFromQualifier, in milliseconds."""
    raw = int.from_bytes(qualifier, "big")
    if len(qualifier) == 4:
        return (raw & 0x0FFFFFC0) >> 6
    return (raw >> 4) * 1000


def _point_info(point: _Point) -> str:
    """Fsck.appendDatapointInfo, without the write time."""
    compacted = "true" if point.compacted else "false"
    return f"     compacted: ({compacted})  qualifier: {format_java_bytes(point.cell.qualifier)}"


async def fsck(cfg: Config, words: list[str], options: FsckOptions, out: TextIO) -> Counters:
    """Check (and fix) the rows a query reads, or the whole table when ``words`` is empty."""
    async with open_store(cfg, read_only=not options.fix) as store:
        run = Fsck(store, options, out)
        if not words:
            out.write("Starting full table scan\n")
            spec = ScanSpec(batch_rows=1000)
            async with contextlib.aclosing(store.storage.scan(run.table, spec)) as rows:
                await run.check_rows(rows)
        else:
            engine = QueryEngine(store.storage, store.uids, cfg)
            for query in cli_queries(cfg, parse_cli_query(words)):
                plan = await engine.scan_plan(query, query.queries[0])
                for scan_spec in plan.scans:
                    scan = store.storage.scan(run.table, scan_spec)
                    async with contextlib.aclosing(scan) as rows:
                        await run.check_rows(rows)
        for line in run.counters.report():
            out.write(line + "\n")
        return run.counters


def run(args: argparse.Namespace) -> int:
    if not args.words and not args.full_scan:
        raise UsageError("Must supply a query or use the '--full-scan' flag")
    if args.threads is not None and args.threads < 1:
        raise UsageError("Must have at least one thread")
    cfg = tool_config(args)
    options = options_from(args)
    if cfg.storage.fix_duplicates:  # as OpenTSDB: tsd.storage.fix_duplicates = last write wins
        options = dataclasses.replace(options, last_write_wins=True)
    counters = run_async(fsck(cfg, list(args.words), options, sys.stdout))
    return status.OK if counters.total_errors() == 0 else status.FAILED
