"""Compaction of closed hours through the writer, against the real store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tests.uid.hooked_storage import HookedStorage
from tests.write.conftest import MakeWriter
from tests.write.points import add
from tests.write.readback import data_rows, stored_points
from tsd.codec import decode_cells
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.storage.base import Mutation, Storage
from tsd.write.ingest import IngestService
from tsd.write.schedule import CompactionSchedule

T0 = 1_356_998_400
TAGS = make_tags({"host": "a"})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def at_once() -> CompactionSchedule:
    return CompactionSchedule(grace_s=0, spread_s=0)


async def put_points(ingest: IngestService, points: Sequence[tuple[int, int | float]]) -> None:
    for ts, value in points:
        await add(ingest, DataPoint("sys.cpu", ts, value, TAGS))
    await ingest.writer.flush()


async def cells_of_only_row(storage: Storage, cfg: StorageConfig) -> list[tuple[bytes, bytes]]:
    [row] = await data_rows(storage, cfg)
    return [(c.qualifier, c.value) for c in row.cells]


async def test_closed_hour_becomes_one_cell_in_opentsdb_form(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=at_once(), wall_clock=Clock(T0 + 7200))
    writer = ingest.writer
    await put_points(ingest, [(T0 + 1, 5), (T0 * 1000 + 1500, 6), (T0, 4)])
    assert len(await cells_of_only_row(storage, tables)) == 3
    assert await writer.compact_due() == 1
    # Qualifiers in time order (s, s, ms), values, then the meta byte: 0x01 = mixed s/ms.
    assert await cells_of_only_row(storage, tables) == [
        (bytes.fromhex("00000010f0017700"), bytes.fromhex("04050601"))
    ]
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == [4, 5, 6]


async def test_seconds_only_row_has_a_zero_meta_byte(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=at_once(), wall_clock=Clock(T0 + 7200))
    writer = ingest.writer
    await put_points(ingest, [(T0 + 3599, 0.5), (T0, 300)])
    await writer.compact_due()
    assert await cells_of_only_row(storage, tables) == [
        (bytes.fromhex("0001e0fb"), bytes.fromhex("012c3f00000000"))
    ]


async def test_open_hour_is_left_alone(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=CompactionSchedule(), wall_clock=Clock(T0 + 1800))
    writer = ingest.writer
    await put_points(ingest, [(T0, 1), (T0 + 1, 2)])
    assert await writer.compact_due() == 0
    assert len(await cells_of_only_row(storage, tables)) == 2


async def test_reader_sees_every_point_at_every_step(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    hooked = HookedStorage(storage)
    ingest = make_writer(hooked, schedule=at_once(), wall_clock=Clock(T0 + 7200))
    writer = ingest.writer
    points = [(T0 + i, i) for i in range(10)]
    await put_points(ingest, points)
    seen: list[list[int | float]] = []

    async def read_between(table: str, mutations: Sequence[Mutation]) -> None:
        for row in await data_rows(storage, tables):
            cells = [(c.qualifier, c.value) for c in row.cells]
            seen.append([p.value for p in decode_cells(T0, cells).points])

    hooked.hooks["mutate"] = read_between
    await writer.compact_due()
    hooked.hooks.clear()
    assert len(seen) == 2  # before the compacted put, and between the put and the deletes
    assert all(values == list(range(10)) for values in seen)
    assert len(await cells_of_only_row(storage, tables)) == 1


async def test_late_point_is_merged_into_the_compacted_cell(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=at_once(), wall_clock=Clock(T0 + 7200))
    writer = ingest.writer
    await put_points(ingest, [(T0, 1), (T0 + 2, 3)])
    await writer.compact_due()
    await put_points(ingest, [(T0 + 1, 2)])
    assert len(await cells_of_only_row(storage, tables)) == 2
    assert await writer.compact_due() == 1
    assert await cells_of_only_row(storage, tables) == [
        (bytes.fromhex("000000100020"), bytes.fromhex("01020300"))
    ]


async def test_identical_duplicate_is_dropped(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=at_once(), wall_clock=Clock(T0 + 7200))
    writer = ingest.writer
    await put_points(ingest, [(T0 + 1, 7), (T0 * 1000 + 1000, 7), (T0, 1)])  # s and ms forms
    await writer.compact_due()
    cells = await cells_of_only_row(storage, tables)
    assert len(cells) == 1
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == [1, 7]


@pytest.mark.parametrize(
    ("fix_duplicates", "cells_left"),
    [pytest.param(False, 2, id="refused_row_left_as_is"), pytest.param(True, 1, id="fixed")],
)
async def test_conflicting_duplicate_follows_fix_duplicates(
    make_writer: MakeWriter,
    storage: Storage,
    tables: StorageConfig,
    fix_duplicates: bool,
    cells_left: int,
) -> None:
    ingest = make_writer(
        schedule=at_once(), wall_clock=Clock(T0 + 7200), fix_duplicates=fix_duplicates
    )
    writer = ingest.writer
    await put_points(ingest, [(T0, 1), (T0, 1.5)])  # qualifiers 0000 and 000b: one second
    await writer.compact_due()
    assert len(await cells_of_only_row(storage, tables)) == cells_left


async def test_close_compacts_the_closed_hours(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(
        schedule=CompactionSchedule(grace_s=0, spread_s=600), wall_clock=Clock(T0 + 7200)
    )
    writer = ingest.writer
    await put_points(ingest, [(T0, 1), (T0 + 1, 2)])
    await writer.close()
    assert len(await cells_of_only_row(storage, tables)) == 1


async def test_disabled_compaction_leaves_rows(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(schedule=at_once(), wall_clock=Clock(T0 + 7200), enable_compaction=False)
    writer = ingest.writer
    await put_points(ingest, [(T0, 1), (T0 + 1, 2)])
    await writer.close()
    assert len(await cells_of_only_row(storage, tables)) == 2


@pytest.mark.slow
async def test_background_pass_compacts_without_being_asked(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(
        schedule=at_once(), wall_clock=Clock(T0 + 7200), compaction_flush_interval_s=1
    )
    await put_points(ingest, [(T0, 1), (T0 + 1, 2)])
    for _ in range(400):  # one pass a second; poll the store meanwhile
        if len(await cells_of_only_row(storage, tables)) == 1:
            break
        await asyncio.sleep(0.01)
    assert await cells_of_only_row(storage, tables) == [
        (bytes.fromhex("00000010"), bytes.fromhex("010200"))
    ]
