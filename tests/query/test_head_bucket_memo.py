"""The head rows' buckets a rollup read remembers (tsd/query/head_buckets.py BucketMemo):
the answers stay the raw data's while the rows change under the memo.

A real engine over a real embedded store and head (tests/query/tsdb_harness.py), the
default rollup configuration (hourly rollups, read by ``1h-avg``). Each check asks the
same query from the raw data (``ROLLUP_RAW``) and transparently (tsd's own rollups, the
head's rows through the memo) and wants the same answer; the rows the read decoded are
counted at the decode step, so a check also says which rows came from the memo.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.query.tsdb_harness import QueryHarness, embedded_harness
from tsd.codec import KeyLayout, encode_point
from tsd.config import StorageConfig
from tsd.head import Head
from tsd.protocol.rollup_config import default_rollup_config
from tsd.query import reader
from tsd.query.decode import RowPoints
from tsd.query.downsample import row_buckets
from tsd.query.head_buckets import BucketMemo
from tsd.query.head_rows import decode_head_runs
from tsd.query_spec import DownsampleSpec
from tsd.storage.base import ScanSpec
from tsd.write.head_flush import HeadSink

T0 = 1356998400  # 2013-01-01 00:00:00 UTC
HOSTS = "abc"
LAYOUT = KeyLayout.from_storage_config(StorageConfig())

Point = tuple[str, dict[str, str], int, Any]


def _hours(hours: range, step: int = 600) -> list[Point]:
    """Every host, a point every ``step`` s over ``hours``; values differ by host and
    hour, with doubles, so each hour's average is its own."""
    return [
        ("m", {"host": h}, T0 + hour * 3600 + s, (s // step) * (n + 1) + hour + 0.25 * n)
        for n, h in enumerate(HOSTS)
        for hour in hours
        for s in range(0, 3600, step)
    ]


def _body(aggregator: str, usage: str | None, delete: bool = False) -> dict[str, Any]:
    sub: dict[str, Any] = {
        "aggregator": aggregator,
        "metric": "m",
        "downsample": "1h-avg",
        "tags": {"host": "*"} if aggregator == "none" else {},
    }
    if usage is not None:
        sub["rollupUsage"] = usage
    body: dict[str, Any] = {"start": T0, "end": T0 + 2 * 86400, "queries": [sub]}
    if delete:
        body["delete"] = True
    return body


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The head rows each read decoded (reader._decode_head: not remembered ones)."""
    counts: list[int] = []
    real = reader._decode_head

    def counting(runs: Any, layout: Any, buckets: Any) -> Any:
        counts.append(len(runs.keys))
        return real(runs, layout, buckets)

    monkeypatch.setattr(reader, "_decode_head", counting)
    return counts


async def _same_as_raw(harness: QueryHarness, decoded: list[int]) -> int:
    """Both aggregations from the rollups equal their raw answers; the head rows the
    rollup reads decoded (the raw reads are not counted)."""
    before = len(decoded)
    rows = 0
    for aggregator in ("sum", "none"):
        raw_before = len(decoded)
        raw = await harness.query(body=_body(aggregator, "ROLLUP_RAW"))
        del decoded[raw_before:]
        mark = len(decoded)
        rolled = await harness.query(body=_body(aggregator, None))
        rows += sum(decoded[mark:])
        assert rolled == raw, (aggregator, raw, rolled)
        assert raw  # the data is there
    assert len(decoded) >= before
    return rows


def _run(directory: Path, check: Any) -> None:
    async def run() -> None:
        async with embedded_harness(directory, rollups=default_rollup_config("tsdb")) as harness:
            await check(harness)

    asyncio.run(run())


def test_a_point_added_to_a_remembered_hour_changes_the_answer(
    tmp_path: Path, decoded: list[int]
) -> None:
    async def check(harness: QueryHarness) -> None:
        await harness.load(_hours(range(5)))
        assert await _same_as_raw(harness, decoded) == 5 * len(HOSTS)  # first read: all
        assert await _same_as_raw(harness, decoded) == 0  # every hour remembered
        sum_before = await harness.query(body=_body("sum", None))
        # a point in hour 2 of host b after its last one (the row stays clean, read as
        # runs): that row alone is read again
        await harness.load([("m", {"host": "b"}, T0 + 2 * 3600 + 3599, 1e6)])
        assert await _same_as_raw(harness, decoded) == 1
        # one out of order (the row is then read as cells): the answer changes again
        await harness.load([("m", {"host": "b"}, T0 + 2 * 3600 + 601, -1e6)])
        after = await harness.query(body=_body("sum", None))
        hour = str(T0 + 2 * 3600)
        assert after[0]["dps"][hour] != sum_before[0]["dps"][hour]
        assert {t: v for t, v in after[0]["dps"].items() if t != hour} == {
            t: v for t, v in sum_before[0]["dps"].items() if t != hour
        }
        assert await _same_as_raw(harness, decoded) == 0  # the other rows: remembered
        # a point of a new series in a remembered hour: its own row, the others stay
        await harness.load([("m", {"host": "d"}, T0 + 3600 + 5, 7)])
        assert await _same_as_raw(harness, decoded) == 1

    _run(tmp_path / "db", check)


def test_rows_written_out_and_their_slots_reused(tmp_path: Path, decoded: list[int]) -> None:
    # Rows leave the head (their slots freed, then taken by rows of new hours); late
    # points for hours written out merge with their stored rows: never a bucket of a
    # row that left.
    async def check(harness: QueryHarness) -> None:
        await harness.load(_hours(range(3)))
        assert await _same_as_raw(harness, decoded) == 3 * len(HOSTS)
        await harness.write_out()
        assert harness.head is not None
        assert not len(harness.head.head)
        await harness.load(_hours(range(3, 6)))  # new rows in the freed slots
        assert await _same_as_raw(harness, decoded) == 3 * len(HOSTS)
        assert await _same_as_raw(harness, decoded) == 0
        await harness.load([("m", {"host": "a"}, T0 + 3600 + 7, -3.5)])  # a late point
        assert await _same_as_raw(harness, decoded) == 0  # merged with its stored row
        await harness.load(_hours(range(6, 7), step=900))
        assert await _same_as_raw(harness, decoded) == len(HOSTS)

    _run(tmp_path / "db", check)


def test_a_delete_drops_every_row_it_read(tmp_path: Path, decoded: list[int]) -> None:
    # delete=true drops the rows it read: the remembered ones are handed over row by row
    async def check(harness: QueryHarness) -> None:
        await harness.load(_hours(range(4)))
        await _same_as_raw(harness, decoded)
        assert harness.head is not None
        assert len(harness.head.head) == 4 * len(HOSTS)
        await harness.query(body=_body("sum", None, delete=True))
        assert not len(harness.head.head)
        assert await harness.query(body=_body("sum", "ROLLUP_RAW")) == []

    _run(tmp_path / "db", check)


def test_remembered_rows_are_the_decoded_buckets() -> None:
    # The memo's parts, row by row and a row per series, hold what decoding gives.
    head = Head(LAYOUT)
    rows: dict[bytes, dict[bytes, bytes]] = {}
    rng = np.random.default_rng(3)
    for series in range(4):
        for hour in range(6):
            key = b"\x00\x00\x01" + (T0 + 3600 * hour).to_bytes(4, "big")
            key += b"\x00\x00\x01" + bytes([0, 0, series])
            cells = {}
            for s in sorted(rng.choice(3600, size=5, replace=False).tolist()):
                _, q, v = encode_point(T0 + 3600 * hour + s, float(rng.normal()))
                cells[q] = v
            rows[key] = cells
    _, runs = HeadSink.encode(rows)
    head.add_runs(runs, 0, 0.0)
    spec = DownsampleSpec("1h-avg", 3_600_000, "avg")
    buckets = row_buckets(spec, T0 * 1000 + 3_600_000)  # the first hour before the seek
    assert buckets is not None
    memo = BucketMemo(LAYOUT)
    first = head.snapshot([ScanSpec()])
    assert memo.recall(first, buckets) is None  # nothing remembered yet
    runs_all, _ = first.remaining()
    want = decode_head_runs(runs_all, LAYOUT, buckets)
    memo.remember(runs_all, buckets, want)
    by_row = {
        k: (want.timestamps[a:b].tolist(), want.values[a:b].tolist())
        for k, a, b in zip(
            runs_all.keys,
            want.row_offsets[:-1].tolist(),
            want.row_offsets[1:].tolist(),
            strict=True,
        )
        if b > a
    }
    for by_series in (False, True):
        snapshot = head.snapshot([ScanSpec()])
        found = memo.recall(snapshot, buckets, by_series=by_series)
        assert found is not None
        keys, points, count = found
        assert count == len(by_row) == 4 * 5  # the hour before the seek is not remembered
        left, _ = snapshot.remaining()
        assert len(left.keys) == 4  # ... and is read
        assert len(keys) == (4 if by_series else count)
        got = _points_by_row(keys, points, by_series)
        assert got == by_row
        # the limits count what decoding counts
        rows_read = [i for i, k in enumerate(runs_all.keys) if k in by_row]
        assert points.stored_bytes == _stored(runs_all.keys, want, rows_read, head)


def _points_by_row(
    keys: list[bytes], points: RowPoints, by_series: bool
) -> dict[bytes, tuple[list[int], list[float]]]:
    """Each row's buckets; a series' buckets (by_series) parted by hour into its rows."""
    out: dict[bytes, tuple[list[int], list[float]]] = {}
    offsets = points.row_offsets.tolist()
    for k, a, b in zip(keys, offsets[:-1], offsets[1:], strict=True):
        ts, values = points.timestamps[a:b].tolist(), points.values[a:b].tolist()
        if not by_series:
            out[k] = (ts, values)
            continue
        assert ts == sorted(ts)
        for t, v in zip(ts, values, strict=True):
            row = k[:3] + (t // 1000).to_bytes(4, "big") + k[7:]
            out[row] = ([t], [v])
    return out


def _stored(keys: list[bytes], points: RowPoints, rows: list[int], head: Head) -> int:
    total = 0
    for i in rows:
        row = head.get(keys[i])
        assert row is not None
        total += len(keys[i]) * row.count + len(row.qualifiers) + len(row.values)
    return total


def test_series_numbers_are_bounded_by_the_slots() -> None:
    # Series come and go (each hour new ones, the old rows written out, their slots
    # reused): the series numbers are dropped with every entry once they outnumber twice
    # the slots (here every third hour), and the memo goes on answering as decoding does.
    head = Head(LAYOUT)
    memo = BucketMemo(LAYOUT)
    spec = DownsampleSpec("1h-avg", 3_600_000, "avg")
    buckets = row_buckets(spec, T0 * 1000)
    assert buckets is not None
    numbered = []
    for hour in range(8):
        rows = {}
        for series in range(10):
            _, qualifier, value = encode_point(T0 + 3600 * hour + 60, series + 0.5)
            rows[_row_key(hour * 10 + series, hour)] = {qualifier: value}
        _, runs = HeadSink.encode(rows)
        head.add_runs(runs, hour, 0.0)
        snapshot = head.snapshot([ScanSpec()])
        assert memo.recall(snapshot, buckets) is None  # new rows only
        fresh, _ = snapshot.remaining()
        memo.remember(fresh, buckets, decode_head_runs(fresh, LAYOUT, buckets))
        again = memo.recall(head.snapshot([ScanSpec()]), buckets)
        assert again is not None
        keys, recalled, count = again
        assert count == 10
        assert sorted(keys) == sorted(rows)  # a row a series
        assert sorted(recalled.values.tolist()) == [s + 0.5 for s in range(10)]
        numbered.append(len(memo._series))
        for key in rows:
            taken = head.take(key)
            assert taken is not None
            head.release(taken)
    assert numbered == [10, 20, 30, 10, 20, 30, 10, 20]


def _row_key(series: int, hour: int) -> bytes:
    key = b"\x00\x00\x01" + (T0 + 3600 * hour).to_bytes(4, "big")
    return key + b"\x00\x00\x01" + series.to_bytes(3, "big")
