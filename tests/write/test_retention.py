"""Retention of the embedded store (tsd.storage.embedded.retention) under a steady load of
several simulated days: expired hours leave queries and the store's file stops growing."""

from __future__ import annotations

import calendar
import dataclasses
import time
from pathlib import Path

import orjson
import pytest

from tsd.codec import KeyLayout
from tsd.codec.rollup import rollup_row_key
from tsd.config import Config, CoreConfig, StorageConfig, load_config
from tsd.data_points import make_tags
from tsd.errors import ConfigError
from tsd.protocol.query_json import parse_query_json, parse_query_params
from tsd.protocol.rollup_config import default_rollup_config, parse_rollup_config
from tsd.query.engine import QueryEngine
from tsd.stats import StatsRegistry
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables, rollup_setup
from tsd.tools.common import own_rollups
from tsd.uid.service import UidService
from tsd.write.head_flush import build_head_sink
from tsd.write.ingest import IngestService
from tsd.write.retention import HOUR_ROWS, first_kept, row_spans
from tsd.write.rollup import put_rollup_cells
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


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
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


# -- rollup and pre-aggregate tables (tsd's own rollups, default configuration) ------------

MONTHS = [calendar.timegm((2013, m, 1, 0, 0, 0)) for m in range(1, 5)]  # Jan..Apr 2013
RETENTION = 10 * DAY
END = calendar.timegm((2013, 3, 20, 1, 0, 0))
ROLLUP_SERIES = 3
ROLLUP_STEP = 600
HOUR = 3600


def month_of(ts: int) -> int:
    """The base time of the calendar month holding ``ts`` (from the test's own table)."""
    return max(m for m in MONTHS if m <= ts)


def month_end(base: int) -> int:
    return MONTHS[MONTHS.index(base) + 1]


async def row_bases(storage: EmbeddedStorage, table: str, at: int) -> list[int]:
    """The base time of every row of ``table``, in key order (one metric: time order per
    series)."""
    keys = [k async for batch in storage.scan_keys(table, ScanSpec()) for k in batch]
    return [int.from_bytes(k[at : at + 4], "big") for k in keys]


