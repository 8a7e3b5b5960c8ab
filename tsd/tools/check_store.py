"""``tsdb check-store [--fix]``: check the embedded store's own bytes.

Every entry of every table is read and decoded as the store decodes it: row keys, families,
bucket values and packed (compressed) rows. Each entry that does not decode is reported on
stdout as ``table<TAB>key<TAB>reason`` (key in uppercase hex); ``--fix`` deletes those
entries (the rest of their rows stays). The data's meaning is not checked here: that is
``tsdb fsck`` (OpenTSDB's). Works beside a running daemon: the store is shared, and each
batch of entries is checked in its own read transaction.

Exit status: 0 when nothing was found (or everything found was fixed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from tsd.errors import StorageError
from tsd.storage.embedded import EmbeddedStorage
from tsd.tools import status
from tsd.tools.common import embedded_data_dir, run_async


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fix", action="store_true", help="delete the entries that do not decode")
    parser.add_argument(
        "--data-dir", metavar="DIR", help="the embedded store (default: tsd.storage.data_dir)"
    )
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")


async def check(data_dir: str, fix: bool) -> int:
    """Report (and with ``fix`` delete) the undecodable entries; the number found."""
    storage = EmbeddedStorage(data_dir, read_only=not fix, exclusive=False)
    try:
        found = await storage.check_store(repair=fix)
    finally:
        await storage.close()
    for table, entry in found:
        sys.stdout.write(f"{table}\t{entry.key.hex().upper()}\t{entry.reason}\n")
    verb = "deleted" if fix else "found"
    sys.stderr.write(f"check-store: {len(found)} undecodable entries {verb}\n")
    return len(found)


def run(args: argparse.Namespace) -> int:
    data_dir = embedded_data_dir(args, "check-store")
    try:
        found = run_async(check(data_dir, args.fix))
    except StorageError as exc:
        sys.stderr.write(f"tsdb check-store: {exc}\n")
        return status.UNAVAILABLE
    return status.OK if found == 0 or args.fix else status.FAILED
