"""The ``tsdb`` command: argument parsing and exit codes only.

Each sub-command lives in a module (``tsd/tools/*.py`` or ``tsd/daemon.py``)
exposing ``configure(parser)`` and ``run(args) -> int``; ``COMMANDS`` maps
sub-command names to those modules, imported only when used. This is the only
place that turns errors into exit codes.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from tsd import __version__
from tsd.errors import ConfigError, ListenError, StorageError, TsdError, UsageError
from tsd.tools.status import FAILED, HELP, INTERRUPTED, UNAVAILABLE, USAGE

#: ``tsdb tsd`` could not open its listening socket (the port in use, most often).
EXIT_CANNOT_LISTEN = UNAVAILABLE

#: sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tsd": ("tsd.daemon", "Run the TSD: telnet and HTTP on one port"),
    "create-tables": ("tsd.tools.create_tables", "Create OpenTSDB's four tables (idempotent)"),
    "dump": ("tsd.tools.dump", "Print every raw cell of the embedded store, in storage order"),
    "mkmetric": ("tsd.tools.mkmetric", "Assign UIDs to metric names (tsdb uid assign metrics)"),
    "uid": ("tsd.tools.uid", "Find, assign, rename and delete UIDs (OpenTSDB's tsdb uid)"),
    "meta-sync": ("tsd.tools.meta_sync", "Index the series already stored, for lookups"),
    "import": ("tsd.tools.import_", "Import data points from text files (OpenTSDB's format)"),
    "query": ("tsd.tools.query", "Query data points and print them (OpenTSDB's tsdb query)"),
    "scan": ("tsd.tools.scan", "Print the stored cells a query reads, or --import lines"),
    "fsck": ("tsd.tools.fsck", "Check the data table for corrupt rows and cells; --fix them"),
    "search": ("tsd.tools.search", "Find series by metric and tags (tsdb search lookup)"),
    "version": ("tsd.tools.version", "Print the version and build (OpenTSDB's tsdb version)"),
    "copy": ("tsd.tools.copy", "Copy every table to another store (embedded <-> HBase)"),
    "check-store": ("tsd.tools.check_store", "Check the embedded store's bytes; --fix them"),
    "rollup-backfill": (
        "tsd.tools.rollup_backfill",
        "Compute tsd's own rollups of data already stored (a time range)",
    ),
    "compact-store": (
        "tsd.tools.compact_store",
        "Shrink the embedded store's file to its live data (daemon stopped)",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that sub-command's module is imported and
    configured (the others are listed by name), so a tool does not pay for aiohttp."""
    parser = argparse.ArgumentParser(
        prog="tsdb",
        description="tsd, an OpenTSDB-compatible TSD",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tsd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if command is None or name == command:
            importlib.import_module(module_name).configure(sub_parser)
    return parser


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The first word that names a sub-command (options come only after it)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _tune_gc() -> None:
    """Keep the cyclic garbage collector out of the ingest path's way.

    Ingest keeps tens of thousands of acyclic objects alive for a moment (a batch's Puts,
    a body's parsed points). At CPython's default threshold (700) they set off a young
    collection every 700 and, pushed into the oldest generation, a full one about every
    batch: bench/ingest measured a quarter of the daemon's CPU time in the collector.
    The imported modules are frozen (never scanned again) and young collections wait for
    200,000 new objects: 1.3 s -> 0.3 s of collector time for 400,000 telnet points of
    known series at 50,000; a burst of new series keeps each point's parsed objects alive
    across the loop turns its UID batch takes, so at 50,000 most of them were walked by a
    young and a middle collection: 0.92 s of collector time of about 7 s of CPU for
    400,000 new series, 0.24-0.34 s at 200,000 (a young collection then walks at most
    200,000 objects: some 15 ms).
    Full collections walk every live object: at a million series (their row-key templates,
    ref keys, head rows) that is a second or more, and at the default they came once or
    twice an interval while an hour's rows were made (bench/cardinality: the interval
    after an hour boundary 9.5 s -> 5.6 s without them). They wait for 1,000 middle
    collections (some 500 M new objects, minutes of ingest): the cycles ingest makes die
    young and the young collections take them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(200_000, 10, 1000)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_chosen_command(words)).parse_args(words)
    module = importlib.import_module(COMMANDS[args.command][0])
    _tune_gc()
    try:
        return int(module.run(args))
    except ConfigError as exc:
        print(f"tsdb {args.command}: configuration error: {exc}", file=sys.stderr)
        return USAGE
    except UsageError as exc:
        print(f"tsdb {args.command}: {exc}", file=sys.stderr)
        print(f"usage: tsdb {args.command} {getattr(module, 'USAGE', '')}", file=sys.stderr)
        return USAGE
    except (ListenError, StorageError) as exc:
        print(f"tsdb {args.command}: {exc}", file=sys.stderr)
        return UNAVAILABLE
    except TsdError as exc:
        print(f"tsdb {args.command}: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
