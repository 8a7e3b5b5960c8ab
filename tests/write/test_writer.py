"""The Writer against the real store: acks, batching, back-pressure, drain, appends."""

from __future__ import annotations

import asyncio

import pytest

from tests.uid.hooked_storage import HookedStorage
from tests.write.conftest import MakeWriter
from tests.write.points import add
from tests.write.readback import StoredPoint, data_rows, stored_points
from tsd.codec import encode_point
from tsd.codec.const import APPEND_COLUMN_QUALIFIER
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.errors import StorageError, StorageUnavailable
from tsd.storage.base import Storage
from tsd.write.ingest import IngestService
from tsd.write.writer import WriterLimits

T0 = 1_356_998_400
HOST_A = make_tags({"host": "a"})
HOST_B = make_tags({"host": "b"})


def point(ts: int, value: int | float, tags=HOST_A, metric: str = "sys.cpu") -> DataPoint:
    return DataPoint(metric, ts, value, tags)


def stored(ts_ms: int, value: int | float, tags=HOST_A, metric: str = "sys.cpu") -> StoredPoint:
    return StoredPoint(metric, tags, ts_ms, value)


class Gate:
    """Holds every data-table mutation until opened (a store slower than ingest)."""

    def __init__(self, store: HookedStorage, table: str) -> None:
        self.opened = asyncio.Event()
        self.entered = asyncio.Event()

        async def hold(target: str, mutations: object) -> None:
            if target == table:
                self.entered.set()
                await self.opened.wait()

        store.hooks["mutate"] = hold


