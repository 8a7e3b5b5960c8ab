"""The HBase spool on the writer (tsd.write.spool): while storage does not take writes the
points wait in the write-ahead log and go in, in order, once it does; past the bound new
points are refused clearly. Storage is the real store behind a switch that fails its
writes as an unreachable HBase does (tests/hbase/test_outage.py does it on HBase itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.server.support import eventually
from tests.uid.hooked_storage import HookedStorage
from tests.write.conftest import MakeWriter
from tests.write.points import add
from tests.write.readback import stored_points
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.errors import SpoolFull, StorageUnavailable
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.wal import WriteAheadLog
from tsd.write.batch_writer import Ack
from tsd.write.ingest import IngestService, IngestSession
from tsd.write.spool import Spool

T0 = 1_356_998_400
TAGS = make_tags({"host": "a"})


class Outage:
    """Fails every write to the data table (as the Thrift gateway gone does) while down."""

    def __init__(self, storage: Storage, table: str) -> None:
        self.store = HookedStorage(storage)
        self.down = False
        self.failed = 0

        async def mutate(name: str, mutations: object) -> None:
            if self.down and name == table:
                self.failed += 1
                raise StorageUnavailable("HBase mutateRows on 'tsdb': connection refused")

        self.store.hooks["mutate"] = mutate


async def until(condition: Callable[[], bool]) -> None:
    """State the writer's tasks reach after the test's call returned (a batch logged, the
    drain's next attempt, which comes within 2 s)."""
    await eventually(condition, attempts=4000)


def spool_of(ingest: IngestService) -> Spool:
    spool = ingest.writer.spool
    assert spool is not None
    return spool


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.wal"))


def spooling(
    make_writer: MakeWriter, outage: Outage, directory: Path, max_bytes: int = 1 << 30
) -> IngestService:
    """A writer logging in ``directory`` and spooling up to ``max_bytes``, on the outage's
    store, its batches cut every 5 ms."""
    return make_writer(
        outage.store,
        wal=WriteAheadLog(directory, StatsRegistry()),
        spool_max_bytes=max_bytes,
        flush_interval_ms=5,
    )


async def add_until_refused(ingest: IngestService, wait_every: int) -> tuple[list[Ack], SpoolFull]:
    """Add points of consecutive seconds until the writer refuses one: the acks of those
    taken, and the refusal. Every ``wait_every`` points, wait until the writer has logged
    what it holds (or refuses)."""
    spool = spool_of(ingest)
    taken = []
    for i in range(20_000):
        try:
            taken.append(await add(ingest, DataPoint("sys.cpu", T0 + i, i, TAGS)))
        except SpoolFull as exc:
            return taken, exc
        if i % wait_every == wait_every - 1:
            await until(lambda: ingest.writer.pending_cells() == 0 or spool.refusal is not None)
    raise AssertionError("never refused")


@pytest.fixture
def outage(storage: Storage, tables: StorageConfig) -> Outage:
    return Outage(storage, tables.data_table)


async def test_an_outage_spools_to_the_log_and_drains_in_order_when_storage_returns(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig, outage: Outage, tmp_path: Path
) -> None:
    ingest = spooling(make_writer, outage, tmp_path)
    spool = spool_of(ingest)
    before = await add(ingest, DataPoint("sys.cpu", T0, 0, TAGS))
    await before
    outage.down = True
    acks = []
    for i in range(1, 40):
        # The same second written again later with another value: the later one must win.
        acks.append(await add(ingest, DataPoint("sys.cpu", T0 + i // 2, i, TAGS)))
        if i % 4 == 0:
            await until(lambda: ingest.writer.pending_cells() == 0)
    await until(lambda: ingest.writer.pending_cells() == 0)
    assert spool.active
    backlog_bytes, records, cells = spool.backlog()
    # (a batch keeps one cell per second: the later value)
    assert records >= 2
    assert 20 <= cells < 39
    assert backlog_bytes > 0
    assert not any(ack.done() for ack in acks)  # not stored: waiting in the log
    assert segments(tmp_path)
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == [0]

    outage.down = False
    await asyncio.gather(*acks)
    await until(lambda: not spool.active)
    assert spool.backlog() == (0, 0, 0)
    stored = await stored_points(storage, tables, ingest.uids)
    assert [(p.timestamp_ms // 1000 - T0, p.value) for p in stored] == [(0, 1)] + [
        (s, 2 * s + 1) for s in range(1, 20)
    ]
    # Back to direct writes: a new point is stored without the spool.
    await (await add(ingest, DataPoint("sys.cpu", T0 + 100, 100, TAGS)))
    assert not spool_of(ingest).active
    await ingest.writer.close()
    assert segments(tmp_path) == []


async def test_past_max_bytes_points_are_refused_until_the_backlog_drains(
    make_writer: MakeWriter, outage: Outage, tmp_path: Path
) -> None:
    ingest = spooling(make_writer, outage, tmp_path, max_bytes=400)
    spool = spool_of(ingest)
    outage.down = True
    taken, refused = await add_until_refused(ingest, wait_every=1)
    assert refused.status == 503
    assert "tsd.storage.wal.max_bytes = 400" in refused.message
    assert ingest.writer.storage_refusal is refused
    assert spool.backlog()[0] >= 400
    with pytest.raises(SpoolFull):
        await add(ingest, DataPoint("sys.cpu", T0, 0, TAGS))

    outage.down = False
    await asyncio.gather(*taken)  # everything taken before the refusal is stored
    await until(lambda: ingest.writer.storage_refusal is None)
    await (await add(ingest, DataPoint("sys.cpu", T0 + 20_000, 1, TAGS)))


async def test_sync_waits_for_the_spool_up_to_its_timeout(
    make_writer: MakeWriter, outage: Outage, tmp_path: Path
) -> None:
    ingest = spooling(make_writer, outage, tmp_path)
    outage.down = True
    await add(ingest, DataPoint("sys.cpu", T0, 0, TAGS))
    await until(lambda: spool_of(ingest).active)
    sync: IngestSession[int] = ingest.session(track_acks=True)
    ref = await ingest.resolve("sys.cpu", TAGS)
    sync.append_run([(ref, T0 + 1, 1)], [7])
    outcome = await sync.stored(0.05)
    assert (outcome.stored, outcome.unstored) == (0, [(7, None)])  # a sync timeout
    outage.down = False
    outcome = await sync.stored(None)
    assert (outcome.stored, outcome.unstored) == (1, [])


@pytest.mark.slow
async def test_a_shutdown_while_spooling_leaves_the_backlog_to_the_next_start(
    make_writer: MakeWriter,
    storage: Storage,
    tables: StorageConfig,
    outage: Outage,
    tmp_path: Path,
) -> None:
    ingest = spooling(make_writer, outage, tmp_path)
    outage.down = True
    acks = [await add(ingest, DataPoint("sys.cpu", T0 + i, i, TAGS)) for i in range(5)]
    await ingest.writer.close()
    assert all(isinstance(ack.exception(), StorageUnavailable) for ack in acks)
    assert segments(tmp_path)

    outage.down = False
    again = make_writer(wal=WriteAheadLog(tmp_path, StatsRegistry()), spool_max_bytes=1 << 30)
    assert await again.writer.recover() == 0  # queued in the spool, drained in the background
    assert spool_of(again).backlog()[1] >= 1
    # A new point for a second the last run wrote: it goes in after the old one.
    await (await add(again, DataPoint("sys.cpu", T0 + 2, 99, TAGS)))
    await until(lambda: not spool_of(again).active)
    stored = await stored_points(storage, tables, ingest.uids)
    assert [p.value for p in stored] == [0, 1, 99, 3, 4]
    await again.writer.close()
    assert segments(tmp_path) == []  # the old segments went once drained


@pytest.mark.slow
async def test_a_full_log_disk_during_an_outage_refuses_new_points_and_loses_none(
    make_writer: MakeWriter,
    storage: Storage,
    tables: StorageConfig,
    outage: Outage,
    small_disk: Path,
) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (240 * 1024))  # about 16 KiB left for the log
    ingest = spooling(make_writer, outage, small_disk / "wal")
    spool = spool_of(ingest)
    outage.down = True
    taken, refused = await add_until_refused(ingest, wait_every=100)
    assert "cannot be written" in refused.message
    assert ingest.writer.pending_cells() > 0  # the batch the log did not take, in memory

    filler.unlink()  # space returns: the batch is logged, and points are taken again
    await until(lambda: spool.refusal is None)
    outage.down = False
    await asyncio.gather(*taken)
    stored = await stored_points(storage, tables, ingest.uids)
    assert len(stored) == len(taken)
