"""Reading back what the write path stored: the data table decoded to named points.

Server and writer tests check what was *stored*, not only what a client was told.
"""

from __future__ import annotations

from dataclasses import dataclass

from tsd.codec import KeyLayout, decode_cells, decode_row_key
from tsd.config import StorageConfig
from tsd.data_points import Tags
from tsd.storage.base import Row, ScanSpec, Storage
from tsd.uid.service import UidService


@dataclass(frozen=True, slots=True)
class StoredPoint:
    metric: str
    tags: Tags
    timestamp_ms: int
    value: int | float


async def table_cells(storage: Storage, table: str) -> list[tuple[bytes, bytes, bytes]]:
    """Every cell of ``table`` as (row key, qualifier, value), in storage order."""
    return [
        (row.key, c.qualifier, c.value)
        async for row in storage.scan(table, ScanSpec())
        for c in row.cells
    ]


async def data_rows(storage: Storage, cfg: StorageConfig) -> list[Row]:
    return [row async for row in storage.scan(cfg.data_table, ScanSpec())]


async def stored_points(
    storage: Storage, cfg: StorageConfig, uids: UidService
) -> list[StoredPoint]:
    """Every point of the data table, sorted by (metric, tags, time); names resolved."""
    layout = KeyLayout.from_storage_config(cfg)
    points = []
    for row in await data_rows(storage, cfg):
        parts = decode_row_key(layout, row.key)
        metric = await uids.metrics.get_name(parts.metric_uid)
        tags = tuple(
            sorted(
                [(await uids.tagk.get_name(k), await uids.tagv.get_name(v)) for k, v in parts.tags]
            )
        )
        cells = [(c.qualifier, c.value) for c in row.cells if c.family == "t"]
        for point in decode_cells(parts.base_time_s, cells, row_key=row.key).points:
            points.append(StoredPoint(metric, tags, point.timestamp_ms, point.value))
    points.sort(key=lambda p: (p.metric, p.tags, p.timestamp_ms))
    return points