async def rollup_query(engine: QueryEngine, usage: str) -> list[tuple[int, float]]:
    body = {
        "start": T0,
        "end": END,
        "queries": [
            {"aggregator": "sum", "metric": "sys.load", "downsample": "1h-sum",
             "rollupUsage": usage}
        ],
    }  # fmt: skip
    result = await engine.execute(parse_query_json(orjson.dumps(body)))
    dps = result.series[0].dps
    return [(int(t) // 1000, float(v)) for t, v in zip(dps.timestamps, dps.values, strict=True)]


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_rollup_rows_go_once_their_whole_span_is_past_the_cutoff(tmp_path: Path) -> None:
    """Three series every 10 minutes from January to March 20th through the head and its
    rollup computation (as the daemon writes them on the embedded store), a retention of
    ten days applied every hour on a simulated clock; pre-aggregate cells stored for every
    month (month rows) and every 12 hours (hour rows). Every day: each table holds exactly
    the rows whose whole span ends after the cut-off (a month row partly inside stays)."""
    path = tmp_path / "store"
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True),
        storage=StorageConfig(data_dir=str(path), embedded_retention_s=RETENTION, head_grace_s=0),
    )
    setup = rollup_setup(cfg)
    assert setup.computes  # the embedded store's default
    assert setup.effective is not None
    rollup_table, agg_table, preagg_table = "tsdb-rollup-1h", "tsdb-rollup-agg-1h", "tsdb-preagg"
    assert {rollup_table, agg_table, preagg_table} <= set(setup.tables())
    layout = KeyLayout.from_storage_config(cfg.storage)
    at = layout.tags_start - 4
    computed = own_rollups(cfg)
    storage = EmbeddedStorage(path)
    clock = Clock(T0)
    sizes: dict[str, int] = {}
    written: dict[str, set[int]] = {agg_table: set(), preagg_table: set()}
    try:
        await ensure_tables(storage, cfg.storage, setup.tables())
        registry = StatsRegistry()
        sink = build_head_sink(
            storage, cfg.storage, registry, wal=None, wall_clock=clock, rollups=computed
        )
        writer = Writer(
            storage, cfg.storage, registry, head=sink, wall_clock=clock,
            rollup_intervals=setup.intervals(),
        )  # fmt: skip
        writer.start()
        uids = UidService(storage, cfg)
        ingest = IngestService(writer, uids, cfg.storage)
        refs = [
            await ingest.resolve("sys.load", make_tags({"host": f"h{i}"}))
            for i in range(ROLLUP_SERIES)
        ]
        for ts in range(T0, END + 1, ROLLUP_STEP):
            clock.now = ts
            if ts % HOUR:
                for i, ref in enumerate(refs):
                    writer.add_to(ref, ts, ts // ROLLUP_STEP % 6 + i)
                continue
            await writer.flush()
            await sink.flush_due()  # the hours closed, and their rollups
            await writer.apply_retention()
            for i, ref in enumerate(refs):
                writer.add_to(ref, ts, ts // ROLLUP_STEP % 6 + i)
            if ts == T0 + HOUR:  # pre-aggregates of the first series, from its row key
                first = ScanSpec(limit=1)
                data_keys = storage.scan_keys(cfg.storage.data_table, first)
                key = [k async for batch in data_keys for k in batch][0]
                months = MONTHS[:3]
                hours = range(T0, END, 12 * HOUR)
                for table, bases, qualifier in (
                    (agg_table, months, b"\x00\x00\x00"),
                    (preagg_table, hours, b"\x00\x00"),
                ):
                    cells = [(rollup_row_key(key, b, layout.tags_start), qualifier, b"\x01")
                             for b in bases]  # fmt: skip
                    await put_rollup_cells(storage, table, cells)
                    written[table].update(bases)
            if ts % DAY or ts == T0:
                continue
            cutoff = ts - RETENTION - (ts - RETENTION) % HOUR
            # rollup rows: one per series and month written (up to the last hour written)
            months_written = {month_of(h) for h in range(T0, ts, HOUR)}
            kept = sorted(m for m in months_written if month_end(m) > cutoff)
            bases = await row_bases(storage, rollup_table, at)
            assert sorted(set(bases)) == kept, (ts, cutoff, bases)
            assert len(bases) == ROLLUP_SERIES * len(kept)
            assert await row_bases(storage, agg_table, at) == sorted(
                m for m in written[agg_table] if month_end(m) > cutoff
            )
            assert await row_bases(storage, preagg_table, at) == sorted(
                h for h in written[preagg_table] if h + HOUR > cutoff
            )
            data = set(await row_bases(storage, cfg.storage.data_table, at))
            assert min(data) == (cutoff if ts - RETENTION > T0 else T0), (ts, min(data))
            if clock.now - T0 >= 19 * DAY and time.gmtime(ts).tm_mday in (10, 20):
                day = time.strftime("%m-%d", time.gmtime(ts))
                sizes[day] = (await storage.table_bytes())[rollup_table]
        await writer.close()
        engine = QueryEngine(storage, uids, cfg, wall_clock=clock)
        engine.rollups = setup.effective
        engine.computed = computed
        rolled = await rollup_query(engine, "ROLLUP_NOFALLBACK")
        raw = await rollup_query(engine, "ROLLUP_RAW")
    finally:
        await storage.close()
    final_cutoff = END - RETENTION - (END - RETENTION) % HOUR
    # March's month row is partly inside the ten days: whole, from March 1st; February's is gone
    stamps = [t for t, _ in rolled]
    assert (stamps[0], stamps[-1]) == (MONTHS[2], END), rolled[:3]
    assert (raw[0][0], raw[-1][0]) == (final_cutoff, END), raw[:3]
    assert rolled[stamps.index(final_cutoff) :] == raw  # the same where both have hours
    # steady load: on the 20th the table holds the month's first 19 days (the same cells
    # every month), on the 10th also the previous month, partly inside; never more than in
    # the first month (its pages may differ by LMDB's layout, not by growing)
    assert sizes["03-20"] <= sizes["02-20"] <= sizes["01-20"], sizes
    assert sizes["03-10"] <= sizes["02-10"], sizes
    assert sizes["02-20"] < sizes["02-10"], sizes
    assert sizes["03-20"] < sizes["03-10"], sizes


INTERVAL_OF_SPAN = {"1h": "5m", "6h": "30m", "1d": "1h", "1n": "1h", "1y": "1d"}


@pytest.mark.parametrize(
    ("row_span", "cutoff", "kept"),
    [
        # a row goes once its whole span ends at or before the cut-off
        ("1h", (2013, 3, 10, 5, 0), (2013, 3, 10, 5, 0)),
        ("6h", (2013, 3, 10, 5, 0), (2013, 3, 10, 0, 0)),
        ("6h", (2013, 3, 10, 6, 0), (2013, 3, 10, 6, 0)),
        ("1d", (2013, 3, 10, 23, 0), (2013, 3, 10, 0, 0)),
        ("1n", (2013, 3, 1, 0, 0), (2013, 3, 1, 0, 0)),  # February ended: gone
        ("1n", (2013, 2, 28, 23, 0), (2013, 2, 1, 0, 0)),  # February partly inside: kept
        ("1y", (2013, 12, 31, 23, 0), (2013, 1, 1, 0, 0)),
    ],
)
def test_first_row_kept_by_row_span(
    row_span: str, cutoff: tuple[int, ...], kept: tuple[int, ...]
) -> None:
    config = parse_rollup_config(
        orjson.dumps(
            {
                "aggregationIds": {"sum": 0},
                "intervals": [
                    {"table": "tsdb", "preAggregationTable": "tsdb-agg", "interval": "1m",
                     "rowSpan": "1h", "defaultInterval": True},
                    {"table": "r", "preAggregationTable": "p",
                     "interval": INTERVAL_OF_SPAN[row_span], "rowSpan": row_span},
                ],
            }
        )
    )  # fmt: skip
    spans = row_spans("tsdb", config.intervals)
    assert spans["r"] == spans["p"] == (config.intervals[1].span,)
    at = calendar.timegm((*cutoff, 0))
    assert first_kept(at, spans["r"]) == calendar.timegm((*kept, 0))
    # the data table and the default interval's tables: hours
    assert first_kept(at, spans["tsdb"]) == first_kept(at, spans["tsdb-agg"]) == at - at % 3600


def test_a_table_of_two_spans_keeps_every_row_partly_inside() -> None:
    config = default_rollup_config("tsdb")
    month = config.intervals[1].span
    spans = row_spans("tsdb", [*config.intervals, dataclasses.replace(config.intervals[1])])
    assert spans["tsdb-rollup-1h"] == (month,)
    day = calendar.timegm((2013, 3, 10, 0, 0, 0))
    assert first_kept(day, (HOUR_ROWS, month)) == calendar.timegm((2013, 3, 1, 0, 0, 0))
