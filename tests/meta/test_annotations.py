"""Annotations as OpenTSDB stores them: series notes in the series' (salted) data row under
01+offset, global notes in the unsalted row of metric UID zero; merge rules and ranges."""

from __future__ import annotations

import pytest

from tests.meta.conftest import MakeEnv
from tsd.codec import KeyLayout, row_key_from_tsuid
from tsd.errors import BadRequestError, NotModified
from tsd.meta.annotations import AnnotationUpdate, annotation_json

TSUID = "000001000001000001"
T = 1_369_141_261  # 2013-05-21 13:01:01 UTC: base hour 1369141200, offset 61
BASE = T - T % 3600


def note(start: int, tsuid: str = "", **changes: object) -> AnnotationUpdate:
    return AnnotationUpdate(tsuid, start, changes)


async def cells(env: object, row: bytes) -> dict[bytes, bytes]:
    found = await env.storage.get(env.config.storage.data_table, row)  # type: ignore[attr-defined]
    return {} if found is None else {c.qualifier: c.value for c in found.cells}


@pytest.mark.parametrize(
    "storage_cfg",
    [
        pytest.param({}, id="unsalted"),
        pytest.param({"salt_width": 1, "salt_buckets": 4}, id="salted"),
    ],
)
async def test_notes_are_stored_where_opentsdb_stores_them(
    make_env: MakeEnv, storage_cfg: dict[str, int]
) -> None:
    env = await make_env(storage_cfg=storage_cfg)
    store = env.meta.annotations
    await store.sync(note(T, TSUID, description="Network Outage"), overwrite=False)
    await store.sync(note(T, description="deploy", custom={"b": "2", "a": "1"}), overwrite=False)
    layout = KeyLayout.from_storage_config(env.config.storage)
    qualifier = b"\x01" + (T - BASE).to_bytes(2, "big")
    series_row = row_key_from_tsuid(layout, bytes.fromhex(TSUID), T)
    assert await cells(env, series_row) == {
        qualifier: b'{"tsuid":"000001000001000001","startTime":1369141261,"endTime":0,'
        b'"description":"Network Outage","notes":"","custom":null}'
    }
    global_row = bytes(layout.salt_width + 3) + BASE.to_bytes(4, "big")  # never salted
    assert await cells(env, global_row) == {
        qualifier: b'{"startTime":1369141261,"endTime":0,"description":"deploy","notes":"",'
        b'"custom":{"a":"1","b":"2"}}'
    }


async def test_ms_start_times_use_a_4_byte_offset(make_env: MakeEnv) -> None:
    env = await make_env()
    start_ms = T * 1000 + 250
    await env.meta.annotations.sync(note(start_ms, description="ms"), overwrite=False)
    row = bytes(3) + BASE.to_bytes(4, "big")
    qualifier = b"\x01" + ((T - BASE) * 1000 + 250).to_bytes(4, "big")
    assert list(await cells(env, row)) == [qualifier]
    got = await env.meta.annotations.get("", start_ms)
    assert got is not None
    assert got.start_time == start_ms


async def test_post_merges_put_replaces_and_nothing_set_is_not_modified(
    make_env: MakeEnv,
) -> None:
    store = (await make_env()).meta.annotations
    await store.sync(note(T, TSUID, description="first", notes="n1"), overwrite=False)
    merged = await store.sync(note(T, TSUID, notes="n2"), overwrite=False)
    assert (merged.description, merged.notes) == ("first", "n2")
    replaced = await store.sync(note(T, TSUID, notes="n3"), overwrite=True)
    assert (replaced.description, replaced.notes) == ("", "n3")
    with pytest.raises(NotModified):
        await store.sync(note(T, TSUID), overwrite=False)
    with pytest.raises(BadRequestError, match="start timestamp"):
        await store.sync(note(0, TSUID, notes="x"), overwrite=False)


async def test_http_form_leaves_custom_out_when_null() -> None:
    raw = b'{"startTime":5,"endTime":0,"description":"d","notes":"","custom":null}'
    assert annotation_json(raw) == {
        "tsuid": "",
        "description": "d",
        "notes": "",
        "endTime": 0,
        "startTime": 5,
    }
    assert annotation_json(b"not json") is None


async def test_global_range_keeps_notes_inside_start_and_end(make_env: MakeEnv) -> None:
    store = (await make_env()).meta.annotations
    for start, end in ((T - 7200, 0), (T, 0), (T + 10, T + 20), (T + 30, T + 99999)):
        await store.sync(note(start, description=str(start), end_time=end), overwrite=False)
    await store.sync(note(T + 5, TSUID, description="series"), overwrite=False)
    found = await store.global_in_range(T - 1, T + 3600)
    assert [n.description for n in found] == [str(T), str(T + 10)]


async def test_delete_range_deletes_only_the_asked_notes(make_env: MakeEnv) -> None:
    env = await make_env(storage_cfg={"salt_width": 1, "salt_buckets": 4})
    store = env.meta.annotations
    other = "000001000001000002"
    for start in (T, T + 3600, T + 7200):
        await store.sync(note(start, TSUID, description="a"), overwrite=False)
        await store.sync(note(start, other, description="b"), overwrite=False)
        await store.sync(note(start, description="g"), overwrite=False)
    deleted = await store.delete_range(bytes.fromhex(TSUID), T * 1000, (T + 3600) * 1000)
    assert deleted == 2
    assert await store.get(TSUID, T) is None
    assert await store.get(TSUID, T + 7200) is not None
    assert await store.get(other, T) is not None
    assert await store.delete_range(None, 0, (T + 7200) * 1000) == 3
    assert await store.get("", T + 7200) is None
