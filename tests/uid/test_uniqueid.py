"""UniqueId against the real store: assignment, races, exhaustion, lookups, suggest, rename."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import cast

import pytest

from tsd.errors import (
    BadRequestError,
    NameTooLong,
    NoSuchUniqueId,
    NoSuchUniqueName,
    StorageError,
    StorageUnavailable,
    UidAlreadyExists,
    UidAssignmentError,
)
from tsd.storage.base import Cell, CheckAndPut, Put, ScanSpec, Storage
from tsd.uid.uniqueid import (
    MAX_ASSIGN_BATCH,
    MAX_ATTEMPTS_ASSIGN_RANDOM_ID,
    MAXID_ROW,
    UniqueId,
    prefix_stop_row,
)

from .hooked_storage import HookedStorage

MakeUid = Callable[..., UniqueId]


def be64(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


async def counter(storage: Storage, table: str, kind: str) -> int | None:
    row = await storage.get(table, MAXID_ROW)
    raw = None if row is None else row.value("id", kind.encode())
    return None if raw is None else int.from_bytes(raw, "big", signed=True)


async def forward_rows(storage: Storage, table: str, kind: str) -> dict[bytes, bytes]:
    """Every forward mapping of ``kind``: name bytes -> uid."""
    found = {}
    async for row in storage.scan(table, ScanSpec(start=b"\x01", families=("id",))):
        uid = row.value("id", kind.encode())
        if uid is not None:
            found[row.key] = uid
    return found


async def reverse_rows(storage: Storage, table: str, kind: str) -> dict[bytes, bytes]:
    """Every reverse mapping of ``kind``: uid -> name bytes."""
    found = {}
    async for row in storage.scan(table, ScanSpec(start=b"\x00", families=("name",))):
        name = row.value("name", kind.encode())
        if name is not None:
            found[row.key] = name
    return found


async def reverse_name(storage: Storage, table: str, kind: str, uid: bytes) -> bytes | None:
    row = await storage.get(table, uid, ("name",))
    return None if row is None else row.value("name", kind.encode())


# -- the stored layout ------------------------------------------------------------------------


async def test_assignment_writes_opentsdb_rows(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics", auto_create=True)
    assert await metrics.get_or_create_id("sys.cpu.user") == b"\x00\x00\x01"
    assert await metrics.get_or_create_id("café") == b"\x00\x00\x02"

    forward = await storage.get(uid_table, b"sys.cpu.user")
    assert forward is not None
    assert forward.cells == (Cell("id", b"metrics", b"\x00\x00\x01"),)
    reverse = await storage.get(uid_table, b"\x00\x00\x01")
    assert reverse is not None
    assert reverse.cells == (Cell("name", b"metrics", b"sys.cpu.user"),)
    maxid = await storage.get(uid_table, b"\x00")
    assert maxid is not None
    assert maxid.cells == (Cell("id", b"metrics", be64(2)),)
    # names are ISO-8859-1 bytes, OpenTSDB's CHARSET: é is one byte
    latin = await storage.get(uid_table, b"caf\xe9")
    assert latin is not None
    assert latin.cells == (Cell("id", b"metrics", b"\x00\x00\x02"),)
    assert await reverse_name(storage, uid_table, "metrics", b"\x00\x00\x02") == b"caf\xe9"


async def test_kinds_have_their_own_counters_and_cells(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics, tagk, tagv = make_uid("metrics"), make_uid("tagk"), make_uid("tagv")
    assert await metrics.get_or_create_id("web01") == b"\x00\x00\x01"
    assert await tagk.get_or_create_id("host") == b"\x00\x00\x01"
    assert await tagk.get_or_create_id("web01") == b"\x00\x00\x02"
    assert await tagv.get_or_create_id("web01") == b"\x00\x00\x01"
    row = await storage.get(uid_table, b"web01")
    assert row is not None
    assert row.cells == (
        Cell("id", b"metrics", b"\x00\x00\x01"),
        Cell("id", b"tagk", b"\x00\x00\x02"),
        Cell("id", b"tagv", b"\x00\x00\x01"),
    )
    maxid = await storage.get(uid_table, MAXID_ROW)
    assert maxid is not None
    assert maxid.cells == (
        Cell("id", b"metrics", be64(1)),
        Cell("id", b"tagk", be64(2)),
        Cell("id", b"tagv", be64(1)),
    )


@pytest.mark.parametrize(
    ("width", "uid"),
    [
        pytest.param(1, b"\x01", id="width_1"),
        pytest.param(3, b"\x00\x00\x01", id="width_3"),
        pytest.param(4, b"\x00\x00\x00\x01", id="width_4"),
        pytest.param(8, b"\x00" * 7 + b"\x01", id="width_8"),
    ],
)
async def test_uid_is_the_counter_on_width_bytes(make_uid: MakeUid, width: int, uid: bytes) -> None:
    tagk = make_uid("tagk", width)
    assert await tagk.get_or_create_id("host") == uid
    assert await tagk.get_name(uid) == "host"


async def test_assignment_continues_from_an_existing_counter(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    # a table OpenTSDB has used already: the counter holds the highest UID it handed out
    assert await storage.increment(uid_table, MAXID_ROW, "id", b"tagv", 41) == 41
    tagv = make_uid("tagv")
    assert await tagv.get_or_create_id("web01") == (42).to_bytes(3, "big")


# -- concurrency ------------------------------------------------------------------------------


async def test_concurrent_get_or_create_assigns_one_uid_per_name(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    uids = {kind: make_uid(kind, auto_create=True) for kind in ("metrics", "tagk", "tagv")}
    names = [f"name.{i:03d}" for i in range(100)]
    calls = [(kind, name) for kind in uids for name in names for _ in range(10)]
    random.Random(7).shuffle(calls)
    assert len(calls) == 3000  # 1,000 per kind over 100 new names

    results = await asyncio.gather(*(uids[kind].get_or_create_id(name) for kind, name in calls))

    for kind, unique_id in uids.items():
        by_name: dict[str, set[bytes]] = {}
        for (call_kind, name), uid in zip(calls, results, strict=True):
            if call_kind == kind:
                by_name.setdefault(name, set()).add(uid)
        assert all(len(found) == 1 for found in by_name.values())
        assigned = {found.pop() for found in by_name.values()}
        assert len(assigned) == 100
        assert {int.from_bytes(uid, "big") for uid in assigned} == set(range(1, 101))
        for name in names:
            uid = await unique_id.get_id(name)
            assert await reverse_name(storage, uid_table, kind, uid) == name.encode()
        assert await counter(storage, uid_table, kind) == 100  # no increment wasted
        assert unique_id.stats.assignments == 100
        assert unique_id.stats.lost_races == 0


async def test_two_tsds_racing_never_split_a_name_or_share_a_uid(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    # two UniqueId instances with their own caches and pending maps: two TSDs on one table
    first, second = make_uid("tagv"), make_uid("tagv")
    names = [f"host{i:03d}" for i in range(100)]
    order = [(tsd, name) for tsd in (first, second) for name in names for _ in range(3)]
    random.Random(11).shuffle(order)

    results = await asyncio.gather(*(tsd.get_or_create_id(name) for tsd, name in order))

    by_name: dict[str, set[bytes]] = {}
    for (_tsd, name), uid in zip(order, results, strict=True):
        by_name.setdefault(name, set()).add(uid)
    assert all(len(found) == 1 for found in by_name.values()), "a name got two UIDs"
    forward = await forward_rows(storage, uid_table, "tagv")
    assert sorted(forward) == sorted(name.encode() for name in names)
    assert len(set(forward.values())) == 100, "a UID was given to two names"
    for name_bytes, uid in forward.items():
        assert by_name[name_bytes.decode()] == {uid}
        assert await reverse_name(storage, uid_table, "tagv", uid) == name_bytes
    # each lost race leaks exactly one ID; nothing else is wasted
    leaked = first.stats.lost_races + second.stats.lost_races
    assert await counter(storage, uid_table, "tagv") == 100 + leaked
    assert first.stats.assignments + second.stats.assignments == 100


async def test_a_batch_of_new_names_costs_four_storage_calls(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    hooked = HookedStorage(storage)
    tagv = make_uid("tagv", store=hooked)
    names = [f"v{i:04d}" for i in range(1000)]
    checked: list[CheckAndPut] = []

    async def forward_only(table: str, checks: Sequence[CheckAndPut]) -> None:
        checked.extend(checks)

    hooked.hooks["check_and_put_many"] = forward_only
    uids = await tagv.get_or_create_ids(names)
    # in the order given: one increment by 1,000 reserved IDs 1..1000
    assert list(uids.values()) == [i.to_bytes(3, "big") for i in range(1, 1001)]
    # reverse mappings as plain puts (one write), forward mappings checked: one per name
    assert hooked.calls == {"get_many": 1, "increment": 1, "mutate": 1, "check_and_put_many": 1}
    assert len(checked) == 1000
    assert {c.family for c in checked} == {"id"}
    assert tagv.stats.blocks == 1
    for name in (names[0], names[-1]):
        assert await reverse_name(storage, uid_table, "tagv", uids[name]) == name.encode()
    assert await forward_rows(storage, uid_table, "tagv") == {
        name.encode(): uid for name, uid in uids.items()
    }
    assert await counter(storage, uid_table, "tagv") == 1000
    assert tagv.stats.assignments == 1000
    hooked.calls.clear()
    assert await tagv.get_or_create_ids([names[5], "v-new", names[5]]) == {
        names[5]: uids[names[5]],
        "v-new": b"\x00\x03\xe9",
    }


async def test_concurrent_batches_and_single_calls_assign_one_uid_per_name(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    """Two TSDs (two UniqueIds on one table), each with batch and single callers over
    overlapping names: one UID per name, one name per UID, reverse rows right, and every
    ID the counter handed out either used or leaked by a lost race."""
    first, second = make_uid("tagv"), make_uid("tagv")
    names = [f"host{i:03d}" for i in range(300)]
    rng = random.Random(5)
    calls: list[tuple[UniqueId, list[str] | str]] = []
    for tsd in (first, second):
        calls += [(tsd, rng.sample(names, 120)) for _ in range(6)]
        calls += [(tsd, name) for name in rng.sample(names, 100)]
    rng.shuffle(calls)

    async def call(tsd: UniqueId, what: list[str] | str) -> dict[str, bytes]:
        if isinstance(what, str):
            return {what: await tsd.get_or_create_id(what)}
        found = await tsd.get_or_create_ids(what)
        assert list(found) == what
        return found

    results = await asyncio.gather(*(call(tsd, what) for tsd, what in calls))

    seen: dict[str, set[bytes]] = {}
    for result in results:
        for name, uid in result.items():
            seen.setdefault(name, set()).add(uid)
    forward = await forward_rows(storage, uid_table, "tagv")
    assigned = {name.decode(): uid for name, uid in forward.items()}
    assert set(seen) <= set(assigned)
    assert all(found == {assigned[name]} for name, found in seen.items()), "a name got two UIDs"
    assert len(set(assigned.values())) == len(assigned), "a UID was given to two names"
    for name, uid in assigned.items():
        assert await reverse_name(storage, uid_table, "tagv", uid) == name.encode()
        assert await first.get_id(name) == uid
        assert await second.get_id(name) == uid
    leaked = first.stats.lost_races + second.stats.lost_races
    assert first.stats.assignments + second.stats.assignments == len(assigned)
    assert await counter(storage, uid_table, "tagv") == len(assigned) + leaked


async def test_batch_with_auto_create_off_leaves_unknown_names_out(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics", auto_create=False)
    assert await metrics.assign("known") == b"\x00\x00\x01"
    metrics.drop_caches()
    assert await metrics.get_or_create_ids(["x", "known", "y"]) == {"known": b"\x00\x00\x01"}
    assert metrics.stats.refused_creations == 2
    assert await counter(storage, uid_table, "metrics") == 1


async def test_batch_past_the_width_assigns_what_fits_and_refuses_the_rest(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    tagk = make_uid("tagk", 1)
    await tagk.get_or_create_ids([f"k{i}" for i in range(250)])
    with pytest.raises(UidAssignmentError, match="All Unique IDs for tagk on 1 bytes"):
        await tagk.get_or_create_ids([f"n{i}" for i in range(10)])
    # the five that fitted were assigned; the others have no forward row
    assert [await tagk.get_id(f"n{i}") for i in range(5)] == [bytes((i,)) for i in range(251, 256)]
    for i in range(5, 10):
        with pytest.raises(NoSuchUniqueName):
            await tagk.get_id(f"n{i}")


async def test_losing_the_forward_race_uses_the_winners_uid(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    other_tsd = make_uid("tagk")
    hooked = HookedStorage(storage)
    this_tsd = make_uid("tagk", store=hooked)

    async def other_tsd_wins(table: str, checks: Sequence[CheckAndPut]) -> None:
        if checks[0].family == "id":  # just before our forward check-and-puts
            hooked.hooks.clear()
            assert await other_tsd.get_or_create_id("host") == b"\x00\x00\x02"

    hooked.hooks["check_and_put_many"] = other_tsd_wins
    assert await this_tsd.get_or_create_id("host") == b"\x00\x00\x02"
    assert this_tsd.stats.lost_races == 1
    assert this_tsd.stats.assignments == 0
    assert await counter(storage, uid_table, "tagk") == 2
    # our ID 1 is a gap: only we ever held it, so its reverse mapping was removed
    assert await reverse_name(storage, uid_table, "tagk", b"\x00\x00\x01") is None
    assert this_tsd.stats.orphans_removed == 1
    assert await forward_rows(storage, uid_table, "tagk") == {b"host": b"\x00\x00\x02"}
    assert await this_tsd.get_name(b"\x00\x00\x02") == "host"


async def test_a_cancelled_caller_does_not_cancel_the_shared_assignment(
    storage: Storage, make_uid: MakeUid
) -> None:
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)
    entered, gate = asyncio.Event(), asyncio.Event()

    async def wait_for_gate(*_args: object) -> None:
        entered.set()
        await gate.wait()

    hooked.hooks["increment"] = wait_for_gate
    first = asyncio.create_task(tagk.get_or_create_id("host"))
    second = asyncio.create_task(tagk.get_or_create_id("host"))
    await entered.wait()
    first.cancel()
    gate.set()
    assert await second == b"\x00\x00\x01"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert hooked.calls["increment"] == 1


async def test_assignment_retries_after_a_storage_failure(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)
    failures = 2

    async def fail_twice(*_args: object) -> None:
        nonlocal failures
        if failures:
            failures -= 1
            raise StorageUnavailable("injected")

    hooked.hooks["check_and_put_many"] = fail_twice
    assert await tagk.get_or_create_id("host") == b"\x00\x00\x03"  # IDs 1 and 2 are gaps
    assert await counter(storage, uid_table, "tagk") == 3
    # the reverse mappings of the failed attempts were removed: no orphan for fsck
    assert await reverse_rows(storage, uid_table, "tagk") == {b"\x00\x00\x03": b"host"}
    assert tagk.stats.orphans_removed == 2


async def test_forward_rows_written_before_a_failure_keep_their_reverse_rows(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    # The check-and-puts are applied, then the call fails (a reply lost on the way back):
    # the mappings are whole, and the retry finds them by their forward rows.
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)
    lost_replies = 1

    async def apply_then_fail(table: str, checks: Sequence[CheckAndPut]) -> None:
        nonlocal lost_replies
        if lost_replies:
            lost_replies -= 1
            await storage.check_and_put_many(table, list(checks))
            raise StorageError("reply lost")

    hooked.hooks["check_and_put_many"] = apply_then_fail
    found = await tagk.get_or_create_ids(["a", "b"], {})
    assert found == {"a": b"\x00\x00\x01", "b": b"\x00\x00\x02"}
    assert await reverse_rows(storage, uid_table, "tagk") == {
        b"\x00\x00\x01": b"a",
        b"\x00\x00\x02": b"b",
    }
    assert tagk.stats.orphans_removed == 0


async def test_assignment_gives_up_after_three_storage_failures(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)

    async def always_fail(*_args: object) -> None:
        raise StorageUnavailable("injected")

    hooked.hooks["increment"] = always_fail
    with pytest.raises(StorageUnavailable, match="injected"):
        await tagk.get_or_create_id("host")
    assert hooked.calls["increment"] == 3
    assert await counter(storage, uid_table, "tagk") is None


async def test_a_name_the_store_refuses_fails_alone_in_its_batch(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    # The store refuses one name's rows (as the embedded store refuses a key past 511
    # bytes): the batch is split until that name is alone; the other names get their UIDs.
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)

    async def refuse_bad(_table: str, items: Sequence[object]) -> None:
        rows = [item.put.row if isinstance(item, CheckAndPut) else item for item in items]
        if b"bad" in rows:
            raise StorageError("row refused")

    hooked.hooks["check_and_put_many"] = refuse_bad
    hooked.hooks["get_many"] = lambda table, rows, *_: refuse_bad(table, rows)
    names = [f"n{i}" for i in range(40)]
    names.insert(17, "bad")
    errors: dict[str, BaseException] = {}
    found = await tagk.get_or_create_ids(names, errors)
    assert set(found) == set(names) - {"bad"}
    assert len(set(found.values())) == 40
    assert list(errors) == ["bad"]
    assert isinstance(errors["bad"], StorageError)
    forward = await forward_rows(storage, uid_table, "tagk")
    assert forward == {name.encode(): uid for name, uid in found.items()}
    # every attempt that failed took its reverse mappings back: each one left is claimed
    assert await reverse_rows(storage, uid_table, "tagk") == {
        uid: name for name, uid in forward.items()
    }


async def test_a_systemic_storage_error_is_not_split(storage: Storage, make_uid: MakeUid) -> None:
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)

    async def down(*_args: object) -> None:
        raise StorageUnavailable("down")

    hooked.hooks["get_many"] = down
    errors: dict[str, BaseException] = {}
    assert await tagk.get_or_create_ids([f"n{i}" for i in range(64)], errors) == {}
    assert len(errors) == 64
    assert hooked.calls["get_many"] == 3  # the attempts, no halves


async def test_a_name_too_long_for_the_store_is_refused_up_front(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics")
    limit = storage.max_row_length("id")
    assert limit == (506 if type(storage).__name__ == "EmbeddedStorage" else 32767)
    long_name = "x" * (limit + 1)
    fits = "y" * limit
    errors: dict[str, BaseException] = {}
    found = await metrics.get_or_create_ids(["a", long_name, fits, "b"], errors)
    assert list(found) == ["a", fits, "b"]
    assert list(errors) == [long_name]
    assert str(errors[long_name]) == (
        f'Invalid metric name ("{"x" * 64}..."): too long: {limit + 1} characters,'
        f" at most {limit} in this store"
    )
    with pytest.raises(NameTooLong):
        await metrics.get_or_create_id(long_name)
    with pytest.raises(NameTooLong):
        await metrics.assign(long_name)
    with pytest.raises(NoSuchUniqueName):
        await metrics.get_id(long_name)  # a lookup: it has none (never read)
    assert long_name.encode() not in await forward_rows(storage, uid_table, "metrics")


# -- exhaustion and refusal -------------------------------------------------------------------


async def test_width_one_runs_out_after_255_ids(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    tagk = make_uid("tagk", 1)
    names = [f"k{i}" for i in range(255)]
    uids = await asyncio.gather(*(tagk.get_or_create_id(name) for name in names))
    assert sorted(uids) == [bytes((i,)) for i in range(1, 256)]
    with pytest.raises(UidAssignmentError) as caught:
        await tagk.get_or_create_id("one.too.many")
    assert str(caught.value) == "All Unique IDs for tagk on 1 bytes are already assigned!"
    assert await storage.get(uid_table, b"one.too.many") is None
    # still refused later: every attempt is a fresh increment past the width
    with pytest.raises(UidAssignmentError):
        await tagk.assign("another")
    assert await counter(storage, uid_table, "tagk") == 257


async def test_auto_create_off_refuses_new_names(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics", auto_create=False)
    with pytest.raises(NoSuchUniqueName) as caught:
        await metrics.get_or_create_id("x")
    assert str(caught.value) == "No such name for 'metrics': 'x'"
    assert (caught.value.kind, caught.value.name) == ("metrics", "x")
    assert metrics.stats.refused_creations == 1
    assert await counter(storage, uid_table, "metrics") is None
    # an existing name still resolves
    assert await metrics.assign("x") == b"\x00\x00\x01"
    assert await metrics.get_or_create_id("x") == b"\x00\x00\x01"


# -- explicit assignment ----------------------------------------------------------------------


async def test_assign_refuses_a_name_that_has_a_uid(make_uid: MakeUid) -> None:
    metrics = make_uid("metrics", auto_create=False)
    assert await metrics.assign("sys.cpu.user") == b"\x00\x00\x01"
    assert await metrics.assign("sys.cpu.nice") == b"\x00\x00\x02"
    with pytest.raises(UidAlreadyExists) as caught:
        await metrics.assign("sys.cpu.nice")
    assert str(caught.value) == "Name already exists with UID: 000002"
    assert caught.value.status == 400
    assert caught.value.uid == b"\x00\x00\x02"


# -- lookups ----------------------------------------------------------------------------------


async def test_get_id_and_get_name_of_unknown_entries(make_uid: MakeUid) -> None:
    tagv = make_uid("tagv")
    with pytest.raises(NoSuchUniqueName, match=r"^No such name for 'tagv': 'nope'$"):
        await tagv.get_id("nope")
    with pytest.raises(NoSuchUniqueId) as caught:
        await tagv.get_name(b"\x00\x00\xe4")
    assert str(caught.value) == "No such unique ID for 'tagv': [0, 0, -28]"
    with pytest.raises(BadRequestError) as wrong:
        await tagv.get_name(b"\x01")
    assert str(wrong.value) == "Wrong id.length = 1 which is != 3 required for 'tagv'"


async def test_get_names_reads_names_in_batches_and_caches_them(make_uid: MakeUid) -> None:
    writer = make_uid("tagv")
    uids = [await writer.assign(f"v{i}") for i in range(10)]
    reader = make_uid("tagv")  # a cold cache, as after a restart
    assert await reader.get_names(uids, batch=3) == {u: f"v{i}" for i, u in enumerate(uids)}
    assert reader.cached_name(uids[7]) == "v7"
    with pytest.raises(NoSuchUniqueId):
        await reader.get_names([uids[0], b"\x00\x00\xe4"])


async def test_cached_names_answer_what_the_cache_holds_and_list_the_rest(
    make_uid: MakeUid,
) -> None:
    writer = make_uid("tagv")
    uids = [await writer.assign(f"v{i}") for i in range(6)]
    reader = make_uid("tagv")  # a cold cache: only what it reads is cached
    await reader.get_names(uids[:3])
    hits = reader.stats.cache_hits
    found, missing = reader.cached_names([uids[4], uids[0], uids[2], uids[5]])
    assert found == {uids[0]: "v0", uids[2]: "v2"}
    assert missing == [uids[4], uids[5]]
    assert reader.stats.cache_hits == hits + 2
    assert writer.cached_names(uids) == ({u: f"v{i}" for i, u in enumerate(uids)}, [])


async def test_lookups_read_storage_once_then_the_cache(
    storage: Storage, make_uid: MakeUid
) -> None:
    await make_uid("tagk").get_or_create_id("host")  # written by "another TSD"
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)
    assert await tagk.get_name(b"\x00\x00\x01") == "host"
    assert await tagk.get_id("host") == b"\x00\x00\x01"  # get_name cached both directions
    assert await tagk.get_or_create_id("host") == b"\x00\x00\x01"
    assert tagk.cached_id("host") == b"\x00\x00\x01"
    assert tagk.cached_name(b"\x00\x00\x01") == "host"
    assert hooked.calls == {"get": 1}
    assert (tagk.stats.cache_hits, tagk.stats.cache_misses) == (4, 1)


async def test_concurrent_lookups_of_one_name_share_one_read(
    storage: Storage, make_uid: MakeUid
) -> None:
    await make_uid("tagk").get_or_create_id("host")
    hooked = HookedStorage(storage)
    tagk = make_uid("tagk", store=hooked)
    found = await asyncio.gather(*(tagk.get_id("host") for _ in range(50)))
    assert set(found) == {b"\x00\x00\x01"}
    assert hooked.calls == {"get": 1}


async def test_a_uid_of_the_wrong_width_in_storage_is_an_error(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    await storage.put(uid_table, [Put(b"host", "id", b"tagk", b"\x00\x01")])
    with pytest.raises(ValueError, match="Found id.length = 2 which is != 3"):
        await make_uid("tagk").get_id("host")


# -- names outside ISO-8859-1 (OpenTSDB writes each such character as "?") -------------------


async def test_names_outside_latin1_are_stored_as_opentsdb_stores_them(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    tagv = make_uid("tagv")
    uid = await tagv.get_or_create_id("日本")
    assert uid == b"\x00\x00\x01"
    assert await forward_rows(storage, uid_table, "tagv") == {b"??": uid}
    assert await tagv.get_name(uid) == "??"
    # OpenTSDB's collision, kept for compatibility: another such name maps to the same row
    assert await tagv.get_or_create_id("中国") == uid
    assert await tagv.get_id("??") == uid
    assert tagv.cached_id("日本") == uid  # cached under the spelling that was asked for
    other = make_uid("tagv")  # a fresh cache reads the same row
    assert await other.get_id("中国") == uid
    assert await counter(storage, uid_table, "tagv") == 1


# -- suggest ----------------------------------------------------------------------------------


async def test_suggest_lists_names_of_its_kind_in_byte_order(make_uid: MakeUid) -> None:
    metrics, tagk = make_uid("metrics"), make_uid("tagk")
    names = ["sys.cpu.user", "sys.cpu.nice", "sys.mem.free", "sys.cpu.idle", "net.bytes", "Sys.x"]
    for name in names:
        await metrics.assign(name)
    await tagk.assign("sys.host")  # another kind: never suggested for metrics
    assert await metrics.suggest("sys.") == [
        "sys.cpu.idle",
        "sys.cpu.nice",
        "sys.cpu.user",
        "sys.mem.free",
    ]
    assert await metrics.suggest("sys.cpu", 2) == ["sys.cpu.idle", "sys.cpu.nice"]
    assert await metrics.suggest("") == sorted(names)  # upper case sorts first
    assert await metrics.suggest("nope") == []
    assert await tagk.suggest("sys") == ["sys.host"]


async def test_suggest_max_defaults_to_25_and_returns_one_below_one(make_uid: MakeUid) -> None:
    tagv = make_uid("tagv")
    await asyncio.gather(*(tagv.assign(f"v{i:02d}") for i in range(30)))
    assert await tagv.suggest("v") == [f"v{i:02d}" for i in range(25)]
    assert await tagv.suggest("v", 100) == [f"v{i:02d}" for i in range(30)]
    assert await tagv.suggest("v", 0) == ["v00"]  # OpenTSDB checks the count after adding


async def test_suggest_with_empty_prefix_scans_printable_ascii_only(make_uid: MakeUid) -> None:
    tagv = make_uid("tagv")
    for name in ("ébène", "web01", "ÿÿ"):
        await tagv.assign(name)
    assert await tagv.suggest("") == ["web01"]  # OpenTSDB scans "!" up to "~"
    assert await tagv.suggest("é") == ["ébène"]
    assert await tagv.suggest("ÿ") == ["ÿÿ"]  # a prefix ending in 0xFF still has a range


@pytest.mark.parametrize(
    ("prefix", "stop"),
    [
        pytest.param(b"sys", b"syt", id="plain"),
        pytest.param(b"a\xff", b"b", id="trailing_ff"),
        pytest.param(b"\xff\xff", b"", id="all_ff"),
    ],
)
def test_prefix_stop_row(prefix: bytes, stop: bytes) -> None:
    assert prefix_stop_row(prefix) == stop


# -- rename and delete ------------------------------------------------------------------------


async def test_rename_moves_the_uid_to_the_new_name(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    tagv = make_uid("tagv")
    uid = await tagv.get_or_create_id("web01")
    await tagv.rename("web01", "web01.example.com")
    assert await tagv.get_id("web01.example.com") == uid
    assert await tagv.get_name(uid) == "web01.example.com"
    with pytest.raises(NoSuchUniqueName):
        await tagv.get_id("web01")
    assert await forward_rows(storage, uid_table, "tagv") == {b"web01.example.com": uid}
    assert await reverse_name(storage, uid_table, "tagv", uid) == b"web01.example.com"
    fresh = make_uid("tagv")  # what another TSD sees in storage
    assert await fresh.get_id("web01.example.com") == uid
    with pytest.raises(NoSuchUniqueName):
        await fresh.get_id("web01")
    # the old name is new again: it gets a new UID
    assert await tagv.get_or_create_id("web01") == b"\x00\x00\x02"


async def test_rename_refuses_a_taken_name_and_a_missing_one(
    uid_table: str, make_uid: MakeUid
) -> None:
    tagk = make_uid("tagk")
    await tagk.assign("host")
    await tagk.assign("dc")
    with pytest.raises(BadRequestError) as caught:
        await tagk.rename("host", "dc")
    assert str(caught.value) == (
        f'When trying rename("host", "dc") on UniqueId({uid_table}, tagk, 3): new name'
        " already assigned ID=[0, 0, 2]"
    )
    with pytest.raises(NoSuchUniqueName):
        await tagk.rename("nope", "other")
    assert await tagk.get_id("host") == b"\x00\x00\x01"


async def test_delete_removes_both_mappings(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics")
    uid = await metrics.assign("sys.cpu.user")
    await storage.put(uid_table, [Put(uid, "name", b"metric_meta", b"{}")])
    await metrics.delete("sys.cpu.user")
    with pytest.raises(NoSuchUniqueName):
        await metrics.get_id("sys.cpu.user")
    with pytest.raises(NoSuchUniqueId):
        await metrics.get_name(uid)
    assert await storage.get(uid_table, b"sys.cpu.user") is None
    assert await storage.get(uid_table, uid) is None


# -- the cache --------------------------------------------------------------------------------


async def test_cache_stays_within_its_bound_and_misses_fall_back_to_storage(
    make_uid: MakeUid,
) -> None:
    tagv = make_uid("tagv", max_entries=10)
    names = [f"v{i:03d}" for i in range(100)]
    uids = [await tagv.get_or_create_id(name) for name in names]
    assert tagv.cache.id_entries <= 10
    assert tagv.cache.name_entries <= 10
    assert tagv.cache.evictions > 0
    misses = tagv.stats.cache_misses
    assert [await tagv.get_id(name) for name in names] == uids
    assert [await tagv.get_name(uid) for uid in uids] == names
    assert tagv.stats.cache_misses > misses
    assert tagv.cache.id_entries <= 10


async def test_drop_caches_forgets_mappings_changed_elsewhere(make_uid: MakeUid) -> None:
    this_tsd, other_tsd = make_uid("tagk"), make_uid("tagk")
    uid = await this_tsd.get_or_create_id("host")
    await other_tsd.rename("host", "hostname")
    assert await this_tsd.get_id("host") == uid  # stale, from the cache
    assert await this_tsd.get_name(uid) == "host"
    this_tsd.drop_caches()
    assert len(this_tsd.cache) == 0
    with pytest.raises(NoSuchUniqueName):
        await this_tsd.get_id("host")
    assert await this_tsd.get_name(uid) == "hostname"


def test_constructor_checks_kind_and_width(storage: Storage) -> None:
    from tsd.uid.cache import UidCache

    with pytest.raises(ValueError, match="kind must be one of"):
        UniqueId(storage, "t", "metric", 3, UidCache(10), auto_create=True)
    with pytest.raises(ValueError, match="Invalid width: 9"):
        UniqueId(storage, "t", "tagk", 9, UidCache(10), auto_create=True)


async def test_block_size_bounds_the_ids_one_increment_reserves(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    """tsd.core.uid.block_size: 1,000 new names with blocks of at most 300 IDs take four
    increments (300, 300, 300, 100), the IDs still consecutive and the counter exact."""
    hooked = HookedStorage(storage)
    tagv = make_uid("tagv", store=hooked, block_size=300)
    names = [f"b{i:04d}" for i in range(1000)]
    uids = await tagv.get_or_create_ids(names)
    assert list(uids.values()) == [i.to_bytes(3, "big") for i in range(1, 1001)]
    assert hooked.calls["increment"] == 4
    assert tagv.stats.blocks == 4
    assert await counter(storage, uid_table, "tagv") == 1000
    for name in (names[0], names[299], names[300], names[-1]):
        assert await reverse_name(storage, uid_table, "tagv", uids[name]) == name.encode()


# -- random metric UIDs (tsd.core.uid.random_metrics) --------------------------------------------


async def test_random_ids_are_drawn_and_leave_the_counter_alone(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    metrics = make_uid("metrics", random_ids=True)
    names = [f"rnd.{i}" for i in range(50)]
    uids = await metrics.get_or_create_ids(names)
    assert len(set(uids.values())) == 50
    assert all(len(uid) == 3 and uid != b"\x00\x00\x00" for uid in uids.values())
    # drawn from 16 M IDs: never the counter's 1..50 in order
    assert sorted(uids.values()) != [i.to_bytes(3, "big") for i in range(1, 51)]
    assert await counter(storage, uid_table, "metrics") is None
    assert metrics.stats.blocks == 0
    assert await forward_rows(storage, uid_table, "metrics") == {
        name.encode(): uid for name, uid in uids.items()
    }
    for name, uid in uids.items():
        assert await reverse_name(storage, uid_table, "metrics", uid) == name.encode()


async def test_a_random_id_another_name_holds_is_drawn_again(
    storage: Storage, uid_table: str, make_uid: MakeUid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenTSDB's collision retries: the reverse mapping is a check-and-put that the drawn
    ID is free; a taken one is drawn again (the other name's mapping untouched), and after
    MAX_ATTEMPTS_ASSIGN_RANDOM_ID collisions the name is refused."""
    await storage.put(uid_table, [Put(b"\x00\x00\x05", "name", b"metrics", b"other")])
    metrics = make_uid("metrics", random_ids=True)
    draws = iter([5, 9])
    monkeypatch.setattr(metrics, "_draw_id", lambda: next(draws).to_bytes(3, "big"))
    assert await metrics.get_or_create_id("lucky") == b"\x00\x00\x09"
    assert metrics.stats.random_collisions == 1
    assert await reverse_name(storage, uid_table, "metrics", b"\x00\x00\x05") == b"other"

    monkeypatch.setattr(metrics, "_draw_id", lambda: b"\x00\x00\x05")
    with pytest.raises(UidAssignmentError, match="Failed to assign a random ID for kind="):
        await metrics.get_or_create_id("unlucky")
    assert metrics.stats.random_collisions == 1 + MAX_ATTEMPTS_ASSIGN_RANDOM_ID
    assert b"unlucky" not in await forward_rows(storage, uid_table, "metrics")
    assert await reverse_name(storage, uid_table, "metrics", b"\x00\x00\x05") == b"other"


