"""Index the series already in the data table (``tsdb meta-sync``).

tsd writes a meta row for every series it sees (:mod:`tsd.meta.tracking`), but data written
before (by OpenTSDB without meta tracking, or imported as raw rows) has none, so lookups
cannot find it. This reads the data table once, row by row, and hands each series to the
tracker, which writes what the configuration asks for (tsd's index cell, or OpenTSDB's
``ts_ctr``/``ts_meta``/UIDMeta with meta tracking on) and skips series it has written.
OpenTSDB's counterpart is ``tsdb uid metasync``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass

from tsd.codec import KeyLayout, RowKeyParts, decode_row_key
from tsd.codec.const import FAMILY
from tsd.errors import CodecError, NoSuchUniqueId
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


async def _series_rows(
    storage: Storage, data_table: str, layout: KeyLayout, report: SyncReport
) -> AsyncGenerator[tuple[RowKeyParts, bytes]]:
    """The key parts and TSUID of each series row of ``data_table``, counted in ``report``
    (rows whose key does not decode as skipped; global annotation rows are no series)."""
    spec = ScanSpec(families=(FAMILY,), batch_rows=SCAN_BATCH_ROWS)
    async with aclosing(storage.scan(data_table, spec)) as rows:
        async for row in rows:
            report.rows += 1
            try:
                parts = decode_row_key(layout, row.key)
            except CodecError:
                report.skipped_rows += 1
                continue
            if parts.tags and any(parts.metric_uid):
                yield parts, parts.metric_uid + b"".join(k + v for k, v in parts.tags)


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
    async with aclosing(_series_rows(storage, data_table, layout, report)) as rows:
        async for parts, tsuid in rows:
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


async def sync_opentsdb_meta(
    storage: Storage, data_table: str, meta: MetaService, *, realtime_ts: bool, now_s: int
) -> SyncReport:
    """OpenTSDB's ``tsdb uid metasync`` (MetaSync): whatever the tracking settings, every
    UID a series uses gets a UIDMeta created at the hour of the first row naming it, and
    every series a ``ts_ctr`` counter (or, when only the counter exists, a TSMeta created at
    its first row's hour; see :meth:`TsMetaStore.backdate`). ``realtime_ts``:
    ``tsd.core.meta.enable_realtime_ts``, under which a new counter brings a TSMeta created
    ``now_s``, as OpenTSDB's counter increment does. tsd's index cell is not written."""
    report = SyncReport()
    layout = meta.layout
    first_seen: dict[bytes, int] = {}  # TSUID -> its first row's hour
    uid_seen: dict[tuple[str, bytes], int] = {}  # (kind, UID) -> its first row's hour
    async with aclosing(_series_rows(storage, data_table, layout, report)) as rows:
        async for parts, tsuid in rows:
            hour = parts.base_time_s
            if first_seen.get(tsuid, hour) >= hour:
                first_seen[tsuid] = hour
            used = [("metrics", parts.metric_uid)]
            for tagk, tagv in parts.tags:
                used += [("tagk", tagk), ("tagv", tagv)]
            for key in used:
                if uid_seen.get(key, hour) >= hour:
                    uid_seen[key] = hour
    uids = meta.uids
    for (kind, uid), hour in uid_seen.items():
        unique_id = uids.by_type(kind)
        try:
            name = await unique_id.get_name(uid)
        except NoSuchUniqueId:
            continue  # OpenTSDB warns "includes a non-existant UID" and goes on
        await meta.uid_metas.backdate(unique_id, uid, name, hour)
    for tsuid, hour in first_seen.items():
        await meta.tsmetas.backdate(tsuid, hour, now_s, realtime_ts)
    report.series = len(first_seen)
    return report
