"""The ingest service against the real store: refs, misses and their order, back-pressure,
typed refusals and sync outcomes."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.uid.hooked_storage import HookedStorage
from tests.write.conftest import MakeWriter
from tests.write.readback import StoredPoint, stored_points
from tests.write.test_writer import gated_writer
from tsd.codec import SeriesKey, make_series_key
from tsd.codec.rowkey import python_series_name_key, series_name_key
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, Tags, make_tags
from tsd.errors import NameTooLong, StorageError, TsdError
from tsd.server.http.appends import append_in_room, put_waiting
from tsd.storage.base import Storage
from tsd.write.batch_writer import WriterLimits
from tsd.write.ingest import (
    MAX_MISS_BATCH,
    IngestService,
    IngestSession,
    Put,
    RefusalKind,
    Refused,
)

T0 = 1_356_998_400


def host(name: str) -> Tags:
    return make_tags({"host": name})


def point(ts: int, value: int | float, name: str = "a", metric: str = "sys.cpu") -> DataPoint:
    return DataPoint(metric, ts, value, host(name))


class Refusals:
    """An ``on_refused`` that keeps what it is told."""

    def __init__(self) -> None:
        self.seen: list[tuple[int | None, DataPoint | None, Refused]] = []

    def __call__(self, tag: int | None, point: DataPoint | None, refused: Refused) -> None:
        self.seen.append((tag, point, refused))


async def test_a_series_is_resolved_once_until_caches_are_dropped(make_writer: MakeWriter) -> None:
    ingest = make_writer()
    refs = ingest.ref_cache("proto")
    assert ingest.cached("sys.cpu", host("a")) is None
    ref = await ingest.resolve("sys.cpu", host("a"))
    assert await ingest.resolve("sys.cpu", host("a")) is ref
    assert ingest.cached("sys.cpu", host("a")) is ref
    assert ingest.ref_cache("proto") is refs  # one cache per protocol name
    refs.remember(b"raw key", ref)
    ingest.drop_caches()
    assert ingest.cached("sys.cpu", host("a")) is None
    assert len(refs) == 0


async def test_series_whose_names_join_alike_keep_their_own_refs(
    make_writer: MakeWriter,
) -> None:
    """Refs are kept by the names joined with NULs: a name holding a NUL (possible only
    with special characters allowed) must not make two series one."""
    ingest = make_writer()
    one = make_tags({"a\0b": "c"})
    other = make_tags({"a": "b\0c"})
    plain = make_tags({"a": "b", "c": "d"})
    refs = await ingest.resolve_many([("m", one), ("m", other), ("m", plain), ("m", one)])
    assert len({id(ref) for ref in refs}) == 3
    assert refs[0] is refs[3]
    assert [ingest.cached("m", tags) for tags in (one, other, plain)] == refs[:3]
    assert ingest.cached("m\0a", make_tags({"b": "c"})) is None


async def test_ref_cache_is_bounded(make_writer: MakeWriter) -> None:
    ingest = make_writer()
    ref = await ingest.resolve("sys.cpu", host("a"))
    refs = ingest.ref_cache("proto")
    refs.max_entries = 3
    for key in range(5):
        refs.remember(key, ref)
    assert len(refs) <= 3
    assert refs[4] is ref


async def test_past_the_series_cache_bound_the_least_recently_used_go_and_come_back(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    """tsd.core.series_cache.size on either store: a protocol's cache never holds more
    than the bound; series in use are never evicted by a stream of new ones; an evicted
    series put again is resolved from the UID caches (no UID assigned again, the same
    ref) and its meta hook is called again; every point is stored."""
    base = make_writer()
    seen: list[bytes] = []
    ingest = IngestService(
        base.writer,
        base.uids,
        tables,
        max_series=40,
        on_new_series=lambda refs: seen.extend(ref.tsuid for ref in refs),
    )
    refs = ingest.ref_cache("proto")
    session: IngestSession[int] = ingest.session(cache=refs)
    hot = [f"hot{n}" for n in range(5)]  # each used again within 20 new entries (40 // 2)
    first: dict[str, object] = {}
    points = 0

    async def put_as_a_protocol(name: str, timestamp: int, value: int) -> None:
        """As telnet does: the cache's get first, put (a recall, or a lookup) on a miss."""
        ref = refs.get(name.encode())
        if ref is not None:
            session.append_run([(ref, timestamp, value)])
        else:
            await put_waiting(session, point(timestamp, value, name), 0, (name.encode(),))

    for turn in range(20):
        names = [f"new{turn}-{n}" for n in range(10)] + hot
        for name in names:
            await put_as_a_protocol(name, T0 + turn, turn)
            points += 1
        await session.settle()
        assert refs.entries() <= 40
        first.update((n, refs.lookup(n.encode())) for n in names if n not in first)
    assert refs.evictions == 200 + 5 - 40
    # the series in use were resolved once each: never evicted
    assert len(seen) == 200 + 5
    assignments = ingest.uids.tagv.stats.assignments
    for name in [f"new0-{n}" for n in range(10)]:  # evicted long ago
        assert refs.lookup(name.encode()) is None
        await put_as_a_protocol(name, T0 + 20, -1)
        points += 1
    await session.settle()
    assert ingest.uids.tagv.stats.assignments == assignments
    assert [refs.lookup(f"new0-{n}".encode()) for n in range(10)] == [
        first[f"new0-{n}"] for n in range(10)
    ]
    assert len(seen) == 205 + 10  # meta tracking is told again (it remembers them)
    assert refs.entries() <= 40
    await ingest.writer.flush()
    assert len(await stored_points(storage, tables, ingest.uids)) == points


