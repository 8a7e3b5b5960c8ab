"""``tsdb search lookup [--use-data-table] [METRIC] [TAGK=TAGV ...]``: the series with a
metric, tag keys or values (OpenTSDB's Search tool and TimeSeriesLookup).

The first word without ``=`` is the metric; tag words are ``k=v``, ``k=`` (any value of
``k``), ``=v`` (``v`` under any key), as for ``/api/search/lookup``. One line per series:

    TSUID METRIC TAGK=TAGV TAGK=TAGV

(each field followed by a space, tags in Java HashMap order), at most ``--limit`` series
(SearchQuery's default, 25; 0 for all). OpenTSDB 2.4.1 builds these lines but never
prints them (TimeSeriesLookup clears its buffer instead of writing it): tsd prints them.
The lookup reads the series index (the meta table), which tsd keeps whether or not meta
tracking is on, so ``--use-data-table`` is accepted and changes nothing. The store is
opened read-only: this works beside a running daemon.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from tsd.codec import KeyLayout
from tsd.config import Config
from tsd.errors import BadRequestError, UsageError
from tsd.meta.lookup import DEFAULT_LIMIT, LookupQuery, SeriesLookup, TagPair, parse_tag_pair
from tsd.tools.common import add_store_options, open_store, run_async, tool_config

USAGE = "lookup [--use-data-table] [--limit N] [METRIC] [TAGK=TAGV ...]"


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument(
        "--use-data-table", action="store_true", help="accepted; tsd reads the series index"
    )
    parser.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help="most series printed (0: all)"
    )
    parser.add_argument("words", nargs="+", metavar="WORD", help=USAGE)


def parse_lookup_words(words: list[str], limit: int) -> LookupQuery:
    """Search.lookup's reading of its words."""
    if not words or words[0] != "lookup":
        raise UsageError(f"Unknown sub command: {words[0]}" if words else "Not enough arguments")
    rest = words[1:]
    if not rest:
        raise UsageError("Not enough arguments")
    metric = None
    if "=" not in rest[0]:
        metric, rest = rest[0], rest[1:]
    tags: list[TagPair] = []
    for word in rest:
        try:
            tags.append(parse_tag_pair(word))
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
    return LookupQuery(metric, tuple(tags), limit=limit)


async def search(cfg: Config, query: LookupQuery, out: TextIO) -> None:
    async with open_store(cfg, read_only=True) as store:
        layout = KeyLayout.from_storage_config(cfg.storage)
        lookup = SeriesLookup(store.storage, cfg.storage.meta_table, layout, store.uids)
        for tsuid in (await lookup.lookup(query)).tsuids:
            metric, tags = await lookup.describe(tsuid)
            pairs = "".join(f"{key}={value} " for key, value in tags.items())
            out.write(f"{tsuid.hex().upper()} {metric} {pairs}\n")


def run(args: argparse.Namespace) -> int:
    query = parse_lookup_words(args.words, args.limit)
    run_async(search(tool_config(args), query, sys.stdout))
    return 0
