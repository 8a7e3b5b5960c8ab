"""``tsdb mkmetric NAME...``: give metrics their UIDs, as OpenTSDB's ``tsdb mkmetric``.

New metrics are refused on the write path unless ``tsd.core.auto_create_metrics`` is on,
so this is how a user declares them. OpenTSDB's ``tsdb`` script runs it as
``tsdb uid assign metrics NAME...``; so does tsd (:mod:`tsd.tools.uid`): one line
``metrics NAME: [0, 0, 1]`` per name, and a name that has a UID already is printed with
it and is not an error.
"""

from __future__ import annotations

import argparse

from tsd.tools import uid
from tsd.tools.common import add_store_options, tool_config


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument("names", nargs="+", metavar="NAME", help="metric names")


def run(args: argparse.Namespace) -> int:
    return uid.run_words(tool_config(args), ["assign", "metrics", *args.names])
