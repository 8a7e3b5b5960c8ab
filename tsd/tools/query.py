"""``tsdb query``: run queries from the command line and print their points, as OpenTSDB's
CliQuery prints them: one line per point,

    METRIC TIMESTAMP_MS VALUE {TAGK=TAGV, ...}

integers as they are, other values with six decimals (Java's ``%f``), the tags the series
has in common as Java prints a HashMap. Each query runs through the same engine as
``/api/query`` (see :mod:`tsd.protocol.cli_query` for the words). The store is opened
read-only, so this works beside a running daemon on the same embedded store.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import TextIO

from tsd.config import Config
from tsd.protocol.cli_query import USAGE, CliQuery, parse_cli_query
from tsd.protocol.names import java_hash_order
from tsd.protocol.query_json import parse_query_params
from tsd.query.engine import QueryEngine
from tsd.query.output import QueryResult
from tsd.query_spec import TSQuery
from tsd.tools.common import add_store_options, open_store, run_async, tool_config

__all__ = ["USAGE", "cli_queries", "configure", "java_map_text", "point_lines", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument("words", nargs="+", metavar="WORD", help=USAGE)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "query words:\n  " + USAGE.replace("\n", "\n  ")


def java_map_text(tags: Mapping[str, str]) -> str:
    """``HashMap.toString()``: ``{k=v, k2=v2}`` in the map's iteration order."""
    return "{" + ", ".join(f"{k}={tags[k]}" for k in java_hash_order(sorted(tags))) + "}"


def java_percent_f(value: float) -> str:
    """``String.format("%f", value)``: six decimals, ties rounded up (Java's HALF_UP)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return str(Decimal(value).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


def point_lines(result: QueryResult) -> Iterator[str]:
    for series in result.series:
        tags = java_map_text(series.tags)
        for timestamp_ms, value in series.dps.points():
            shown = str(value) if isinstance(value, int) else java_percent_f(value)
            yield f"{series.metric} {timestamp_ms} {shown} {tags}\n"


def cli_queries(cfg: Config, cli: CliQuery) -> Iterator[TSQuery]:
    """One /api/query-validated TSQuery per query of the command line, in order."""
    for expression in cli.m:
        params = {"start": [cli.start], "m": [expression]}
        if cli.end is not None:
            params["end"] = [cli.end]
        yield parse_query_params(params, default_timezone=cfg.core.timezone or "UTC")


async def query(cfg: Config, cli: CliQuery, out: TextIO) -> None:
    async with open_store(cfg, read_only=True) as store:
        engine = QueryEngine(store.storage, store.uids, cfg)
        for tsquery in cli_queries(cfg, cli):
            out.writelines(point_lines(await engine.execute(tsquery)))


def run(args: argparse.Namespace) -> int:
    cli = parse_cli_query(args.words)
    run_async(query(tool_config(args), cli, sys.stdout))
    return 0
