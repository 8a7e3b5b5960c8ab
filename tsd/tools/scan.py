"""``tsdb scan``: the stored rows a query reads, cell by cell (OpenTSDB's DumpSeries).

    tsdb scan [--import|--delete] START-DATE [END-DATE] QUERY [QUERIES...]

The query words are ``tsdb query``'s (:mod:`tsd.protocol.cli_query`); every row of the
scans the query plans is printed whole (all its cells, whatever their time), in storage
order. The default output shows how the data is stored:

    [0, 0, 1, 80, -30, 43, 0, 0, 0, 1, 0, 0, 1] sys.cpu.user 1356998400 (Tue Jan 01 ...
      [0, 0]	[42]	0	l	1356998400	(Tue Jan 01 00:00:00 UTC 2013)

(the row key and each cell's qualifier and value as Java prints byte arrays; then the
offset, ``l``/``f``, the timestamp and its date; a compacted or append cell first shows
its bytes and ``= N values:``, then one such line per point). ``--import`` prints instead
one line per point in the format ``tsdb import`` reads (``METRIC TIMESTAMP VALUE
TAGK=TAGV...``, the timestamp in milliseconds for millisecond points), so a scan can be
imported elsewhere. ``--delete`` deletes each row once printed, and implies ``--import``.
Dates are printed in UTC. Without ``--delete`` the store is opened read-only, so a scan
works beside a running daemon on the same embedded store.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
from collections.abc import Iterator
from typing import TextIO

from tsd.codec import (
    KeyLayout,
    decode_annotation_qualifier,
    decode_cells,
    decode_qualifier,
    decode_row_key,
    is_append_qualifier,
    is_ms_qualifier,
)
from tsd.codec.compaction import DecodedPoint
from tsd.config import Config
from tsd.java_text import format_java_bytes, java_double_to_string
from tsd.protocol.cli_query import USAGE, CliQuery, parse_cli_query
from tsd.protocol.names import java_hash_order
from tsd.query.engine import QueryEngine
from tsd.storage.base import Delete, Row
from tsd.tools.common import ToolStore, add_store_options, open_store, run_async, tool_config
from tsd.tools.query import cli_queries, java_map_text

__all__ = ["USAGE", "configure", "run"]

#: Internal.SECOND_MASK: a timestamp with any of these bits set is in milliseconds
SECOND_MASK = 0xFFFFFFFF00000000
#: Annotation.PREFIX: the first byte of an annotation's qualifier
ANNOTATION_PREFIX = 0x01


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument(
        "--import",
        dest="import_format",
        action="store_true",
        help="print the points in the format tsdb import reads",
    )
    parser.add_argument(
        "--delete", action="store_true", help="delete every row scanned (implies --import)"
    )
    parser.add_argument("words", nargs="+", metavar="WORD", help="as for tsdb query")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "query words:\n  " + USAGE.replace("\n", "\n  ")


def java_date(timestamp: int) -> str:
    """``new Date(t).toString()`` in UTC, for a time in seconds or milliseconds."""
    ms = timestamp if timestamp & SECOND_MASK else timestamp * 1000
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%a %b %d %H:%M:%S UTC %Y")


def _point_time(point: DecodedPoint) -> int:
    """Cell.absoluteTimestamp: milliseconds for a millisecond point, else seconds."""
    return point.timestamp_ms if point.is_ms else point.timestamp_ms // 1000


def _value_text(point: DecodedPoint) -> str:
    """Cell.parseValue() appended to a StringBuilder: a long, or a double as Java prints it."""
    value = point.value
    return str(value) if isinstance(value, int) else java_double_to_string(value)


def raw_cell_line(point: DecodedPoint) -> str:
    """DumpSeries.appendRawCell."""
    timestamp = _point_time(point)
    offset_ms = decode_qualifier(point.qualifier)[0]
    offset = offset_ms if timestamp & SECOND_MASK else offset_ms // 1000
    kind = "f" if point.is_float else "l"
    return (
        f"{format_java_bytes(point.qualifier)}\t{format_java_bytes(point.value_bytes)}\t"
        f"{offset}\t{kind}\t{timestamp}\t({java_date(timestamp)})"
    )


def cell_lines(
    base_time_s: int, qualifier: bytes, value: bytes, metric: str, tags: str | None
) -> Iterator[str]:
    """The lines of one cell: raw (``tags`` None) or import format (``tags`` the
    `` k=v`` words)."""
    if len(qualifier) % 2 and not is_append_qualifier(qualifier):
        if tags is not None:
            return  # not a data point: nothing to import
        if qualifier[0] == ANNOTATION_PREFIX and len(qualifier) in (3, 5):
            # The offset and time from the annotation's own qualifier (OpenTSDB reads it
            # as a data point qualifier, which misplaces it).
            timestamp = base_time_s * 1000 + decode_annotation_qualifier(qualifier)
            yield (
                f"  {format_java_bytes(qualifier)}\t{format_java_bytes(value)}\t"
                f"{timestamp // 1000 - base_time_s}\t{value.decode('latin-1')}\t{timestamp}\t"
                f"({java_date(timestamp)})"
            )
        else:
            yield f"  {format_java_bytes(value)}\t[Not a data point]"
        return
    points = decode_cells(base_time_s, [(qualifier, value)]).points
    if tags is not None:
        for point in points:
            yield f"{metric} {_point_time(point)} {_value_text(point)}{tags}"
        return
    single = len(qualifier) == 2 or (len(qualifier) == 4 and is_ms_qualifier(qualifier))
    if single and points:
        yield "  " + raw_cell_line(points[0])
        return
    head = f"  {format_java_bytes(qualifier)}\t{format_java_bytes(value)} = {len(points)} values:"
    yield head + "".join(f"\n    {raw_cell_line(point)}" for point in points)


async def _names(store: ToolStore, layout: KeyLayout, key: bytes) -> tuple[str, dict[str, str]]:
    parts = decode_row_key(layout, key)
    metric = await store.uids.metrics.get_name(parts.metric_uid)
    tags = {
        await store.uids.tagk.get_name(k): await store.uids.tagv.get_name(v) for k, v in parts.tags
    }
    return metric, tags


async def row_lines(store: ToolStore, layout: KeyLayout, row: Row, import_format: bool) -> str:
    parts = decode_row_key(layout, row.key)
    metric, tags = await _names(store, layout, row.key)
    out = []
    if not import_format:
        base = parts.base_time_s
        out.append(
            f"{format_java_bytes(row.key)} {metric} {base} ({java_date(base)}) "
            f"{java_map_text(tags)}\n"
        )
    tag_words = (
        "".join(f" {k}={tags[k]}" for k in java_hash_order(sorted(tags))) if import_format else None
    )
    for cell in row.cells:
        for line in cell_lines(parts.base_time_s, cell.qualifier, cell.value, metric, tag_words):
            out.append(line + "\n")
    return "".join(out)


async def scan(
    cfg: Config, cli: CliQuery, out: TextIO, *, import_format: bool, delete: bool
) -> int:
    """Print the rows of every query's scans; the rows seen."""
    layout = KeyLayout.from_storage_config(cfg.storage)
    table = cfg.storage.data_table
    rows_seen = 0
    async with open_store(cfg, read_only=not delete) as store:
        engine = QueryEngine(store.storage, store.uids, cfg)
        for query in cli_queries(cfg, cli):
            plan = await engine.scan_plan(query, query.queries[0])
            for spec in plan.scans:
                doomed: list[Delete] = []
                async with contextlib.aclosing(store.storage.scan(table, spec)) as rows:
                    async for row in rows:
                        out.write(await row_lines(store, layout, row, import_format or delete))
                        rows_seen += 1
                        if delete:
                            doomed.append(Delete(row.key))
                if doomed:
                    await store.storage.delete(table, doomed)
    return rows_seen


def run(args: argparse.Namespace) -> int:
    cli = parse_cli_query(args.words)
    cfg = tool_config(args)
    run_async(scan(cfg, cli, sys.stdout, import_format=args.import_format, delete=args.delete))
    return 0