async def test_random_ids_are_at_most_seven_bytes(storage: Storage) -> None:
    from tsd.uid.cache import UidCache

    with pytest.raises(ValueError, match="random UIDs are at most 7 bytes wide: 8"):
        UniqueId(storage, "t", "metrics", 8, UidCache(10), auto_create=True, random_ids=True)


async def test_a_burst_joins_batches_as_names_claimed_one_by_one(
    storage: Storage, uid_table: str, make_uid: MakeUid
) -> None:
    """Names none of which is pending join the filling batches in slices (past
    MAX_ASSIGN_BATCH a new batch), a name given twice once, and names pending in another
    batch share it: every name one UID, each batch's IDs in the order its names were asked
    (the two batches run at once: which reserves its block first is the store's)."""
    tagv = make_uid("tagv")
    first = [f"a{i}" for i in range(MAX_ASSIGN_BATCH + 10)]
    batches = tagv._claim(first)
    assert [len(batch.names) for batch in batches] == [MAX_ASSIGN_BATCH, 10]
    again = tagv._claim(["a1", "a2"])  # pending: shared
    assert again == [batches[0]]
    more = tagv._claim(["b0", "b1", "b0", "b2"])  # a name twice: once in the batch
    assert more == [batches[1]]
    assert batches[1].names == first[MAX_ASSIGN_BATCH:] + ["b0", "b1", "b2"]
    results = await asyncio.gather(*(asyncio.shield(batch.done) for batch in batches))
    uids = {name: cast(bytes, uid) for result in results for name, uid in result.items()}
    order = first + ["b0", "b1", "b2"]
    assert list(uids) == order
    for batch in batches:
        numbers = [int.from_bytes(uids[name], "big") for name in batch.names]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    assert sorted(int.from_bytes(u, "big") for u in uids.values()) == list(range(1, len(order) + 1))
    assert await tagv.get_or_create_ids(["b2", "a5", "c"]) == {
        "b2": uids["b2"],
        "a5": uids["a5"],
        "c": (len(order) + 1).to_bytes(3, "big"),
    }
