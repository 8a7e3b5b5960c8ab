"""Index the series already in the data table (``tsdb meta-sync``).

tsd writes a meta row for every series it sees (:mod:`tsd.meta.tracking`), but data written
before (by OpenTSDB without meta tracking, or imported as raw rows) has none, so lookups
cannot find it. This reads the data table once, row by row, and hands each series to the
tracker, which writes what the configuration asks for (tsd's index cell, or OpenTSDB's
``ts_ctr``/``ts_meta``/UIDMeta with meta tracking on) and skips series it has written.
OpenTSDB's counterpart is ``tsdb uid metasync``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass

from tsd.codec import decode_row_key
from tsd.codec.const import FAMILY
from tsd.errors import CodecError
from tsd.meta.service import MetaService
from tsd.storage.base import ScanSpec, Storage

#: Series queued before the tracker writes them.
FLUSH_EVERY = 1024
#: Rows per scan round trip.
SCAN_BATCH_ROWS = 4096


@dataclass(slots=True)
class SyncReport:
    rows: int = 0
    series: int = 0
    skipped_rows: int = 0


async def sync_series_index(
    storage: Storage,
    data_table: str,
    meta: MetaService,
    progress: Callable[[SyncReport], None] | None = None,
) -> SyncReport:
    """Scan ``data_table`` and index every series found; counts of rows and series."""
    report = SyncReport()
    layout = meta.layout
    tracker = meta.tracker
    last_tsuid = b""
    spec = ScanSpec(families=(FAMILY,), batch_rows=SCAN_BATCH_ROWS)
    async with aclosing(storage.scan(data_table, spec)) as rows:
        async for row in rows:
            report.rows += 1
            try:
                parts = decode_row_key(layout, row.key)
            except CodecError:
                report.skipped_rows += 1
                continue
            if not parts.tags or not any(parts.metric_uid):
                continue  # global annotation rows are no series
            tsuid = parts.metric_uid + b"".join(k + v for k, v in parts.tags)
            if tsuid == last_tsuid:
                continue
            last_tsuid = tsuid
            before = tracker.pending()
            tracker.on_new_series(parts.metric_uid, parts.tags)
            report.series += tracker.pending() - before
            if tracker.pending() >= FLUSH_EVERY:
                await tracker.flush()
                if progress is not None:
                    progress(report)
    await tracker.flush()
    return report
