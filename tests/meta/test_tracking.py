"""Meta tracking: what a new series leaves in the meta and UID tables, per tsd.core.meta.*
setting, written once per series (not per point), on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.meta.conftest import NOW_S, MakeEnv
from tests.server.support import eventually
from tests.uid.hooked_storage import HookedStorage
from tests.write.points import add
from tsd.data_points import DataPoint, make_tags
from tsd.errors import StorageUnavailable
from tsd.storage.base import Put, Storage

# The first series of a fresh store: metric 000001, host=web01 -> 000001/000001.
TSUID = bytes.fromhex("000001000001000001")
TSMETA_JSON = (
    b'{"tsuid":"000001000001000001","displayName":"","description":"","notes":"",'
    b'"created":1700000000,"custom":null,"units":"","dataType":"","retention":0,'
    b'"max":"NaN","min":"NaN"}'
)
ONE = (1).to_bytes(8, "big")


def counting_meta_writes(storage: Storage) -> tuple[HookedStorage, list[int]]:
    """``storage`` hooked to note the size of every write to the meta table."""
    hooked = HookedStorage(storage)
    meta_writes: list[int] = []

    async def count(table: str, mutations: Any) -> None:
        if table.endswith("tsdb-meta"):
            meta_writes.append(len(mutations))

    hooked.hooks["mutate"] = count
    return hooked, meta_writes


def failing_one_meta_write(storage: Storage) -> HookedStorage:
    """``storage`` hooked so that its first write to the meta table fails."""
    hooked = HookedStorage(storage)
    failures = [StorageUnavailable("region server down")]

    async def fail_once(table: str, mutations: Any) -> None:
        if table.endswith("tsdb-meta") and failures:
            raise failures.pop()

    hooked.hooks["mutate"] = fail_once
    return hooked


async def meta_row(env: Any, tsuid: bytes = TSUID) -> dict[bytes, bytes]:
    row = await env.storage.get(env.config.storage.meta_table, tsuid)
    return {} if row is None else {cell.qualifier: cell.value for cell in row.cells}


@pytest.mark.parametrize(
    ("core", "expected"),
    [
        pytest.param({}, {b"tsd_series": NOW_S.to_bytes(8, "big")}, id="tracking_off_index"),
        pytest.param({"meta_enable_tsuid_tracking": True}, {b"ts_ctr": ONE}, id="tracking"),
        pytest.param(
            {"meta_enable_tsuid_tracking": True, "meta_enable_tsuid_incrementing": True},
            {b"ts_ctr": ONE},
            id="incrementing_once_per_series",
        ),
        pytest.param(
            {"meta_enable_tsuid_tracking": True, "meta_enable_realtime_ts": True},
            {b"ts_meta": TSMETA_JSON},
            id="realtime_ts",
        ),
        pytest.param(
            {
                "meta_enable_tsuid_tracking": True,
                "meta_enable_realtime_ts": True,
                "meta_enable_tsuid_incrementing": True,
            },
            {b"ts_ctr": ONE, b"ts_meta": TSMETA_JSON},
            id="realtime_ts_incrementing",
        ),
        pytest.param(
            # OpenTSDB ignores realtime_ts/incrementing without tsuid tracking.
            {"meta_enable_realtime_ts": True, "meta_enable_tsuid_incrementing": True},
            {b"tsd_series": NOW_S.to_bytes(8, "big")},
            id="realtime_without_tracking_is_off",
        ),
    ],
)
async def test_new_series_writes_opentsdb_meta_cells(
    make_env: MakeEnv, core: dict[str, bool], expected: dict[bytes, bytes]
) -> None:
    env = await make_env(**core)
    for ts in (NOW_S, NOW_S + 10, NOW_S + 3600):
        await env.write("sys.cpu.user", ts, 1, host="web01")
    assert await meta_row(env) == expected


async def test_realtime_uid_writes_uidmeta_once_and_keeps_existing(make_env: MakeEnv) -> None:
    env = await make_env(meta_enable_realtime_uid=True)
    table = env.config.storage.uid_table
    # A UIDMeta the user wrote before the tag value was first used must survive.
    await env.uids.tagv.assign("web01")
    custom = (
        b'{"type":"TAGV","displayName":"W1","description":"","notes":"","created":5,"custom":null}'
    )
    await env.storage.put(table, [Put(b"\x00\x00\x01", "name", b"tagv_meta", custom)])
    await env.write("sys.cpu.user", NOW_S, 1, host="web01")
    cells = {
        kind: (await env.storage.get(table, b"\x00\x00\x01")).value("name", kind)  # type: ignore[union-attr]
        for kind in (b"metric_meta", b"tagk_meta", b"tagv_meta")
    }
    assert cells == {
        b"metric_meta": b'{"type":"METRIC","displayName":"","description":"","notes":"",'
        b'"created":1700000000,"custom":null}',
        b"tagk_meta": b'{"type":"TAGK","displayName":"","description":"","notes":"",'
        b'"created":1700000000,"custom":null}',
        b"tagv_meta": custom,
    }


async def test_meta_is_written_once_per_series_not_per_point(
    make_env: MakeEnv, storage: Storage
) -> None:
    hooked, meta_writes = counting_meta_writes(storage)
    env = await make_env(store=hooked, meta_enable_tsuid_tracking=True)
    for i in range(40):
        await env.write("sys.cpu.user", NOW_S + i, i, host="web01")
    await env.write("sys.cpu.user", NOW_S, 1, host="web02")
    assert meta_writes == [1, 1]


async def test_incrementing_counts_discoveries_and_keeps_the_first_tsmeta(
    make_env: MakeEnv,
) -> None:
    core = {
        "meta_enable_tsuid_tracking": True,
        "meta_enable_realtime_ts": True,
        "meta_enable_tsuid_incrementing": True,
    }
    first = await make_env(**core)
    await first.write("sys.cpu.user", NOW_S, 1, host="web01")
    # Another TSD (or this one restarted) sees the same series again.
    second = await make_env(**core)
    await second.write("sys.cpu.user", NOW_S + 1, 2, host="web01")
    assert await meta_row(second) == {b"ts_ctr": (2).to_bytes(8, "big"), b"ts_meta": TSMETA_JSON}


async def test_storage_errors_are_retried(make_env: MakeEnv, storage: Storage) -> None:
    hooked = failing_one_meta_write(storage)
    # No background task: this test drives every round itself.
    env = await make_env(store=hooked, start_tracker=False, meta_enable_tsuid_tracking=True)
    await add(env.ingest, DataPoint("sys.cpu.user", NOW_S, 1, make_tags({"host": "web01"})))
    await env.writer.flush()
    await env.meta.tracker.flush()  # the first round fails and keeps the series queued
    assert env.meta.tracker.pending() == 1
    await env.meta.tracker.flush()
    assert env.meta.tracker.pending() == 0
    assert await meta_row(env) == {b"ts_ctr": ONE}


async def test_series_a_failed_lookup_flush_left_are_written_by_the_task(
    make_env: MakeEnv, storage: Storage
) -> None:
    """A lookup's flush that fails leaves its series queued; the background task writes
    them, and a series arriving while they wait, without another flush being asked."""
    hooked = failing_one_meta_write(storage)
    env = await make_env(store=hooked)
    tracker = env.meta.tracker
    first, second = TSUID, TSUID[:-1] + b"\x02"
    tracker.on_new_series(first[:3], [(first[3:6], first[6:])], first)
    await tracker.flush()  # as /api/search/lookup does: fails, the series stays queued
    assert tracker.pending() == 1
    tracker.on_new_series(second[:3], [(second[3:6], second[6:])], second)
    await eventually(lambda: tracker.pending() == 0)  # taken by the task (1 s retry pause)
    await tracker.flush()  # nothing left to write: waits for the task's round to end
    for tsuid in (first, second):
        assert await meta_row(env, tsuid) == {b"tsd_series": NOW_S.to_bytes(8, "big")}


async def test_a_queue_longer_than_a_batch_is_written_in_batches(
    make_env: MakeEnv, storage: Storage
) -> None:
    """More new series than one write takes: every series' index cell is written, in
    batches of at most BATCH_SIZE, each series once."""
    from tsd.meta.tracking import BATCH_SIZE

    hooked, meta_writes = counting_meta_writes(storage)
    env = await make_env(store=hooked, start_tracker=False)
    tracker = env.meta.tracker
    tsuids = [b"\x00\x00\x01\x00\x00\x01" + i.to_bytes(3, "big") for i in range(BATCH_SIZE + 5)]
    for tsuid in tsuids:
        tracker.on_new_series(tsuid[:3], [(tsuid[3:6], tsuid[6:])], tsuid)
    tracker.on_new_series(tsuids[0][:3], [(tsuids[0][3:6], tsuids[0][6:])], tsuids[0])
    await tracker.flush()
    assert meta_writes == [BATCH_SIZE, 5]
    for tsuid in (tsuids[0], tsuids[BATCH_SIZE - 1], tsuids[-1]):
        assert await meta_row(env, tsuid) == {b"tsd_series": NOW_S.to_bytes(8, "big")}
    for tsuid in tsuids[:3]:  # written: not queued again
        tracker.on_new_series(tsuid[:3], [(tsuid[3:6], tsuid[6:])], tsuid)
    assert tracker.pending() == 0


async def test_the_queue_and_the_written_series_are_bounded_by_the_series_cache(
    make_env: MakeEnv, storage: Storage
) -> None:
    """tsd.core.series_cache.size bounds meta tracking too: a queue that reaches it holds
    new series back (wait_room) until storage takes the queue, rather than growing or
    dropping meta rows; the TSUIDs remembered as written stay within it."""
    hooked = HookedStorage(storage)
    gate = asyncio.Event()

    async def held(table: str, mutations: Any) -> None:
        if table.endswith("tsdb-meta"):
            await gate.wait()

    hooked.hooks["mutate"] = held
    env = await make_env(store=hooked, series_cache_size=8)
    tracker = env.meta.tracker
    tsuids = [b"\x00\x00\x01\x00\x00\x01" + i.to_bytes(3, "big") for i in range(20)]
    for tsuid in tsuids[:8]:
        tracker.on_new_series(tsuid[:3], [(tsuid[3:6], tsuid[6:])], tsuid)
    waiting = asyncio.get_running_loop().create_task(tracker.wait_room())
    await asyncio.sleep(0.3)
    assert not waiting.done()  # the queue is full and storage holds the round
    gate.set()
    await asyncio.wait_for(waiting, 5)
    for tsuid in tsuids[8:]:
        await tracker.wait_room()
        tracker.on_new_series(tsuid[:3], [(tsuid[3:6], tsuid[6:])], tsuid)
    await tracker.flush()
    assert tracker.pending() == 0
    assert tracker.remembered() == 8
    for tsuid in tsuids:  # none dropped
        assert await meta_row(env, tsuid) == {b"tsd_series": NOW_S.to_bytes(8, "big")}


@pytest.mark.parametrize("cache_size", [8, 1000], ids=["old_generation", "young_only"])
@pytest.mark.parametrize("realtime_uid", [False, True], ids=["index", "realtime_uid"])
async def test_a_burst_is_queued_as_its_series_one_by_one(
    make_env: MakeEnv, realtime_uid: bool, cache_size: int
) -> None:
    """on_new_series_many (the ingest service's hook, a burst in one pass) queues what
    on_new_series of each series would: each series once, none already queued or
    remembered as written (in the map's young generation or recalled from its old one),
    the same entries (tag pairs only with realtime UIDMeta); the same rows written. With
    no old generation, a burst none of whose series is known takes the bulk check, one
    with some takes the filter."""
    from tsd.codec import make_series_key

    def burst(env: Any, numbers: range | list[int]) -> list[Any]:
        """Series 000001/000001/n+1: metric m, host=v<n> in a fresh store."""
        layout = env.meta.layout
        return [
            make_series_key(
                layout, b"\x00\x00\x01", [(b"\x00\x00\x01", (n + 1).to_bytes(3, "big"))]
            )
            for n in numbers
        ]

    settings = {"series_cache_size": cache_size, "meta_enable_realtime_uid": realtime_uid}
    bulk = await make_env(start_tracker=False, **settings)
    single = await make_env(start_tracker=False, **settings)
    for env in (bulk, single):  # the names, for the UIDMeta
        assert await env.uids.metrics.get_or_create_id("m") == b"\x00\x00\x01"
        assert await env.uids.tagk.get_or_create_id("host") == b"\x00\x00\x01"
        await env.uids.tagv.get_or_create_ids([f"v{n}" for n in range(11)])
    # written: 0-5 (with a bound of 8, the young generation holds 4: two joined the old)
    # then a burst of written ones only (none queued); queued: 6-7; then a burst over all
    # of them, repeats and new ones
    rounds: list[list[int]] = [
        list(range(6)),
        [2, 4],
        [6, 7],
        [0, 3, 5, 6, 7, 8, 8, 9, 1, 10],
    ]
    for number, numbers in enumerate(rounds):
        refs = burst(bulk, numbers)
        bulk.meta.tracker.on_new_series_many(refs)
        for ref in burst(single, numbers):
            pairs = [(ref.tsuid[3:6], ref.tsuid[6:])]
            single.meta.tracker.on_new_series(ref.metric_uid, pairs, ref.tsuid)
        if number == 0:
            await bulk.meta.tracker.flush()
            await single.meta.tracker.flush()
    queued = single.meta.tracker._pending
    if not realtime_uid:  # the burst keeps tag pairs only where they are written
        queued = {tsuid: (metric, (), tries) for tsuid, (metric, _, tries) in queued.items()}
    assert bulk.meta.tracker._pending == queued
    assert list(bulk.meta.tracker._pending) == [ref.tsuid for ref in burst(bulk, [6, 7, 8, 9, 10])]
    await bulk.meta.tracker.flush()
    await single.meta.tracker.flush()
    assert bulk.meta.tracker.remembered() == single.meta.tracker.remembered() <= cache_size
    for ref in burst(bulk, range(11)):
        assert await meta_row(bulk, ref.tsuid) == await meta_row(single, ref.tsuid) != {}
