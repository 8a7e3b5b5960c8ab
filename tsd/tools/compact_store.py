"""``tsdb compact-store``: give the embedded store's free space back to the filesystem.

LMDB reuses the pages that deletes free (compaction of single cells, retention) but never
shrinks its file. This rewrites the store with its live entries only, in key order and in
full pages, and swaps the new file in; it prints the sizes before and after. The daemon
must be stopped: the command takes the store's lock and refuses (exit 3) while a daemon
holds it. Do not run other tools on the store meanwhile.
"""

from __future__ import annotations

import argparse
import sys

from tsd.errors import StorageError
from tsd.storage.embedded.maintenance import compact_store
from tsd.tools import status
from tsd.tools.common import embedded_data_dir


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", metavar="DIR", help="the embedded store (default: tsd.storage.data_dir)"
    )
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")


def run(args: argparse.Namespace) -> int:
    data_dir = embedded_data_dir(args, "compact-store")
    try:
        before, after = compact_store(data_dir)
    except StorageError as exc:
        sys.stderr.write(f"tsdb compact-store: {exc}\n")
        return status.UNAVAILABLE
    sys.stdout.write(f"{data_dir}: {before} bytes -> {after} bytes\n")
    return status.OK