async def test_known_points_are_taken_without_suspending_misses_are_not(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest = make_writer()
    refs = ingest.ref_cache("proto")
    session: IngestSession[int] = ingest.session(cache=refs)
    assert session.put(point(T0, 1), 0, ["key-a"]) is Put.QUEUED
    assert "key-a" not in refs
    await session.settle()
    # kept under the protocol's key only, not by name too (one entry per series)
    assert ingest.cached("sys.cpu", host("a")) is None
    assignments = ingest.uids.tagv.stats.assignments
    assert session.put(point(T0 + 1, 2), 1) is Put.QUEUED  # no key: resolved by name
    await session.settle()
    assert ingest.uids.tagv.stats.assignments == assignments  # from the UID caches
    assert ingest.cached("sys.cpu", host("a")) == refs["key-a"]
    assert session.put(point(T0 + 2, 3), 2) is Put.BUFFERED
    session.append_run([(refs["key-a"], T0 + 3, 3.5)])
    await ingest.writer.flush()
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == [1, 2, 3, 3.5]


async def test_a_batch_of_misses_keeps_each_points_aliases_however_many(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    """Misses of one loop turn join one batch whatever their aliases: one key each (kept
    as a column), then none, then two, then a run of one key each: every key is
    remembered for its own series, a series without a key is kept by name, and every
    point is stored."""
    ingest = make_writer()
    refs = ingest.ref_cache("proto")
    session: IngestSession[int] = ingest.session(cache=refs, window=1)
    assert session.put(point(T0, 1, "a"), 0, ["key-a"]) is Put.QUEUED
    assert session.put(point(T0, 2, "b"), 1) is Put.QUEUED
    assert session.put(point(T0, 3, "c"), 2, ["key-c1", "key-c2"]) is Put.QUEUED
    assert put_run(session, [point(T0, 4, "d"), point(T0, 5, "e")], [b"key-d", b"key-e"]) == 2
    await session.settle()
    expected = {
        "key-a": "a",
        "key-c1": "c",
        "key-c2": "c",
        b"key-d": "d",
        b"key-e": "e",
    }
    for key, name in expected.items():
        assert refs[key] == await ingest.resolve("sys.cpu", host(name))
    assert ingest.cached("sys.cpu", host("b")) is not None  # no key: kept by name
    await ingest.writer.flush()
    assert sorted(p.value for p in await stored_points(storage, tables, ingest.uids)) == [
        1,
        2,
        3,
        4,
        5,
    ]


async def test_misses_get_their_uids_in_arrival_order_with_a_window_of_one(
    make_writer: MakeWriter,
) -> None:
    ingest = make_writer()
    session: IngestSession[int] = ingest.session(window=1)
    names = [f"web{n:02d}" for n in range(12)][::-1]
    for n, name in enumerate(names):
        await put_waiting(session, point(T0, n, name), n, ())
    await session.settle()
    uids = [ingest.uids.tagv.cached_id(name) or b"" for name in names]
    assert uids == sorted(uids)  # assigned one after another, in the order they came


async def test_commands_can_wait_for_the_lookups_before_them(make_writer: MakeWriter) -> None:
    ingest = make_writer()
    session: IngestSession[int] = ingest.session(window=64)
    for n in range(20):
        await put_waiting(session, point(T0, n, f"h{n}"), n, ())
    assert session.has_pending()
    await session.settle()
    assert not session.has_pending()
    assert all(ingest.cached("sys.cpu", host(f"h{n}")) is not None for n in range(20))


async def test_unknown_metric_is_refused_with_its_kind_and_tag(make_writer: MakeWriter) -> None:
    ingest = make_writer(auto_create_metrics=False)
    refusals = Refusals()
    session: IngestSession[int] = ingest.session(on_refused=refusals)
    await put_waiting(session, point(T0, 1), 7, ())
    await session.settle()
    [(tag, refused_point, refused)] = refusals.seen
    assert (tag, refused_point) == (7, point(T0, 1))
    assert refused == Refused(RefusalKind.UNKNOWN_METRIC, "No such name for 'metrics': 'sys.cpu'")


async def test_points_after_shutdown_are_refused_one_by_one(make_writer: MakeWriter) -> None:
    ingest = make_writer()
    ref = await ingest.resolve("sys.cpu", host("a"))
    await ingest.writer.close()
    refusals = Refusals()
    session: IngestSession[int] = ingest.session(on_refused=refusals)
    session.append_run([(ref, T0, 1), (ref, T0 + 1, 2)], [10, 11])
    session.put(point(T0 + 2, 3), 12)
    assert [(tag, r.kind) for tag, _, r in refusals.seen] == [
        (10, RefusalKind.STORAGE),
        (11, RefusalKind.STORAGE),
        (12, RefusalKind.STORAGE),
    ]
    assert refusals.seen[0][2].message == "the writer is shutting down"


async def test_appends_in_room_wait_while_storage_is_slow(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    ingest, gate = gated_writer(make_writer, storage, tables)
    ref = await ingest.resolve("sys.cpu", host("a"))
    session: IngestSession[int] = ingest.session()
    task = asyncio.ensure_future(append_in_room(session, [(ref, T0 + i, i) for i in range(20)]))
    await gate.entered.wait()
    assert session.is_full()
    assert not task.done()  # held by back-pressure, not buffered without bound
    assert ingest.writer.pending_cells() <= 8
    gate.opened.set()
    await task
    await ingest.writer.flush()
    assert [p.value for p in await stored_points(storage, tables, ingest.uids)] == list(range(20))


async def test_sync_outcome_tells_stored_failed_and_timed_out_points(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    hooked = HookedStorage(storage)
    failures = [StorageError("disk on fire")]
    held = asyncio.Event()

    async def hook(table: str, mutations: object) -> None:
        if table == tables.data_table:
            if failures:
                raise failures.pop()
            await held.wait()

    hooked.hooks["mutate"] = hook
    ingest = make_writer(
        hooked, limits=WriterLimits(retry_delays_s=(), max_batch_cells=2), flush_interval_ms=5
    )
    ref = await ingest.resolve("sys.cpu", host("a"))
    batch_failures: list[tuple[str, int]] = []

    def batch_failed(error: TsdError, points: int) -> None:
        batch_failures.append((error.message, points))

    session: IngestSession[int] = ingest.session(track_acks=True, on_batch_failed=batch_failed)
    session.append_run([(ref, T0, 1), (ref, T0 + 1, 2)], [0, 1])  # fails
    storage_error = Refused(RefusalKind.STORAGE, "disk on fire")
    outcome = await session.stored(timeout_s=None)
    assert (outcome.stored, outcome.unstored) == (0, [(0, storage_error), (1, storage_error)])
    session.append_run([(ref, T0 + 2, 3), (ref, T0 + 3, 4)], [2, 3])  # held
    outcome = await session.stored(timeout_s=0.05)  # storage is held until told
    assert outcome.stored == 0
    assert outcome.unstored == [(0, storage_error), (1, storage_error), (2, None), (3, None)]
    assert batch_failures == [("disk on fire", 2)]  # once per batch, with its point count
    held.set()
    outcome = await session.stored(timeout_s=None)
    assert outcome.stored == 2
    assert await stored_points(storage, tables, ingest.uids) == [
        StoredPoint("sys.cpu", host("a"), (T0 + 2) * 1000, 3),
        StoredPoint("sys.cpu", host("a"), (T0 + 3) * 1000, 4),
    ]


@pytest.mark.parametrize("salt_width", [0, 1])
async def test_a_burst_of_new_series_gets_the_refs_made_one_by_one(
    make_writer: MakeWriter, salt_width: int
) -> None:
    """A burst's row-key templates are made at once (unsalted: one C pass): each equal to
    the per-series template of its UIDs, salted or not; a series whose name fails (too
    long for the store) gets its error alone; meta tracking hears of each new series
    once; a series seen again in a later burst keeps its first ref."""
    ingest = make_writer(salt_width=salt_width, salt_buckets=4)
    told: list[SeriesKey] = []
    ingest._on_new_series = told.extend
    long_value = "v" * 40_000  # past the row length of either store
    keys = [("sys.cpu", make_tags({"host": f"h{i}", "dc": "lga"})) for i in range(50)]
    keys.insert(7, ("sys.cpu", make_tags({"host": long_value})))
    refs = await ingest.resolve_many(keys)
    assert isinstance(refs[7], NameTooLong)
    layout = ingest._layout
    for (metric, tags), ref in zip(keys, refs, strict=True):
        if not isinstance(ref, SeriesKey):
            continue
        metric_uid, pairs = await ingest.uids.resolve_for_write(metric, tags)
        expected = make_series_key(layout, metric_uid, pairs)
        assert ref == expected
        assert ref.row_key(T0) == expected.row_key(T0)
        assert ref.salt == expected.salt
        assert len(ref.salt) == salt_width
    assert told == [ref for ref in refs if isinstance(ref, SeriesKey)]
    again = await ingest.resolve_many([keys[0], ("sys.cpu", host("new"))])
    assert again[0] is refs[0]
    assert told[-1] is again[1]
    assert len(told) == 51


_NAME = st.text(alphabet=st.sampled_from("ab.\0é-"), max_size=4)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(metric=_NAME, tags=st.lists(st.tuples(_NAME, _NAME), max_size=4).map(tuple))
def test_series_name_key_answers_as_its_python_version(
    metric: str, tags: tuple[tuple[str, str], ...]
) -> None:
    """The refs' key of a series (the compiled one where built): names joined by NULs,
    or the (metric, tags) pair itself when a name holds a NUL."""
    assert series_name_key(metric, tags) == python_series_name_key(metric, tags)
    if "\0" not in metric + "".join(map("".join, tags)):
        assert series_name_key(metric, tags) == "\0".join([metric, *map("\0".join, tags)])


def put_run(session: IngestSession[int], points: list[DataPoint], keys: list[bytes]) -> int:
    """:meth:`IngestSession.put_run` of ``points`` (as columns)."""
    metrics, stamps, values, tags = map(list, zip(*points, strict=True))
    return session.put_run(metrics, tags, stamps, values, keys)


async def test_put_run_takes_a_run_as_put_one_by_one(
    make_writer: MakeWriter, storage: Storage, tables: StorageConfig
) -> None:
    """A run of new series' points (more than one miss batch) joins the batches in slices
    until the window is full, as put one by one stops at its first BUSY; the rest is taken
    after wait_lookup; each series is kept under its key; a run with a resolved series in
    it goes point by point (its point buffered at once). Every point is stored."""
    ingest = make_writer()
    refs = ingest.ref_cache("proto")
    session: IngestSession[int] = ingest.session(cache=refs, window=1)
    count = MAX_MISS_BATCH + 100
    points = [point(T0, n, f"h{n}") for n in range(count)]
    keys = [f"key-{n}".encode() for n in range(count)]
    assert put_run(session, points, keys) == MAX_MISS_BATCH  # put would answer BUSY next
    await session.wait_lookup()
    assert put_run(session, points[MAX_MISS_BATCH:], keys[MAX_MISS_BATCH:]) == 100
    await session.settle()
    assert [refs[key] for key in keys] == [
        ingest.cached("sys.cpu", host(f"h{n}")) or await ingest.resolve("sys.cpu", host(f"h{n}"))
        for n in range(count)
    ]
    again = [point(T0 + 1, 1, "h0"), point(T0 + 1, 2, "new")]
    ingest.drop_caches()
    await ingest.resolve("sys.cpu", host("h0"))  # resolved by name: the run goes one by one
    assert put_run(session, again, [b"key-0", b"key-new"]) == 2
    assert b"key-0" in refs  # buffered at once, its key remembered
    await session.settle()
    await ingest.writer.flush()
    stored = await stored_points(storage, tables, ingest.uids)
    assert len(stored) == count + 2
