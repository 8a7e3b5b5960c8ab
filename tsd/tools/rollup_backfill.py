"""``tsdb rollup-backfill``: compute tsd's own rollups of data already stored.

    tsdb rollup-backfill [--config FILE] [--data-dir DIR] START [END]

For data written before ``tsd.rollups.compute`` was on (or imported into another store,
or stored on HBase by OpenTSDB): every data row whose hour lies in ``[START, END)``
(times as ``tsdb query`` takes them: ``2013/01/01``, ``1y-ago``, seconds; END defaults to
now) gets the rollup cells the daemon computes as it writes a row out
(tsd/query/rollup_compute.py), in the tables of the rollup configuration in force
(``tsd.rollups.config``, or the default one of docs/rollups.md), replacing what they hold
for those intervals. It is idempotent: run it again over the same range and the same
cells are written.

Progress goes to stdout every 10 seconds and at the end: rows read, rows rolled up (and
the last hour reached), rollup cells written. Beside a running daemon on the embedded
store it writes as a second writer; rows the daemon's head still holds are rolled up by
the daemon when it writes them out. The data table is read in key order whole (rows out
of the range are skipped by their base time, not scanned around).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from tsd.codec import KeyLayout
from tsd.codec.const import FAMILY
from tsd.errors import BadRequestError, CodecError, UsageError
from tsd.protocol.timespec import parse_datetime
from tsd.query.decode import base_times_s, decode_block
from tsd.query.rollup_compute import ComputedRollups
from tsd.storage.base import Block, PointBlock, ScanSpec
from tsd.tools import status
from tsd.tools.common import (
    ToolStore,
    add_store_options,
    open_store,
    own_rollups,
    run_async,
    tool_config,
)
from tsd.write.rollup import replace_rollup_cells

__all__ = ["BackfillCounters", "backfill", "configure", "run"]

#: seconds between progress lines
PROGRESS_EVERY_S = 10.0


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument("start", metavar="START", help="first hour (as tsdb query takes it)")
    parser.add_argument("end", metavar="END", nargs="?", default="", help="end (default: now)")


@dataclass(slots=True)
class BackfillCounters:
    rows_read: int = 0
    rows_rolled: int = 0
    cells: int = 0
    rows_skipped: int = 0  # rows that do not decode (OpenTSDB could not read them either)
    last_hour: int = 0

    def line(self, elapsed_s: float) -> str:
        hour = (
            dt.datetime.fromtimestamp(self.last_hour, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
            if self.last_hour
            else "-"
        )
        skipped = f", {self.rows_skipped} rows not readable" if self.rows_skipped else ""
        return (
            f"{self.rows_read} rows read, {self.rows_rolled} rolled up (last hour {hour}), "
            f"{self.cells} rollup cells written{skipped} in {elapsed_s:.1f} s\n"
        )


async def backfill(
    store: ToolStore,
    computed: ComputedRollups,
    start_s: int,
    end_s: int,
    out: TextIO | None = None,
) -> BackfillCounters:
    """Compute and store the rollups of every data row with a base time in
    ``[start_s, end_s)``; progress lines to ``out``."""
    cfg = store.cfg.storage
    layout = KeyLayout.from_storage_config(cfg)
    counters = BackfillCounters()
    started = last_report = time.monotonic()
    spec = ScanSpec(families=(FAMILY,), batch_rows=2048)
    async for block in store.storage.scan_blocks(cfg.data_table, spec):
        counters.rows_read += len(block)
        bases = base_times_s(layout, list(block.keys))
        wanted = np.flatnonzero((bases >= start_s) & (bases < end_s))
        if len(wanted):
            picked: Block = block
            if len(wanted) != len(block):
                picked = (block.cells() if isinstance(block, PointBlock) else block).take(wanted)
            try:
                points = decode_block(picked, layout, fix_duplicates=cfg.fix_duplicates)
            except CodecError:
                counters.rows_skipped += len(picked)
            else:
                for table, rollup_cells in computed.cells(picked.keys, points).items():
                    await replace_rollup_cells(store.storage, table, rollup_cells)
                    counters.cells += len(rollup_cells)
                counters.rows_rolled += len(picked)
                counters.last_hour = max(counters.last_hour, int(bases[wanted].max()))
        now = time.monotonic()
        if out is not None and now - last_report >= PROGRESS_EVERY_S:
            out.write("rollup-backfill: " + counters.line(now - started))
            out.flush()
            last_report = now
    if out is not None:
        out.write("rollup-backfill: done: " + counters.line(time.monotonic() - started))
        out.flush()
    return counters


def run(args: argparse.Namespace) -> int:
    cfg = tool_config(args)
    try:
        start_ms = parse_datetime(args.start)
        end_ms = parse_datetime(args.end) if args.end else int(time.time() * 1000)
    except BadRequestError as exc:
        raise UsageError(f"bad time: {exc.message}") from None
    if start_ms < 0 or end_ms <= start_ms:
        raise UsageError("START must be before END")
    computed = own_rollups(cfg, computing_only=False)
    if computed is None:
        raise UsageError(
            "no rollup configuration: set tsd.rollups.enable and tsd.rollups.config, or "
            "tsd.rollups.compute (docs/rollups.md)"
        )
    if not computed.intervals:
        raise UsageError("the rollup configuration has no interval tsd computes (docs/rollups.md)")

    async def main() -> BackfillCounters:
        async with open_store(cfg) as store:
            start_hour = start_ms // 1000 - start_ms // 1000 % 3600
            return await backfill(store, computed, start_hour, -(-end_ms // 1000), sys.stdout)

    counters = run_async(main())
    return status.OK if not counters.rows_skipped else status.FAILED
