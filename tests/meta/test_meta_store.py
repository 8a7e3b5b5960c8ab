"""UIDMeta and TSMeta: stored bytes, HTTP shapes and OpenTSDB's update rules, on every
backend."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from tests.meta.conftest import NOW_S, MakeEnv
from tests.uid.hooked_storage import HookedStorage
from tsd.errors import BadRequestError, NoSuchUniqueId, NotModified
from tsd.meta.binding import loads
from tsd.meta.tsmeta import (
    TsMeta,
    parse_stored_tsmeta,
    tsmeta_update_from_json,
    tsuid_pairs_regex,
)
from tsd.meta.uidmeta import UidMetaUpdate, update_from_json
from tsd.storage.base import Put, Storage

TSUID = bytes.fromhex("000001000001000001")


async def uid_cell(env: Any, uid: bytes, qualifier: bytes) -> bytes | None:
    row = await env.storage.get(env.config.storage.uid_table, uid)
    return None if row is None else row.value("name", qualifier)


async def test_uidmeta_of_a_uid_without_meta_is_a_default(make_env: MakeEnv) -> None:
    env = await make_env()
    await env.uids.metrics.assign("sys.cpu.0")
    meta = await env.meta.uid_metas.get("metrics", "000001")
    assert meta.to_json() == {
        "uid": "000001",
        "type": "METRIC",
        "name": "sys.cpu.0",
        "description": "",
        "notes": "",
        "created": 0,
        "custom": None,
        "displayName": "",
    }
    with pytest.raises(NoSuchUniqueId):
        await env.meta.uid_metas.get("metric", "000002")
    with pytest.raises(BadRequestError, match="Invalid type requested: host"):
        await env.meta.uid_metas.get("host", "000001")


async def test_uidmeta_post_merges_put_replaces(make_env: MakeEnv) -> None:
    env = await make_env()
    await env.uids.tagk.assign("host")
    store = env.meta.uid_metas
    first = update_from_json(
        {
            "uid": "000001",
            "type": "tagk",
            "description": "the host",
            "created": 20,
            "custom": {"owner": "ops", "team": "db"},
        }  # fmt: skip
    )
    await store.sync(first, overwrite=False)
    assert await uid_cell(env, b"\x00\x00\x01", b"tagk_meta") == (
        b'{"type":"TAGK","displayName":"","description":"the host","notes":"","created":20,'
        b'"custom":{"owner":"ops","team":"db"}}'
    )
    merged = await store.sync(
        UidMetaUpdate("000001", "TAGK", {"notes": "n", "created": 30}), overwrite=False
    )
    # POST keeps what it did not set; created keeps the earliest time.
    assert (merged.description, merged.notes, merged.created) == ("the host", "n", 20)
    replaced = await store.sync(UidMetaUpdate("000001", "tagk", {"notes": "m"}), overwrite=True)
    assert (replaced.description, replaced.notes, replaced.custom) == ("", "m", None)
    with pytest.raises(NotModified):
        await store.sync(UidMetaUpdate("000001", "tagk", {}), overwrite=False)
    with pytest.raises(NoSuchUniqueId):
        await store.sync(UidMetaUpdate("00000F", "tagk", {"notes": "x"}), overwrite=False)
    await store.delete("tagk", "000001")
    assert await uid_cell(env, b"\x00\x00\x01", b"tagk_meta") is None


async def test_uidmeta_update_lost_to_another_writer_is_a_500(
    make_env: MakeEnv, storage: Storage
) -> None:
    hooked = HookedStorage(storage)
    env = await make_env(store=hooked)
    await env.uids.metrics.assign("sys.cpu.0")
    table = env.config.storage.uid_table

    async def sneak_in(*args: Any) -> None:
        del hooked.hooks["check_and_put"]
        await storage.put(table, [Put(b"\x00\x00\x01", "name", b"metric_meta", b"{}")])

    hooked.hooks["check_and_put"] = sneak_in
    with pytest.raises(BadRequestError) as caught:
        await env.meta.uid_metas.sync(
            UidMetaUpdate("000001", "metric", {"notes": "x"}), overwrite=False
        )
    assert (caught.value.status, caught.value.message) == (
        500,
        "Failed to save the UIDMeta to storage",
    )


async def test_tsmeta_create_update_and_http_shape(make_env: MakeEnv) -> None:
    env = await make_env(meta_enable_tsuid_tracking=True)
    await env.write("sys.cpu.user", NOW_S, 1, host="web01")
    store = env.meta.tsmetas
    assert await store.get(TSUID) is None  # a counter alone is no TSMeta
    created = await store.create(TSUID, {"description": "cpu", "max": 100.0})
    row = await env.storage.get(env.config.storage.meta_table, TSUID)
    assert row is not None
    assert row.value("name", b"ts_meta") == (
        b'{"tsuid":"000001000001000001","displayName":"","description":"cpu","notes":"",'
        b'"created":0,"custom":null,"units":"","dataType":"","retention":0,"max":100.0,'
        b'"min":"NaN"}'
    )
    body = orjson.loads(orjson.dumps(created.to_json()))
    assert list(body) == [
        "tsuid", "metric", "tags", "description", "notes", "created", "units", "retention",
        "max", "min", "displayName", "dataType", "lastReceived", "totalDatapoints",
    ]  # fmt: skip
    assert (body["max"], body["min"], body["totalDatapoints"]) == (100.0, "NaN", 1)
    assert [t["name"] for t in body["tags"]] == ["host", "web01"]
    assert body["metric"]["name"] == "sys.cpu.user"
    update = tsmeta_update_from_json({"tsuid": "000001000001000001", "units": "%"})
    merged = await store.sync(TSUID, update.changes, overwrite=False)
    assert (merged.description, merged.units, merged.max) == ("cpu", "%", 100.0)
    replaced = await store.sync(TSUID, {"notes": "n"}, overwrite=True)
    assert (replaced.description, replaced.units, math.isnan(replaced.max)) == ("", "", True)
    with pytest.raises(NotModified):
        await store.sync(TSUID, {}, overwrite=False)
    await store.delete(TSUID)
    assert await store.get(TSUID) is None


async def test_tsmeta_update_of_a_missing_tsmeta_is_refused(make_env: MakeEnv) -> None:
    env = await make_env()
    await env.write("sys.cpu.user", NOW_S, 1, host="web01")
    with pytest.raises(BadRequestError, match="Requested TSMeta did not exist"):
        await env.meta.tsmetas.sync(TSUID, {"notes": "x"}, overwrite=False)


async def test_tsmeta_list_matches_series_holding_the_pairs(make_env: MakeEnv) -> None:
    env = await make_env(meta_enable_tsuid_tracking=True, meta_enable_realtime_ts=True)
    await env.write("sys.cpu.user", NOW_S, 1, host="web01", dc="lga")
    await env.write("sys.cpu.user", NOW_S, 1, host="web02", dc="lga")
    await env.write("sys.cpu.user", NOW_S, 1, host="web01")
    metric = await env.uids.metrics.get_id("sys.cpu.user")
    host = await env.uids.tagk.get_id("host")
    web01 = await env.uids.tagv.get_id("web01")
    everything = await env.meta.tsmetas.list_matching(metric, None)
    web01_only = await env.meta.tsmetas.list_matching(
        metric, tsuid_pairs_regex(env.meta.layout, [(host, web01)])
    )
    assert len(everything) == 3
    # TSUID order: dc got tagk UID 1 (tags are resolved sorted), so the dc series is first.
    assert [[t.name for t in m.tags or []] for m in web01_only] == [
        ["dc", "lga", "host", "web01"],
        ["host", "web01"],
    ]
    assert all(m.created == NOW_S for m in everything)


def test_stored_nan_and_numbers_read_back() -> None:
    meta = TsMeta(tsuid="01", max=1.5)
    again = parse_stored_tsmeta(meta.storage_json(), "01")
    assert again.max == 1.5
    assert math.isnan(again.min)
    assert orjson.loads(meta.storage_json())["min"] == "NaN"


@pytest.mark.parametrize(
    ("value", "java_text"),
    [
        pytest.param(1e-4, b"1.0E-4", id="below_1e-3_is_scientific"),
        pytest.param(-0.0, b"-0.0", id="negative_zero_keeps_its_sign"),
    ],
)
async def test_tsmeta_doubles_are_written_as_java_does(
    make_env: MakeEnv, value: float, java_text: bytes
) -> None:
    """Jackson writes TSMeta's max/min with Double.toString, stored and over HTTP."""
    env = await make_env(meta_enable_tsuid_tracking=True)
    await env.write("sys.cpu.user", NOW_S, 1, host="web01")
    created = await env.meta.tsmetas.create(TSUID, {"max": value, "min": value})
    row = await env.storage.get(env.config.storage.meta_table, TSUID)
    assert row is not None
    stored = row.value("name", b"ts_meta")
    assert stored is not None
    assert b'"max":' + java_text + b',"min":' + java_text + b"}" in stored
    http = orjson.dumps(created.to_json())
    assert b'"max":' + java_text + b',"min":' + java_text + b',"displayName"' in http


def test_uidmeta_text_bound_from_a_number_is_the_clients_text() -> None:
    """Jackson's StringDeserializer keeps a number token's source text."""
    body = b'{"uid":"000001","type":"metric","description":1e-4,"notes":-0.0,"custom":{"a":2.50}}'
    update = update_from_json(loads(body))
    assert update.changes["description"] == "1e-4"
    assert update.changes["notes"] == "-0.0"
    assert update.changes["custom"] == {"a": "2.50"}
