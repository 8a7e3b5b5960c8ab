"""The head read beside storage answers exactly as the same rows do once written out.

Random writes through the real write path (ingest, writer, head) on a real embedded store:
points in and out of order, the same time again with the same or another value, integers
of every width and floats, seconds and milliseconds in one hour, and late points for
hours already written out (merged into their compacted cell). Before every write-out the
query answer (the head's rows, and stored rows merged with the head's newer points) is
taken; after it (the head empty, every row one compacted cell) it must be the same,
errors included (two values at one time without ``tsd.storage.fix_duplicates``).

The stored bytes are checked against a model that knows nothing of the head: each row's
single cells as storage would hold them (the last value of a qualifier wins), compacted
by :func:`tsd.codec.compact_row` after the row's stored cells, the way the compactor
merges; a row compaction refuses keeps its cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tsd.head.pack as row_pack
from tests.query.tsdb_harness import QueryHarness, embedded_harness
from tsd.codec import KeyLayout, compact_row, encode_point, make_series_key
from tsd.errors import CodecError, TsdError
from tsd.storage.base import ScanSpec

T0 = 1356998400  # 2013-01-01 00:00:00 UTC, an hour boundary

VALUES: list[int | float] = [0, 1, -1, 7, 300, -70_000, 2**40, 0.5, 1.5, -2.25, 1e300]

Point = tuple[str, dict[str, str], int, Any]


@st.composite
def _points(draw: st.DrawFn) -> list[Point]:
    """1-25 points of two series over three hours, crowded on a few seconds so that
    duplicates and out-of-order points are common; a third of them in milliseconds."""
    points = []
    for _ in range(draw(st.integers(1, 25))):
        hour = draw(st.integers(0, 2))
        second = T0 + hour * 3600 + draw(st.sampled_from([0, 1, 2, 3, 10, 3599, 1234]))
        if draw(st.booleans()) and draw(st.booleans()):
            timestamp = second * 1000 + draw(st.sampled_from([0, 250, 999]))
        else:
            timestamp = second
        host = draw(st.sampled_from("ab"))
        points.append(("m", {"host": host}, timestamp, draw(st.sampled_from(VALUES))))
    return points


Model = dict[bytes, list[tuple[bytes, bytes]]]


class _Model:
    """What storage holds per row after each write-out, computed without the head."""

    def __init__(self, fix_duplicates: bool) -> None:
        self.fix_duplicates = fix_duplicates
        self.stored: Model = {}
        self.pending: dict[bytes, dict[bytes, bytes]] = {}

    async def add(self, harness: QueryHarness, points: list[Any]) -> None:
        layout = KeyLayout.from_storage_config(harness.config.storage)
        metric = await harness.uids.metrics.get_id("m")
        tagk = await harness.uids.tagk.get_id("host")
        for _, tags, timestamp, value in points:
            tagv = await harness.uids.tagv.get_id(tags["host"])
            base, qualifier, cell = encode_point(timestamp, value)
            key = make_series_key(layout, metric, [(tagk, tagv)]).row_key(base)
            self.pending.setdefault(key, {})[qualifier] = cell

    def write_out(self) -> None:
        for key, cells in self.pending.items():
            new = sorted(cells.items())
            # a single cell put again is replaced, as any cell put again
            old = [cell for cell in self.stored.get(key, []) if cell[0] not in cells]
            try:
                compacted = compact_row(old + new, self.fix_duplicates, row_key=key)
            except CodecError:
                self.stored[key] = sorted({**dict(old), **dict(new)}.items())
                continue
            assert compacted is not None
            self.stored[key] = [compacted]
        self.pending = {}
        # the harness's compaction pass over every row, as the compactor does it
        for key, stored in self.stored.items():
            if len(stored) > 1:
                with contextlib.suppress(CodecError):
                    compacted = compact_row(stored, self.fix_duplicates, row_key=key)
                    assert compacted is not None
                    self.stored[key] = [compacted]


async def _stored(harness: QueryHarness) -> Model:
    found: Model = {}
    async for row in harness.storage.scan(harness.config.storage.data_table, ScanSpec()):
        found[row.key] = [(c.qualifier, c.value) for c in row.cells]
    return found


async def _answer(harness: QueryHarness) -> Any:
    body = {
        "start": T0,
        "end": T0 + 3 * 3600,
        "msResolution": True,
        "queries": [
            {"aggregator": "sum", "metric": "m", "tags": {"host": "*"}},
            # bench/query's shape: every series downsampled, then summed
            {"aggregator": "sum", "metric": "m", "downsample": "1m-avg"},
        ],
    }
    try:
        return await harness.query(body=body)
    except TsdError as exc:
        return ("error", type(exc).__name__, exc.status)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@pytest.mark.parametrize("fix_duplicates", [False, True], ids=["strict", "fix_duplicates"])
@pytest.mark.parametrize("block_points", [0, 1, 3], ids=["default", "pack1", "pack3"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=st.lists(_points(), min_size=1, max_size=3))
def test_head_and_storage_answer_as_after_compaction(
    tmp_path: Path, fix_duplicates: bool, block_points: int, writes: list[list[Point]]
) -> None:
    """``block_points``: rows' points packed every that many points (tsd/head/pack.py),
    each point its own writer batch (0: the default, each write one batch)."""
    with pytest.MonkeyPatch.context() as patch:
        if block_points:
            patch.setattr(row_pack, "BLOCK_POINTS", block_points)
        asyncio.run(
            _write_query_write_out(
                tmp_path / uuid.uuid4().hex, fix_duplicates, writes, one_by_one=bool(block_points)
            )
        )


async def _write_query_write_out(
    directory: Path, fix_duplicates: bool, writes: list[list[Point]], one_by_one: bool = False
) -> None:
    async with embedded_harness(
        directory, storage_options={"fix_duplicates": fix_duplicates}
    ) as harness:
        assert harness.head is not None
        model = _Model(fix_duplicates)
        for points in writes:
            for batch in [[p] for p in points] if one_by_one else [points]:
                await harness.load(batch)
            await model.add(harness, points)
            assert len(harness.head.head), "the points wait in the head"
            before = await _answer(harness)
            await harness.compact()
            assert not len(harness.head.head)
            assert await _answer(harness) == before
            model.write_out()
            assert await _stored(harness) == model.stored


@pytest.mark.parametrize("downsample", ["1m-avg", "10s-sum", "1h-count"])
async def test_downsampled_answer_from_the_head_is_the_answer_after_write_out(
    tmp_path: Path, downsample: str
) -> None:
    # Rows reduced to their buckets as decoded (tsd/query/downsample.py): the head's rows
    # (and stored rows merged with late head points) as the same rows once written out.
    body = {
        "start": T0,
        "end": T0 + 3 * 3600,
        "queries": [
            {"aggregator": "sum", "metric": "m", "downsample": downsample, "tags": {"host": "*"}}
        ],
    }
    first = [
        ("m", {"host": h}, T0 + hour * 3600 + s, VALUES[(s + hour) % len(VALUES)])
        for h in "ab"
        for hour in range(3)
        for s in range(0, 3600, 7)
    ]
    late = [("m", {"host": "a"}, T0 + 5, 2.5), ("m", {"host": "b"}, T0 + 3600 + 61_250 // 1000, 4)]
    async with embedded_harness(tmp_path / "db") as harness:
        assert harness.head is not None
        await harness.load(first)
        from_head = await harness.query(body=body)
        await harness.compact()
        assert await harness.query(body=body) == from_head
        await harness.load(late)  # stored rows and head points, merged when read
        merged = await harness.query(body=body)
        await harness.compact()
        assert await harness.query(body=body) == merged
        assert merged != from_head
