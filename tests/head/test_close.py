"""The head's close: every acknowledged point reaches storage on a clean stop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tsd.codec import compact_row, encode_point
from tsd.codec.const import FAMILY
from tsd.config import StorageConfig
from tsd.stats import StatsRegistry
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.write.head_flush import HeadSink, build_head_sink

BASE = 1356998400


def _key(series: int, hour: int) -> bytes:
    # metric uid 1, base time, one tag pair (3-byte uids: the default layout)
    return b"\x00\x00\x01" + (BASE + 3600 * hour).to_bytes(4, "big") + series.to_bytes(6, "big")


async def test_close_without_a_log_writes_every_row_past_its_budget(tmp_path: Path) -> None:
    """No write-ahead log: rows left in memory when the close budget runs out would be
    lost. The close keeps writing past its budget (a budget of 0 ends before any row)."""
    cfg = StorageConfig(data_dir=str(tmp_path))
    storage = EmbeddedStorage(tmp_path)
    try:
        await ensure_tables(storage, cfg)
        sink = build_head_sink(storage, cfg, StatsRegistry(), wal=None, wall_clock=lambda: 0.0)
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for series in range(1200):  # more than one write-out chunk
            points = [encode_point(BASE + 10 * i, series + i * 0.5)[1:] for i in range(30)]
            rows[_key(series, 0)] = dict(points)
        _, runs = HeadSink.encode(rows)
        sink.add(runs, None)
        await sink.close(0.0)
        assert len(sink.head) == 0
        found = await storage.get_many(cfg.data_table, sorted(rows), (FAMILY,))
        assert {r.key: [(c.qualifier, c.value) for c in r.cells] for r in found} == {
            key: [compact_row(list(cells.items()))] for key, cells in rows.items()
        }
    finally:
        await storage.close()


async def test_write_outs_run_one_at_a_time(tmp_path: Path) -> None:
    """A tool's write-out request, the tick and the stop may ask at once: each takes the
    rows the one before left, so no point is written or released twice."""
    cfg = StorageConfig(data_dir=str(tmp_path))
    storage = EmbeddedStorage(tmp_path)
    try:
        await ensure_tables(storage, cfg)
        sink = build_head_sink(storage, cfg, StatsRegistry(), wal=None, wall_clock=lambda: 0.0)
        rows = {
            _key(series, 0): dict(encode_point(BASE + 10 * i, i)[1:] for i in range(20))
            for series in range(600)
        }
        _, runs = HeadSink.encode(rows)
        sink.add(runs, None)
        written = await asyncio.gather(sink.flush_all(), sink.flush_all(), sink.flush_due())
        assert list(written) == [600, 0, 0]
        assert (len(sink.head), sink.head.points, sink.head.bytes) == (0, 0, 0)
        found = await storage.get_many(cfg.data_table, sorted(rows), (FAMILY,))
        assert {r.key: [(c.qualifier, c.value) for c in r.cells] for r in found} == {
            key: [compact_row(list(cells.items()))] for key, cells in rows.items()
        }
    finally:
        await storage.close()


def _closing_sink(storage: EmbeddedStorage, cfg: StorageConfig, now: list[float]) -> HeadSink:
    """A head on ``storage`` whose clock is ``now[0]``: a grace of 60 s, 40 closed rows
    written a flush."""
    flusher = build_head_sink(storage, cfg, StatsRegistry(), wal=None, wall_clock=lambda: 0.0)
    return HeadSink(
        flusher._flusher,
        StatsRegistry(),
        max_bytes=cfg.head_max_bytes,
        grace_s=60,
        wal=None,
        wall_clock=lambda: now[0],
        closed_per_flush=40,
    )


async def test_closed_rows_are_written_a_flush_at_a_time(tmp_path: Path) -> None:
    """Closed rows go out at most closed_per_flush per flush (an hour of many series
    closing at once does not hold the writer): every one of them, over several flushes."""
    cfg = StorageConfig(data_dir=str(tmp_path))
    storage = EmbeddedStorage(tmp_path)
    try:
        await ensure_tables(storage, cfg)
        now = [BASE + 7200.0]  # hour 0 ended long ago
        sink = _closing_sink(storage, cfg, now)
        rows = {_key(series, 0): dict([encode_point(BASE, series)[1:]]) for series in range(100)}
        _, runs = HeadSink.encode(rows)
        sink._add(runs)
        now[0] += 61  # no point for longer than the grace: every row is closed
        written = [await sink.flush_due() for _ in range(4)]
        assert written == [40, 40, 20, 0]
        assert len(sink.head) == 0
        found = await storage.get_many(cfg.data_table, sorted(rows), (FAMILY,))
        assert len(found) == 100
    finally:
        await storage.close()
