"""The query engine end to end on a real store: write path in, OpenTSDB's JSON out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.query.tsdb_harness import NOW_MS, QueryHarness, query_harness
from tsd.codec import KeyLayout, encode_annotation_qualifier, encode_row_key, salt_bucket
from tsd.config import StorageConfig, build_config
from tsd.daemon import Daemon
from tsd.errors import BadRequestError, IllegalDataError, NoSuchUniqueName
from tsd.query.last import LastPointQuery, LastPointSubQuery, parse_last_query_params
from tsd.server.http.render import render_last_points
from tsd.storage.base import CellBlock, Put, ReadStats, Row, ScanSpec, Storage
from tsd.storage.embedded import EmbeddedStorage

T0 = 1356998400  # 2013-01-01 00:00:00 UTC, an hour boundary


Point = tuple[str, dict[str, str], int, Any]


def _series(
    metric: str, tags: dict[str, str], start: int, step: int, values: list[Any]
) -> list[Point]:
    return [(metric, tags, start + i * step, v) for i, v in enumerate(values)]


@pytest.fixture
async def harness(storage: Storage, storage_config: StorageConfig) -> AsyncIterator[QueryHarness]:
    async with query_harness(storage, storage_config) as h:
        yield h


async def test_sum_of_two_series_keeps_integers(harness: QueryHarness) -> None:
    await harness.load(
        _series("sys.cpu", {"host": "a"}, T0, 10, [1, 2, 3])
        + _series("sys.cpu", {"host": "b"}, T0, 10, [10, 20, 30])
    )
    answer = await harness.query({"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:sys.cpu"]})
    assert answer == [
        {
            "metric": "sys.cpu",
            "tags": {},
            "aggregateTags": ["host"],
            "dps": {str(T0): 11, str(T0 + 10): 22, str(T0 + 20): 33},
        }
    ]


async def test_group_by_orders_groups_by_tag_value_uid(harness: QueryHarness) -> None:
    # "zeta" is written first, so it gets the smaller tagv UID and comes first.
    await harness.load(
        _series("m", {"host": "zeta", "dc": "x"}, T0, 60, [1.5, 2.5])
        + _series("m", {"host": "alpha", "dc": "x"}, T0, 60, [7, 8])
    )
    answer = await harness.query(
        {"start": [str(T0)], "end": [str(T0 + 600)], "m": ["avg:m{host=*}"]}
    )
    assert [(a["tags"], a["aggregateTags"]) for a in answer] == [
        ({"dc": "x", "host": "zeta"}, []),
        ({"dc": "x", "host": "alpha"}, []),
    ]
    assert answer[0]["dps"] == {str(T0): 1.5, str(T0 + 60): 2.5}
    assert answer[1]["dps"] == {str(T0): 7, str(T0 + 60): 8}


async def test_unknown_metric_is_a_400_with_opentsdb_message(harness: QueryHarness) -> None:
    with pytest.raises(NoSuchUniqueName) as caught:
        await harness.query({"start": [str(T0)], "m": ["sum:nope"]})
    assert (caught.value.status, caught.value.message) == (
        400,
        "No such name for 'metrics': 'nope'",
    )


async def test_unknown_tag_value_fails_unless_skipped(
    storage: Storage, storage_config: StorageConfig
) -> None:
    points = _series("m", {"host": "a"}, T0, 10, [1, 2])
    params = {"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:m{host=a|ghost}"]}
    async with query_harness(storage, storage_config) as strict:
        await strict.load(points)
        with pytest.raises(NoSuchUniqueName, match="No such name for 'tagv': 'ghost'"):
            await strict.query(params)
    async with query_harness(
        storage, storage_config, query_options={"skip_unresolved_tagvs": True}
    ) as lenient:
        answer = await lenient.query(params)
        assert answer[0]["dps"] == {str(T0): 1, str(T0 + 10): 2}
        only_ghost = {**params, "m": ["sum:m{host=ghost}"]}
        assert await lenient.query(only_ghost) == []


async def test_downsample_then_rate_over_compacted_and_single_cells(harness: QueryHarness) -> None:
    # Two hours of a counter at 10 s; the first hour gets compacted, the second stays single.
    await harness.load(_series("net.bytes", {"if": "eth0"}, T0, 10, list(range(0, 7200, 10))))
    await harness.compact()
    await harness.load(
        _series("net.bytes", {"if": "eth0"}, T0 + 7200, 10, list(range(7200, 7320, 10)))
    )
    m = "sum:1m-avg:rate:net.bytes"
    answer = await harness.query({"start": [str(T0)], "end": [str(T0 + 7260)], "m": [m]})
    dps = answer[0]["dps"]
    # 1 unit per second everywhere; the first minute's rate is against (0, 0) and dropped.
    assert set(dps.values()) == {1.0}
    assert str(T0) not in dps
    assert (str(T0 + 60), str(T0 + 7260)) == (min(dps), max(dps))


async def test_limits_answer_413_with_opentsdb_message(
    storage: Storage, storage_config: StorageConfig
) -> None:
    async with query_harness(
        storage, storage_config, query_options={"limits_data_points_default": 5}
    ) as h:
        await h.load(_series("m", {"host": "a"}, T0, 10, list(range(10))))
        with pytest.raises(BadRequestError) as caught:
            await h.query({"start": [str(T0)], "end": [str(T0 + 600)], "m": ["sum:m"]})
    assert caught.value.status == 413
    assert caught.value.message.startswith(
        "Sorry, you have attempted to fetch more than our limit of 5 data points."
    )


async def test_annotations_of_the_series_and_global_ones(harness: QueryHarness) -> None:
    await harness.load(_series("m", {"host": "a"}, T0, 10, [1, 2]))
    layout = KeyLayout.from_storage_config(harness.config.storage)
    table = harness.config.storage.data_table
    # The row's key (its points may still be in the head: the annotation's stored row and
    # the head's points are read as one row).
    metric, tagk, tagv = (
        await harness.uids.metrics.get_id("m"),
        await harness.uids.tagk.get_id("host"),
        await harness.uids.tagv.get_id("a"),
    )
    key = encode_row_key(layout, metric, T0, [(tagk, tagv)])
    note = (
        b'{"tsuid":"x","startTime":%d,"endTime":0,"description":"deploy","notes":"","custom":null}'
    )
    global_key = encode_row_key(layout, bytes(3), T0, [])
    await harness.storage.put(
        table,
        [
            Put(key, "t", encode_annotation_qualifier(T0 + 5), note % (T0 + 5)),
            Put(global_key, "t", encode_annotation_qualifier(T0 + 7), note % (T0 + 7)),
        ],
    )
    body = {"start": T0, "end": T0 + 60, "queries": [{"aggregator": "sum", "metric": "m"}]}
    answer = await harness.query(body={**body, "globalAnnotations": True})
    assert [n["description"] for n in answer[0]["annotations"]] == ["deploy"]
    assert answer[0]["annotations"][0]["startTime"] == T0 + 5
    assert [n["startTime"] for n in answer[0]["globalAnnotations"]] == [T0 + 7]
    quiet = await harness.query(body={**body, "globalAnnotations": True, "noAnnotations": True})
    assert "annotations" not in quiet[0]
    assert "globalAnnotations" not in quiet[0]


async def test_show_query_tsuids_and_ms_resolution(harness: QueryHarness) -> None:
    await harness.load(_series("m", {"host": "a"}, T0 * 1000 + 250, 500, [1, 2, 3]))
    body = {
        "start": T0 * 1000,
        "end": T0 * 1000 + 5000,
        "msResolution": True,
        "showQuery": True,
        "showTSUIDs": True,
        "queries": [{"aggregator": "sum", "metric": "m", "tags": {"host": "*"}}],
    }
    answer = await harness.query(body=body)
    assert answer[0]["dps"] == {
        str(T0 * 1000 + 250): 1,
        str(T0 * 1000 + 750): 2,
        str(T0 * 1000 + 1250): 3,
    }
    assert answer[0]["tsuids"] == ["000001000001000001"]
    assert answer[0]["query"]["index"] == 0
    assert answer[0]["query"]["filters"] == [
        {"tagk": "host", "filter": "*", "group_by": True, "type": "wildcard"}
    ]
    seconds = await harness.query(body={**body, "msResolution": False, "showQuery": False})
    # Without ms, points in one second keep their own (duplicate) keys; the last one wins
    # in a JSON object parser.
    assert list(seconds[0]["dps"]) == [str(T0), str(T0 + 1)]


async def test_delete_removes_the_rows_it_read(harness: QueryHarness) -> None:
    await harness.load(
        _series("m", {"host": "a"}, T0, 10, [1, 2]) + _series("m", {"host": "b"}, T0, 10, [3, 4])
    )
    params = {"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:m{host=a}"]}
    body = {
        "start": T0,
        "end": T0 + 60,
        "delete": True,
        "queries": [{"aggregator": "sum", "metric": "m", "tags": {"host": "a"}}],
    }
    first = await harness.query(body=body)
    assert first[0]["dps"] == {str(T0): 1, str(T0 + 10): 2}
    assert await harness.query(params) == []
    others = await harness.query({**params, "m": ["sum:m{host=b}"]})
    assert others[0]["dps"] == {str(T0): 3, str(T0 + 10): 4}


async def test_conflicting_duplicates_fail_unless_fixed(
    storage: Storage, storage_config: StorageConfig
) -> None:
    # The same second written as a 1-byte and a 2-byte integer (two qualifiers).
    layout = KeyLayout()
    key = encode_row_key(layout, b"\x00\x00\x01", T0, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    cells = [Put(key, "t", b"\x00\x00", b"\x01"), Put(key, "t", b"\x00\x01", b"\x00\x02")]
    params = {"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:m"]}
    async with query_harness(storage, storage_config) as strict:
        await strict.load(_series("m", {"host": "a"}, T0 + 10, 10, [5]))
        await storage.put(storage_config.data_table, cells)
        with pytest.raises(IllegalDataError, match="Duplicate timestamp for key="):
            await strict.query(params)
    async with query_harness(
        storage, storage_config, storage_options={"fix_duplicates": True}
    ) as lenient:
        answer = await lenient.query(params)
    # The later cell (qualifier 00 01, value 2) wins.
    assert answer[0]["dps"] == {str(T0): 2, str(T0 + 10): 5}


class _StuckScans(EmbeddedStorage):
    """A store whose scans never deliver a row (for the query timeout)."""

    async def holds_rows(self, table: str, start: bytes, stop: bytes) -> bool:
        return True  # the rows are in the head: scanned all the same

    async def scan(self, table: str, spec: ScanSpec) -> AsyncIterator[Row]:  # type: ignore[override]
        await asyncio.Event().wait()
        yield Row(b"", ())  # pragma: no cover - never reached

    async def scan_blocks(  # type: ignore[override]
        self, table: str, spec: ScanSpec, stats: ReadStats | None = None
    ) -> AsyncIterator[CellBlock]:
        await asyncio.Event().wait()
        yield CellBlock.empty()  # pragma: no cover - never reached


async def test_query_timeout_answers_408(tmp_path: Path) -> None:
    store = _StuckScans(tmp_path / "stuck")
    try:
        async with query_harness(store, StorageConfig(), query_options={"timeout_ms": 50}) as h:
            await h.load(_series("m", {"host": "a"}, T0, 10, [1]))
            with pytest.raises(BadRequestError) as caught:
                await h.query({"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:m"]})
        assert caught.value.status == 408
    finally:
        await store.close()


async def test_last_point_without_meta_tracking(harness: QueryHarness) -> None:
    now_s = NOW_MS // 1000
    await harness.load(
        _series("m", {"host": "a"}, now_s - 7200, 60, [1, 2, 2.5])
        + _series("m", {"host": "b"}, now_s - 30, 10, [5])
    )
    found = await harness.engine.last(
        parse_last_query_params({"timeseries": ["m{host=a}"], "resolve": [""]})
    )
    assert [(p.metric, p.tags, p.timestamp_ms, p.value) for p in found] == [
        ("m", {"host": "a"}, (now_s - 7200 + 120) * 1000, "2.5")
    ]
    every = await harness.engine.last(LastPointQuery((LastPointSubQuery(metric="m"),)))
    assert [(p.tsuid, p.value) for p in every] == [
        ("000001000001000001", "2.5"),
        ("000001000001000002", "5"),
    ]
    exact = await harness.engine.last(
        LastPointQuery((LastPointSubQuery(tsuids=("000001000001000002",)),), back_scan=1)
    )
    assert render_last_points(exact) == (
        b'[{"timestamp":%d,"value":"5","tsuid":"000001000001000002"}]' % ((now_s - 30) * 1000)
    )
    # backScan 1 looks at this hour and the previous one only: series a is older.
    recent = await harness.engine.last(
        LastPointQuery((LastPointSubQuery(metric="m", tags={"host": "a"}),), back_scan=1)
    )
    assert recent == []


async def test_salted_tables_scan_every_bucket(
    storage: Storage, storage_config: StorageConfig
) -> None:
    async with query_harness(
        storage, storage_config, storage_options={"salt_width": 1, "salt_buckets": 4}
    ) as h:
        await h.load([("m", {"host": f"h{i}"}, T0 + 10 * j, i) for i in range(8) for j in range(3)])
        answer = await h.query(
            {"start": [str(T0)], "end": [str(T0 + 60)], "m": ["sum:m", "none:m{host=h3|h5}"]}
        )
    assert answer[0]["dps"] == {str(T0 + 10 * j): 28 for j in range(3)}
    # Spans are ordered by salt first (SpanCmp), then by tags: h3 has tagv UID 4, h5 UID 6.
    layout = KeyLayout(salt_width=1, salt_buckets=4)
    salt = {
        name: salt_bucket(layout, b"\x00\x00\x01", b"\x00\x00\x01\x00\x00" + bytes((uid,)))
        for name, uid in (("h3", 4), ("h5", 6))
    }
    expected = sorted(salt, key=lambda name: (salt[name], name))
    assert [a["tags"]["host"] for a in answer[1:]] == expected


# -- over real HTTP, as Grafana asks ---------------------------------------------------------


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    config = build_config(
        {
            "tsd.network.bind": "127.0.0.1",
            "tsd.network.port": "0",
            "tsd.storage.data_dir": str(tmp_path / "data"),
            "tsd.core.auto_create_metrics": "true",
            "tsd.http.query.allow_delete": "true",
        }
    )
    tsd = Daemon(config)
    await tsd.start()
    try:
        yield tsd
    finally:
        await tsd.stop()


async def _put(session: aiohttp.ClientSession, base: str, points: list[Point]) -> None:
    body = [{"metric": m, "tags": t, "timestamp": ts, "value": v} for m, t, ts, v in points]
    async with session.post(f"{base}/api/put?sync", json=body) as reply:
        assert reply.status == 204, await reply.text()


async def test_grafana_queries_over_http(daemon: Daemon) -> None:
    base = f"http://127.0.0.1:{daemon.port}"
    async with aiohttp.ClientSession() as session:
        await _put(
            session,
            base,
            [
                ("sys.cpu.user", {"host": h, "dc": "lga"}, T0 + 10 * i, 10 * n + i)
                for n, h in enumerate(("web01", "web02"))
                for i in range(12)
            ]
            # "sjc" must exist as a tag value (of any metric), or the filter fails the query.
            + [("other", {"host": "db01", "dc": "sjc"}, T0, 1)],
        )
        # G1-like: legacy frontend, ms start, filters with group-by, unknown keys ignored.
        g1 = {
            "start": T0 * 1000,
            "end": (T0 + 119) * 1000,
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": "opentsdb", "uid": "tsd1"},
                    "metric": "sys.cpu.user",
                    "aggregator": "sum",
                    "downsampleAggregator": "avg",
                    "filters": [
                        {"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": True},
                        {"type": "literal_or", "tagk": "dc", "filter": "lga|sjc", "groupBy": False},
                    ],
                    "downsample": "1m-avg",
                }
            ],
            "msResolution": False,
            "globalAnnotations": True,
            "showQuery": True,
        }
        async with session.post(f"{base}/api/query", json=g1) as reply:
            assert reply.status == 200, await reply.text()
            assert reply.headers["Content-Type"] == "application/json; charset=UTF-8"
            answer = await reply.json()
        assert [(a["tags"], a["query"]["index"]) for a in answer] == [
            ({"host": "web01", "dc": "lga"}, 0),
            ({"host": "web02", "dc": "lga"}, 0),
        ]
        assert answer[0]["dps"] == {str(T0): 2.5, str(T0 + 60): 8.5}
        # G4-like: Go backend, seconds, ?arrays=true, rate with dropResets.
        g4 = {
            "start": T0,
            "end": T0 + 119,
            "queries": [
                {
                    "aggregator": "sum",
                    "downsample": "30s-avg",
                    "filters": [
                        {"filter": "web01", "groupBy": True, "tagk": "host", "type": "literal_or"}
                    ],
                    "metric": "sys.cpu.user",
                    "rate": True,
                    "rateOptions": {"counter": True, "dropResets": True},
                }
            ],
        }
        async with session.post(f"{base}/api/query?arrays=true", json=g4) as reply:
            answer = await reply.json()
        assert answer == [
            {
                "metric": "sys.cpu.user",
                "tags": {"host": "web01", "dc": "lga"},
                "aggregateTags": [],
                "dps": [[T0 + 30, 0.1], [T0 + 60, 0.1], [T0 + 90, 0.1]],
            }
        ]
        # Errors are OpenTSDB's JSON.
        bad = {"start": T0, "queries": [{"aggregator": "sum", "metric": "nope"}]}
        async with session.post(f"{base}/api/query", json=bad) as reply:
            assert reply.status == 400
            error = (await reply.json())["error"]
        assert error["message"] == "No such name for 'metrics': 'nope'"
        # GET with fill policies: NaN as a string, null under fill null.
        url = (
            f"{base}/api/query?start={T0}&end={T0 + 239}"
            "&m=sum:1m-avg-nan:sys.cpu.user&m=sum:1m-avg-null:sys.cpu.user"
        )
        async with session.get(url) as reply:
            text = await reply.text()
        assert f'"{T0 + 180}":"NaN"' in text
        assert f'"{T0 + 180}":null' in text


async def test_last_and_delete_over_http(daemon: Daemon) -> None:
    base = f"http://127.0.0.1:{daemon.port}"
    now_s = int(time.time())
    async with aiohttp.ClientSession() as session:
        await _put(session, base, [("m", {"host": "a"}, now_s - 5, 1.5)])
        async with session.get(f"{base}/api/query/last?timeseries=m%7Bhost=a%7D&resolve") as reply:
            assert await reply.json() == [
                {
                    "metric": "m",
                    "timestamp": (now_s - 5) * 1000,
                    "value": "1.5",
                    "tags": {"host": "a"},
                    "tsuid": "000001000001000001",
                }
            ]
        body = {"queries": [{"tsuids": ["000001000001000001"]}], "backScan": 2}
        async with session.post(f"{base}/api/query/last", json=body) as reply:
            assert [p["value"] for p in await reply.json()] == ["1.5"]
        async with session.post(f"{base}/api/query/last", json={"queries": []}) as reply:
            assert reply.status == 400
            assert (await reply.json())["error"]["message"] == "Missing sub queries"
        query = f"{base}/api/query?start={now_s - 60}&m=sum:m"
        async with session.delete(query) as reply:
            assert reply.status == 200
            assert len(await reply.json()) == 1
        async with session.get(query) as reply:
            assert await reply.json() == []
