"""Retention of the embedded store (tsd.storage.embedded.retention) under a steady load of
several simulated days: expired hours leave queries and the store's file stops growing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tsd.config import Config, CoreConfig, StorageConfig, load_config
from tsd.errors import ConfigError
from tsd.model import make_tags
from tsd.protocol.query_json import parse_query_params
from tsd.query.engine import QueryEngine
from tsd.schema import ensure_tables
from tsd.stats import StatsRegistry
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService
from tsd.write.schedule import CompactionSchedule
from tsd.write.writer import Writer

T0 = 1_356_998_400
DAY = 86_400
SERIES = 20
STEP = 120


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def load_days(path: Path, days: int, retention_s: int) -> tuple[list[int], Config]:
    """Write ``days`` of points (compacting and applying retention as the daemon would, on
    a simulated clock); the store file's size at the end of each day."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True),
        storage=StorageConfig(data_dir=str(path), embedded_retention_s=retention_s),
    )
    storage = EmbeddedStorage(path)
    sizes = []
    try:
        await ensure_tables(storage, cfg.storage)
        clock = Clock(T0)
        writer = Writer(
            storage,
            cfg.storage,
            StatsRegistry(),
            schedule=CompactionSchedule(grace_s=0, spread_s=0),
            wall_clock=clock,
        )
        writer.start()
        ingest = IngestService(writer, UidService(storage, cfg), cfg.storage)
        refs = [
            await ingest.resolve("sys.load", make_tags({"host": f"h{i}"})) for i in range(SERIES)
        ]
        for ts in range(T0, T0 + days * DAY, STEP):
            clock.now = ts
            for i, ref in enumerate(refs):
                writer.add_to(ref, ts, (ts // STEP * 7 + i) % 1000 / 100)
            if ts % 3600 == 0:
                await writer.flush()
                await writer.compact_due()
                await writer.apply_retention()
            if (ts - T0) % DAY == DAY - STEP:
                sizes.append((path / "data.mdb").stat().st_size)
        await writer.close()
    finally:
        await storage.close()
    return sizes, cfg


async def query_span(path: Path, cfg: Config, days: int) -> tuple[int, int]:
    """(first, last) timestamp in ms of a query over every day written."""
    storage = EmbeddedStorage(path, read_only=True)
    try:
        engine = QueryEngine(storage, UidService(storage, cfg), cfg)
        query = parse_query_params(
            {"start": [str(T0)], "end": [str(T0 + days * DAY)], "m": ["sum:sys.load"]}
        )
        result = await engine.execute(query)
        stamps = result.series[0].dps.timestamps
        return int(stamps[0]), int(stamps[-1])
    finally:
        await storage.close()


async def test_expired_hours_leave_queries_and_the_file_stops_growing(tmp_path: Path) -> None:
    days = 5
    sizes, cfg = await load_days(tmp_path / "kept", days, retention_s=DAY)
    last_ts = T0 + days * DAY - STEP
    first, last = await query_span(tmp_path / "kept", cfg, days)
    assert last == last_ts * 1000
    # what remains: the last day and the hour the cut-off falls in, nothing older
    cutoff = last_ts - DAY
    assert cutoff - cutoff % 3600 <= first // 1000 <= cutoff
    storage = EmbeddedStorage(tmp_path / "kept", read_only=True)
    try:
        rows = [row async for row in storage.scan(cfg.storage.data_table, ScanSpec())]
    finally:
        await storage.close()
    hours = {int.from_bytes(row.key[3:7], "big") for row in rows}
    assert min(hours) == cutoff - cutoff % 3600
    # steady load: once a day is dropped per day written, the file stays as it is
    assert sizes[-1] == sizes[2], sizes

    # the same load kept forever: the file grows every day, and every point is queried
    forever, cfg = await load_days(tmp_path / "forever", days, retention_s=0)
    assert forever == sorted(set(forever)), forever  # larger every day
    assert forever[-1] - forever[2] >= forever[2] - forever[1], forever
    first, _ = await query_span(tmp_path / "forever", cfg, days)
    assert first == T0 * 1000


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0), ("30d", 30 * DAY), ("12h", 43_200), ("7200", 7200)]
)
def test_retention_setting(tmp_path: Path, text: str, seconds: int) -> None:
    conf = tmp_path / "opentsdb.conf"
    conf.write_text(f"tsd.storage.embedded.retention = {text}\n")
    assert load_config(str(conf)).storage.embedded_retention_s == seconds


@pytest.mark.parametrize("text", ["30 days", "10m", "-1d", "d"])
def test_bad_retention_settings_are_refused(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "opentsdb.conf"
    conf.write_text(f"tsd.storage.embedded.retention = {text}\n")
    with pytest.raises(ConfigError, match="retention"):
        load_config(str(conf))


def test_retention_is_off_by_default() -> None:
    assert dataclasses.replace(StorageConfig()).embedded_retention_s == 0
