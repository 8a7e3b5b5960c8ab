"""Retention of the embedded store: drop whole hours of data older than
``tsd.storage.embedded.retention``.

A data row key is ``[salt] metric base_time tags`` (docs/format/rowkey.md), so the rows of
one metric (and salt bucket) for the hours before a cut-off are one contiguous key range:
``[prefix + 00000000, prefix + cutoff)``. A pass finds each prefix with a one-row key scan
and deletes its expired range with :meth:`~tsd.storage.base.Storage.delete_range` (the
embedded store walks it once in one write transaction; LMDB reuses the freed pages). A pass
costs one seek per metric plus the rows it drops, and runs when the cut-off reaches a new
hour.
"""

from __future__ import annotations

import contextlib

from tsd.codec import KeyLayout
from tsd.codec.const import MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.storage.base import ScanSpec, Storage


class Retention:
    """Drops the data table's hours older than ``retention_s`` (0: keeps everything)."""

    def __init__(self, storage: Storage, table: str, layout: KeyLayout, retention_s: int) -> None:
        self._storage = storage
        self._table = table
        self._width = layout.salt_width + layout.metric_width
        self.retention_s = retention_s
        #: the cut-off of the last pass (rows of hours before it are gone)
        self.cutoff_s = 0

    def due(self, now: float) -> bool:
        return self.retention_s > 0 and self._cutoff(now) > self.cutoff_s

    def _cutoff(self, now: float) -> int:
        """The first hour kept: hours ending at or before ``now - retention`` go."""
        expired = int(now) - self.retention_s
        return max(0, expired - expired % MAX_TIMESPAN)

    async def apply(self, now: float) -> int:
        """One pass: drop every row of an hour before the cut-off; the entries deleted."""
        if self.retention_s <= 0:
            return 0
        cutoff = self._cutoff(now)
        stop_time = cutoff.to_bytes(TIMESTAMP_BYTES, "big")
        deleted = 0
        start = b""
        while True:
            prefix = await self._next_prefix(start)
            if prefix is None:
                break
            deleted += await self._storage.delete_range(self._table, prefix, prefix + stop_time)
            start = _after(prefix)
            if not start:
                break
        self.cutoff_s = cutoff
        return deleted

    async def _next_prefix(self, start: bytes) -> bytes | None:
        spec = ScanSpec(start=start, limit=1, batch_rows=1)
        async with contextlib.aclosing(self._storage.scan_keys(self._table, spec)) as batches:
            async for keys in batches:
                if keys:
                    return keys[0][: self._width]
        return None


def _after(prefix: bytes) -> bytes:
    """The smallest key above every key starting with ``prefix`` (b"" when none is)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b""
    return stripped[:-1] + bytes([stripped[-1] + 1])
