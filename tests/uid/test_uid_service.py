"""UidService: the three kinds built from Config, the write-path resolver, admin helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tsd.config import Config, build_config
from tsd.errors import BadRequestError, ConfigError, NoSuchUniqueName, UidAlreadyExists
from tsd.storage.base import Storage
from tsd.uid.service import UidService
from tsd.uid.uniqueid import MAXID_ROW

from .hooked_storage import HookedStorage

MakeConfig = Callable[..., Config]
TAGS = (("cpu", "0"), ("host", "web01"))


async def test_built_from_config(storage: Storage, make_config: MakeConfig) -> None:
    config = make_config(auto_create_metrics=True, auto_create_tagvs=False)
    config = dataclasses.replace(
        config,
        storage=dataclasses.replace(config.storage, metric_width=4, tagk_width=2),
        uid=dataclasses.replace(config.uid, cache_max_entries=100, block_size=64),
    )
    uids = UidService(storage, config)
    assert [(u.kind, u.width, u.auto_create) for u in (uids.metrics, uids.tagk, uids.tagv)] == [
        ("metrics", 4, True),
        ("tagk", 2, True),
        ("tagv", 3, False),
    ]
    assert {u.table for u in (uids.metrics, uids.tagk, uids.tagv)} == {config.storage.uid_table}
    assert uids.metrics.cache.max_entries == 100
    assert {u.block_size for u in (uids.metrics, uids.tagk, uids.tagv)} == {64}


async def test_resolve_for_write_assigns_then_serves_from_the_cache(
    storage: Storage, uid_table: str, make_config: MakeConfig
) -> None:
    hooked = HookedStorage(storage)
    uids = UidService(hooked, make_config(auto_create_metrics=True))
    metric_uid, pairs = await uids.resolve_for_write("sys.cpu.user", TAGS)
    assert metric_uid == b"\x00\x00\x01"
    assert pairs == [(b"\x00\x00\x01", b"\x00\x00\x01"), (b"\x00\x00\x02", b"\x00\x00\x02")]

    hooked.calls.clear()
    again = await uids.resolve_for_write("sys.cpu.user", TAGS)
    assert again == (metric_uid, pairs)
    assert hooked.calls == {}
    # all cached: the coroutine finishes on its first step, it never suspends
    coroutine = uids.resolve_for_write("sys.cpu.user", TAGS)
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value == (metric_uid, pairs)
    assert {
        kind: (s.cache_hits, s.cache_misses, s.assignments) for kind, s in uids.stats.items()
    } == {
        "metrics": (2, 1, 1),
        "tagk": (4, 2, 2),
        "tagv": (4, 2, 2),
    }
    assert uids.cache_sizes() == {"metrics": 2, "tagk": 4, "tagv": 4}


async def test_resolve_for_write_refuses_new_metrics_by_default(
    storage: Storage, uid_table: str, make_config: MakeConfig
) -> None:
    uids = UidService(storage, make_config())  # OpenTSDB's default: auto_create_metrics off
    with pytest.raises(NoSuchUniqueName) as caught:
        await uids.resolve_for_write("sys.cpu.user", TAGS)
    assert str(caught.value) == "No such name for 'metrics': 'sys.cpu.user'"
    # the refused point created nothing, not even its tag UIDs
    assert await storage.get(uid_table, MAXID_ROW) is None
    await uids.assign("metric", "sys.cpu.user")
    metric_uid, pairs = await uids.resolve_for_write("sys.cpu.user", TAGS)
    assert metric_uid == b"\x00\x00\x01"
    assert len(pairs) == 2


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        pytest.param("auto_create_tagks", "No such name for 'tagk': 'cpu'", id="tagk"),
        pytest.param("auto_create_tagvs", "No such name for 'tagv': '0'", id="tagv"),
    ],
)
async def test_resolve_for_write_honours_tag_auto_create(
    storage: Storage, make_config: MakeConfig, flag: str, message: str
) -> None:
    uids = UidService(storage, make_config(auto_create_metrics=True, **{flag: False}))
    with pytest.raises(NoSuchUniqueName) as caught:
        await uids.resolve_for_write("m", TAGS)
    assert str(caught.value) == message


async def test_resolve_many_for_write_batches_each_kind_and_refuses_per_series(
    storage: Storage, uid_table: str, make_config: MakeConfig
) -> None:
    hooked = HookedStorage(storage)
    uids = UidService(hooked, make_config())  # new metrics refused
    await uids.assign("metric", "known")
    await uids.assign("metric", "also.known")
    hooked.calls.clear()
    series = [("known", (("host", f"h{i}"), ("dc", "lga"))) for i in range(50)] + [
        ("unknown", (("only.here", "x"),)),
        ("also.known", (("host", "h0"),)),
    ]
    results = await uids.resolve_many_for_write(series)

    refused = results[50]
    assert isinstance(refused, NoSuchUniqueName)
    assert str(refused) == "No such name for 'metrics': 'unknown'"
    # the refused series created no tag UIDs
    assert await uids.tagk.get_or_create_ids(["only.here"]) == {"only.here": b"\x00\x00\x03"}
    host, dc = await uids.tagk.get_id("host"), await uids.tagk.get_id("dc")
    assert (host, dc) == (b"\x00\x00\x01", b"\x00\x00\x02")  # first-appearance order
    # tag values in first-appearance order too: h0, lga, h1, h2, ...
    value_ids = {"h0": 1, "lga": 2} | {f"h{i}": i + 2 for i in range(1, 50)}
    for i in range(50):
        assert results[i] == (
            b"\x00\x00\x01",
            [(host, value_ids[f"h{i}"].to_bytes(3, "big")), (dc, b"\x00\x00\x02")],
        )
    assert results[51] == (b"\x00\x00\x02", [(host, b"\x00\x00\x01")])
    # metrics: one read; tagk and tagv: a read, an increment, two check_and_put_many each
    assert hooked.calls["increment"] == 2 + 1  # + the only.here assignment above
    assert hooked.calls["get_many"] == 3 + 1


async def test_drop_caches_empties_every_kind(storage: Storage, make_config: MakeConfig) -> None:
    uids = UidService(storage, make_config(auto_create_metrics=True))
    await uids.resolve_for_write("m", TAGS)
    uids.drop_caches()
    assert uids.cache_sizes() == {"metrics": 0, "tagk": 0, "tagv": 0}
    assert await uids.resolve_for_write("m", TAGS) == (
        b"\x00\x00\x01",
        [(b"\x00\x00\x01", b"\x00\x00\x01"), (b"\x00\x00\x02", b"\x00\x00\x02")],
    )
    assert uids.stats["metrics"].cache_misses == 2


@pytest.mark.parametrize(
    ("type_name", "kind"),
    [
        pytest.param("metric", "metrics", id="metric"),
        pytest.param("Metrics", "metrics", id="metrics_any_case"),
        pytest.param("tagk", "tagk", id="tagk"),
        pytest.param("TAGV", "tagv", id="tagv"),
    ],
)
def test_by_type_reads_opentsdb_type_words(storage: Storage, type_name: str, kind: str) -> None:
    assert UidService(storage, Config()).by_type(type_name).kind == kind


def test_by_type_refuses_unknown_types(storage: Storage) -> None:
    with pytest.raises(BadRequestError, match="^Invalid type requested: tags$"):
        UidService(storage, Config()).by_type("tags")


async def test_assign_by_type_name(storage: Storage, make_config: MakeConfig) -> None:
    uids = UidService(storage, make_config())
    assert await uids.assign("metric", "sys.cpu.user") == b"\x00\x00\x01"
    assert await uids.assign("tagk", "host") == b"\x00\x00\x01"
    with pytest.raises(UidAlreadyExists, match="^Name already exists with UID: 000001$"):
        await uids.assign("metric", "sys.cpu.user")
    with pytest.raises(BadRequestError, match="^Unknown type name$"):
        await uids.assign("metrics", "x")  # TSDB.assignUid takes the singular only


async def test_rename_by_type_name(storage: Storage, make_config: MakeConfig) -> None:
    uids = UidService(storage, make_config())
    uid = await uids.assign("tagv", "web01")
    await uids.rename("tagv", "web01", "web02")
    assert await uids.tagv.get_id("web02") == uid
    with pytest.raises(BadRequestError) as caught:
        await uids.rename("tagv", "web01", "web03")
    assert str(caught.value) == 'Name("web01") does not exist'
    with pytest.raises(BadRequestError, match="^Unknown type name$"):
        await uids.rename("tags", "web02", "web03")


def test_block_size_key_is_bounded() -> None:
    """tsd.core.uid.block_size: 1..4096 (the most IDs one increment reserves)."""
    assert build_config({"tsd.core.uid.block_size": "1"}).uid.block_size == 1
    assert build_config({}).uid.block_size == 4096
    for bad in ("0", "4097"):
        with pytest.raises(ConfigError, match="tsd.core.uid.block_size: must be between 1 and"):
            build_config({"tsd.core.uid.block_size": bad})


async def test_random_metrics_draw_metric_uids_only(
    storage: Storage, make_config: MakeConfig
) -> None:
    """tsd.core.uid.random_metrics: metric UIDs drawn at random, tag UIDs from the counter;
    refused (a ConfigError, exit status 2 at start) for metric UIDs wider than 7 bytes."""
    config = make_config(auto_create_metrics=True)
    config = dataclasses.replace(config, uid=dataclasses.replace(config.uid, random_metrics=True))
    uids = UidService(storage, config)
    assert [u.random_ids for u in (uids.metrics, uids.tagk, uids.tagv)] == [True, False, False]
    wide = dataclasses.replace(config, storage=dataclasses.replace(config.storage, metric_width=8))
    with pytest.raises(ConfigError, match="random metric UIDs are at most 7 bytes wide, and"):
        UidService(storage, wide)
