"""The writer with its write-ahead log, on the real store: what storage did not take is
replayed by the next start, stored segments go, a torn tail is cut and reported."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.uid.hooked_storage import HookedStorage
from tests.write.conftest import MakeWriter
from tests.write.points import add
from tests.write.readback import stored_points
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.errors import StorageError, StorageUnavailable
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.wal import WriteAheadLog
from tsd.wal.record import SEGMENT_MAGIC, encode_cells, scan_records
from tsd.write.batch_writer import WriterLimits

T0 = 1_356_998_400
TAGS = make_tags({"host": "a"})


def log_in(directory: Path, registry: StatsRegistry | None = None, **options: int) -> WriteAheadLog:
    return WriteAheadLog(directory, registry or StatsRegistry(), **options)


def segments(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.wal"))


async def test_a_batch_storage_refused_is_replayed_by_the_next_start(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig, tmp_path: Path
) -> None:
    hooked = HookedStorage(storage)

    async def refuse(table: str, mutations: object) -> None:
        if table == tables.data_table:
            raise StorageError("region server down")

    hooked.hooks["mutate"] = refuse
    ingest = make_writer(
        hooked, wal=log_in(tmp_path), limits=WriterLimits(retry_delays_s=()), flush_interval_ms=5
    )
    acks = [await add(ingest, DataPoint("sys.cpu", T0 + i, i, TAGS)) for i in range(10)]
    await ingest.writer.flush()
    assert all(ack.exception() is not None for ack in acks)
    await ingest.writer.close()
    assert segments(tmp_path) == ["00000001.wal"]  # kept: it holds what was not stored
    assert await stored_points(storage, tables, ingest.uids) == []

    again = make_writer(wal=log_in(tmp_path))
    assert await again.writer.recover() == 10
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == list(range(10))
    assert segments(tmp_path) == []
    await add(again, DataPoint("sys.cpu", T0 + 10, 10, TAGS))
    await again.writer.flush()
    assert segments(tmp_path) == ["00000002.wal"]  # numbering goes on after the replayed one


async def test_segments_are_dropped_once_everything_in_them_is_stored(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig, tmp_path: Path
) -> None:
    registry = StatsRegistry()
    ingest = make_writer(wal=log_in(tmp_path, registry, segment_bytes=4096))
    for hour in range(6):
        for i in range(100):
            await add(ingest, DataPoint("sys.cpu", T0 + 3600 * hour + i, i, TAGS))
        await ingest.writer.flush()
        assert len(segments(tmp_path)) <= 1  # only the open one: the others were stored
    assert registry.counter("wal.cells", type="synced").value == 600
    assert registry.counter("wal.fsyncs").value >= 6
    await ingest.writer.close()
    assert segments(tmp_path) == []
    assert len(await stored_points(storage, tables, ingest.uids)) == 600


async def test_a_gathering_commit_shares_its_sync_with_appends_on_their_way(
    tmp_path: Path,
) -> None:
    """An append that asks to gather (remote write's), while appenders come together (the
    last commit held two records): an append made a loop turn later (a request already
    received) shares its sync. Without gather, or after a commit of one record (a lone
    client, who would wait for nothing), each pays its own."""
    record = encode_cells([(b"row", {b"\x00\x07": b"\x2a"})])
    for gather, together, syncs in ((True, 2, 1), (False, 2, 2), (True, 1, 2)):
        registry = StatsRegistry()
        wal = log_in(tmp_path / f"case-{gather}-{together}", registry)
        await asyncio.gather(*(wal.append(record, 1) for _ in range(together)))
        assert registry.counter("wal.fsyncs").value == 1

        first = asyncio.ensure_future(wal.append(record, 1, gather=gather))
        seqs = await asyncio.gather(first, _a_turn_later(wal, record))
        assert sorted(seqs) == [together, together + 1]
        assert registry.counter("wal.fsyncs").value == 1 + syncs
        await wal.close()


async def _a_turn_later(wal: WriteAheadLog, record: bytes) -> int:
    await asyncio.sleep(0)
    return await wal.append(record, 1)


async def test_torn_tail_is_cut_and_the_intact_records_replayed(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig, tmp_path: Path
) -> None:
    ingest = make_writer()
    ref = await ingest.resolve("sys.cpu", TAGS)
    rows = [(ref.row_key(T0), {b"\x00\x07": b"\x2a"})]
    torn = encode_cells([(ref.row_key(T0), {b"\x00\x17": b"\x2b"})])
    (tmp_path / "00000007.wal").write_bytes(SEGMENT_MAGIC + encode_cells(rows) + torn[:-2])
    registry = StatsRegistry()
    again = make_writer(wal=log_in(tmp_path, registry))
    assert await again.writer.recover() == 1
    assert registry.counter("wal.errors", type="tail_cut").value == 1
    assert [
        (p.timestamp_ms, p.value) for p in await stored_points(storage, tables, ingest.uids)
    ] == [(T0 * 1000, 42)]
    assert segments(tmp_path) == []


async def test_a_full_log_disk_loses_nothing_and_the_log_resumes_when_space_returns(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig, small_disk: Path
) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (240 * 1024))  # about 16 KiB left for the log (zstd records)
    registry = StatsRegistry()
    directory = small_disk / "wal"
    ingest = make_writer(wal=log_in(directory, registry, segment_bytes=1 << 20))
    for hour in range(20):
        acks = [
            await add(ingest, DataPoint("sys.cpu", T0 + 3600 * hour + i, i, TAGS))
            for i in range(1000)
        ]
        await ingest.writer.flush()
        assert all(ack.exception() is None for ack in acks)  # stored all the same
    failures = registry.counter("wal.errors", type="append")
    assert failures.value >= 1
    for path in directory.glob("*.wal"):  # what was written stays readable
        assert scan_records(path.read_bytes()).problem is None
    filler.unlink()  # space returns
    logged = registry.counter("wal.records", type="appended").value
    await add(ingest, DataPoint("sys.cpu", T0 + 3600 * 20, 1, TAGS))
    await ingest.writer.flush()
    assert registry.counter("wal.records", type="appended").value == logged + 1
    assert len(await stored_points(storage, tables, ingest.uids)) == 20 * 1000 + 1


async def test_a_second_log_on_the_same_directory_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    first = log_in(tmp_path / "wal")
    first.segments()
    second = log_in(tmp_path / "wal")
    with pytest.raises(StorageUnavailable, match="in use by another process"):
        second.segments()
    await first.close()
    assert second.segments() == []
    await second.close()


async def test_a_cut_starts_a_new_segment_once_the_open_one_holds_a_mebibyte(
    tmp_path: Path,
) -> None:
    """What the head asks after writing rows out: the stored records' segment goes then,
    not when it would have filled."""
    log = log_in(tmp_path)
    big = encode_cells(
        [(b"\x00\x00\x01Q\x00\x00\x00" + s.to_bytes(6, "big"), {b"\x00\x07": os.urandom(8)})
         for s in range(120_000)]
    )  # fmt: skip
    small = encode_cells([(b"\x01", {b"\x00\x07": b"\x01"})])
    first = await log.append(small, 1)
    log.cut()  # under a mebibyte open: not yet
    second = await log.append(small, 1)
    assert segments(tmp_path) == ["00000001.wal"]
    third = await log.append(big, 120_000)
    log.cut()
    fourth = await log.append(small, 1)
    assert segments(tmp_path) == ["00000001.wal", "00000002.wal"]
    for seq in (first, second, third):
        log.mark_stored(seq)
    await log.close()  # the open segment still holds an unstored record
    assert segments(tmp_path) == ["00000002.wal"]
    assert len(scan_records((tmp_path / "00000002.wal").read_bytes()).records) == 1
    del fourth
