"""``tsdb dump``: every raw cell of the embedded store, one per line, in storage order.

Each line is ``table<TAB>row<TAB>family<TAB>qualifier<TAB>value`` with row,
qualifier and value in uppercase hex (an empty value is an empty field).
Tables come in name order under their configured names (``tsdb``,
``tsdb-uid``, ... or whatever ``tsd.storage.hbase.*_table`` says), rows in
key order, cells by family then qualifier: the order a scan returns them.

The store is opened read-only, so it can be dumped while a daemon holds it
open (LMDB lets other processes read a live environment); each batch of rows
reflects the writes acknowledged before it was read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TextIO

from tsd.config import load_config
from tsd.storage.base import Row, ScanSpec
from tsd.storage.embedded import EmbeddedStorage

#: rows per read batch; a dump streams, so only a batch is in memory at once
BATCH_ROWS = 1024


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", metavar="DIR", help="the embedded store (default: tsd.storage.data_dir)"
    )
    parser.add_argument("--table", metavar="NAME", help="dump only this table")
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")


def format_row(table: str, row: Row) -> str:
    """The dump lines of one row, each ending with a newline."""
    start = f"{table}\t{row.key.hex().upper()}\t"
    return "".join(
        f"{start}{cell.family}\t{cell.qualifier.hex().upper()}\t{cell.value.hex().upper()}\n"
        for cell in row.cells
    )


async def dump(data_dir: str, table: str | None, out: TextIO) -> int:
    """Write the dump of ``table`` (every table when None) to ``out``; the cells written."""
    storage = EmbeddedStorage(data_dir, read_only=True)
    cells = 0
    try:
        tables = [table] if table is not None else await storage.list_tables()
        for name in tables:
            async for row in storage.scan(name, ScanSpec(batch_rows=BATCH_ROWS)):
                out.write(format_row(name, row))
                cells += len(row.cells)
    finally:
        await storage.close()
    return cells


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    data_dir = args.data_dir if args.data_dir is not None else cfg.storage.data_dir
    try:
        asyncio.run(dump(data_dir, args.table, sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        # `tsdb dump | head`: the reader left; stop quietly, as cat does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