def gated_writer(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> tuple[IngestService, Gate]:
    """A writer of 4-cell batches, full at 8 cells, whose store holds writes until the
    gate opens."""
    hooked = HookedStorage(storage)
    gate = Gate(hooked, tables.data_table)
    limits = WriterLimits(max_batch_cells=4, max_pending_cells=8, max_in_flight=1)
    return make_writer(hooked, limits=limits, flush_interval_ms=3_600_000), gate


async def test_points_are_stored_and_read_back(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer()
    writer = ingest.writer
    points = [
        point(T0, 1),
        point(T0 + 1, 1.5),
        point(T0 + 3600, -70000),
        point(T0 * 1000 + 250, 0.1, HOST_B),
    ]
    for p in points:
        await add(ingest, p)
    await writer.flush()
    assert await stored_points(storage, tables, ingest.uids) == [
        stored(T0 * 1000, 1),
        stored((T0 + 1) * 1000, 1.5),
        stored((T0 + 3600) * 1000, -70000),
        stored(T0 * 1000 + 250, 0.1, HOST_B),
    ]


async def test_cells_are_opentsdb_bytes(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer()
    writer = ingest.writer
    await add(ingest, point(T0 + 5, 0.5))
    await writer.flush()
    [row] = await data_rows(storage, tables)
    # metric 000001, base time, tagk 000001, tagv 000001; 4-byte float at offset 5
    assert row.key == bytes.fromhex("000001") + T0.to_bytes(4, "big") + bytes.fromhex(
        "000001000001"
    )
    assert [(c.qualifier, c.value) for c in row.cells] == [(b"\x00\x5b", b"\x3f\x00\x00\x00")]


async def test_ack_resolves_only_once_storage_holds_the_batch(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    hooked = HookedStorage(storage)
    gate = Gate(hooked, tables.data_table)
    ingest = make_writer(hooked)
    writer = ingest.writer
    ack = await add(ingest, point(T0, 42))
    writer.flush_soon()
    await gate.entered.wait()
    assert not ack.done()
    assert await data_rows(storage, tables) == []
    gate.opened.set()
    await ack
    assert await stored_points(storage, tables, ingest.uids) == [stored(T0 * 1000, 42)]


async def test_batch_is_written_when_its_interval_passes(make_writer: MakeWriter) -> None:
    ingest = make_writer(flush_interval_ms=5)
    ack = await add(ingest, point(T0, 1))
    await ack  # nobody asked for a flush: the interval did it


async def test_batch_is_written_when_full(make_writer: MakeWriter) -> None:
    ingest = make_writer(limits=WriterLimits(max_batch_cells=3), flush_interval_ms=3_600_000)
    writer = ingest.writer
    first = await add(ingest, point(T0, 1))
    await add(ingest, point(T0 + 1, 1))
    assert not first.done()
    third = await add(ingest, point(T0 + 2, 1))
    assert third is first
    await first
    assert writer.pending_cells() == 0


async def test_full_buffer_stops_clients_until_storage_catches_up(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest, gate = gated_writer(make_writer, storage, tables)
    writer = ingest.writer
    for i in range(8):
        await add(ingest, point(T0 + i, i))
    assert writer.is_full()
    writable = asyncio.ensure_future(writer.wait_writable())
    await asyncio.sleep(0)
    assert not writable.done()
    gate.opened.set()
    await writable
    await writer.flush()
    assert len(await stored_points(storage, tables, ingest.uids)) == 8
    assert not writer.is_full()


async def test_close_writes_what_is_buffered_then_refuses(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(flush_interval_ms=3_600_000)
    writer = ingest.writer
    for i in range(100):
        await add(ingest, point(T0 + i, i, HOST_A if i % 2 else HOST_B))
    await writer.close()
    assert len(await stored_points(storage, tables, ingest.uids)) == 100
    with pytest.raises(StorageUnavailable):
        await add(ingest, point(T0, 1))


async def test_same_cell_twice_in_a_batch_keeps_the_last(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer()
    writer = ingest.writer
    await add(ingest, point(T0, 1))
    await add(ingest, point(T0, 2))
    await writer.flush()
    assert await stored_points(storage, tables, ingest.uids) == [stored(T0 * 1000, 2)]


async def test_failed_write_fails_the_ack_after_retries(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    hooked = HookedStorage(storage)
    attempts = []

    async def fail(table: str, mutations: object) -> None:
        if table == tables.data_table:
            attempts.append(table)
            raise StorageError("disk on fire")

    hooked.hooks["mutate"] = fail
    ingest = make_writer(hooked, limits=WriterLimits(retry_delays_s=(0, 0)))
    writer = ingest.writer
    ack = await add(ingest, point(T0, 1))
    writer.flush_soon()
    with pytest.raises(StorageError, match="disk on fire"):
        await ack
    assert len(attempts) == 3
    # The writer carries on with later batches.
    hooked.hooks.clear()
    ack = await add(ingest, point(T0 + 1, 2))
    writer.flush_soon()
    await ack


async def test_appends_write_one_sorted_append_cell_per_row(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer(enable_appends=True)
    writer = ingest.writer
    for ts, value in [(T0 + 2, 3), (T0, 1), (T0 * 1000 + 1500, 2)]:
        await add(ingest, point(ts, value))
    await writer.flush()
    await add(ingest, point(T0 + 3, 4))
    await writer.flush()
    [row] = await data_rows(storage, tables)
    [cell] = row.cells
    assert cell.qualifier == APPEND_COLUMN_QUALIFIER
    expected = b"".join(
        q + v
        for _, q, v in [
            encode_point(T0, 1),
            encode_point(T0 + 2, 3),
            encode_point(T0 * 1000 + 1500, 2),
            encode_point(T0 + 3, 4),
        ]
    )
    assert cell.value == expected
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == [1, 2, 3, 4]


async def test_points_added_in_bulk_are_stored_and_bounded_by_room(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest, gate = gated_writer(make_writer, storage, tables)
    writer = ingest.writer
    series = await ingest.resolve("sys.cpu", HOST_A)
    assert writer.room() == 8
    ack = writer.add_points([(series, T0 + i, i * 1.5) for i in range(3)])
    assert writer.room() == 5
    assert not writer.is_full()
    writer.add_points([(series, T0 + 3 + i, i) for i in range(writer.room())])
    assert writer.is_full()
    assert writer.room() == 0
    gate.opened.set()
    await ack
    await writer.flush()
    assert await stored_points(storage, tables, ingest.uids) == [
        *(stored((T0 + i) * 1000, i * 1.5) for i in range(3)),
        *(stored((T0 + 3 + i) * 1000, i) for i in range(5)),
    ]
    await writer.close()
    with pytest.raises(StorageUnavailable):
        writer.add_points([(series, T0, 1)])
