"""/api/uid/assign and /api/annotation/bulk with many names and notes (issue 25's held-out
cases: 20,000 names took 35 s, 20,000 annotations 134 s): OpenTSDB's answers, in batches.

The two timed tests check the issue's acceptance bounds (20,000 names under 5 s, 20,000
notes under 10 s) and are marked slow."""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tsd.daemon import Daemon
from tsd.server.http.uid import MAX_ASSIGN_NAMES

T = 1356998400


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield session


async def post(
    http: aiohttp.ClientSession, daemon: Daemon, path: str, document: object
) -> tuple[int, Any]:
    body = io.BytesIO(orjson.dumps(document))  # aiohttp warns of large bytes bodies
    headers = {"Content-Type": "application/json"}
    async with http.post(
        f"http://127.0.0.1:{daemon.port}{path}", data=body, headers=headers
    ) as reply:
        return reply.status, orjson.loads(await reply.read())


def uid_hex(number: int) -> str:
    return f"{number:06X}"


@pytest.mark.each_backend
async def test_assign_many_names_in_order_with_per_name_errors(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    names = [f"bulk.m{i:05d}" for i in range(5000)]
    status, body = await post(http, tsd, "/api/uid/assign", {"metric": names, "tagk": ["k"]})
    assert status == 200
    # UIDs in request order (the batches keep it), as OpenTSDB assigns one after another
    assert body["metric"] == {name: uid_hex(i + 1) for i, name in enumerate(names)}
    assert body["tagk"] == {"k": "000001"}
    # Again, with new names among them, a bad one and a repeat: each refused alone.
    again = [names[0], "bulk.new1", "bad name", names[4999], "bulk.new2", "bulk.new1"]
    status, body = await post(http, tsd, "/api/uid/assign", {"metric": again})
    assert status == 400
    assert body == {
        "metric": {"bulk.new1": uid_hex(5001), "bulk.new2": uid_hex(5002)},
        "metric_errors": {
            "bad name": 'Invalid metric ("bad name"): illegal character:  ',
            names[0]: "Name already exists with UID: 000001",
            names[4999]: f"Name already exists with UID: {uid_hex(5000)}",
            "bulk.new1": f"Name already exists with UID: {uid_hex(5001)}",
        },
    }
    # Every name resolves to what the answer said.
    async with http.get(
        f"http://127.0.0.1:{tsd.port}/api/uid/uidmeta?uid={uid_hex(5000)}&type=metric"
    ) as reply:
        assert orjson.loads(await reply.read())["name"] == names[4999]


async def test_assign_is_bounded(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    tsd = await make_tsd()
    half = MAX_ASSIGN_NAMES // 2 + 1
    document = {
        "metric": [f"m{i}" for i in range(half)],
        "tagv": [f"v{i}" for i in range(half)],
    }
    status, body = await post(http, tsd, "/api/uid/assign", document)
    assert status == 400
    assert body["error"]["message"] == f"Too many names to assign: {2 * half}"
    assert body["error"]["details"] == (
        f"At most {MAX_ASSIGN_NAMES} names per request (metric, tagk and tagv together)"
    )
    # nothing was assigned
    status, body = await post(http, tsd, "/api/uid/assign", {"metric": ["m0"]})
    assert (status, body) == (200, {"metric": {"m0": "000001"}})


@pytest.mark.each_backend
async def test_annotation_bulk_many_notes_and_a_repeat(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    tsuid = "000001000001000001"
    notes = [{"tsuid": tsuid, "startTime": T + i, "description": f"n{i}"} for i in range(3000)]
    notes += [{"startTime": T + i, "description": f"g{i}"} for i in range(2000)]
    # the same note again later in the body: merged over the first (POST keeps fields)
    notes.append({"tsuid": tsuid, "startTime": T, "notes": "second"})
    notes.append({"tsuid": tsuid, "startTime": T + 1})  # sets nothing: left out
    status, body = await post(http, tsd, "/api/annotation/bulk", notes)
    assert status == 200
    assert len(body) == 5001
    assert [n["description"] for n in body[:3]] == ["n0", "n1", "n2"]
    assert (body[-1]["description"], body[-1]["notes"]) == ("n0", "second")
    async with http.get(
        f"http://127.0.0.1:{tsd.port}/api/annotations?start_time={T}&end_time={T + 5000}"
    ) as reply:
        assert len(orjson.loads(await reply.read())) == 2000
    async with http.get(
        f"http://127.0.0.1:{tsd.port}/api/annotation?tsuid={tsuid}&start_time={T + 2999}"
    ) as reply:
        assert orjson.loads(await reply.read())["description"] == "n2999"
    async with http.get(
        f"http://127.0.0.1:{tsd.port}/api/annotation?tsuid={tsuid}&start_time={T}"
    ) as reply:
        assert orjson.loads(await reply.read())["notes"] == "second"


@pytest.mark.slow
async def test_20000_names_assigned_in_under_5_s(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    tsd = await make_tsd()
    names = [f"many.names.{i:05d}" for i in range(20_000)]
    t0 = time.perf_counter()
    status, body = await post(http, tsd, "/api/uid/assign", {"metric": names})
    elapsed = time.perf_counter() - t0
    assert status == 200
    assert len(body["metric"]) == 20_000
    assert elapsed < 5.0, f"{elapsed:.1f} s"  # issue 25's acceptance bound (was 35 s)


@pytest.mark.slow
async def test_20000_annotations_saved_in_under_10_s(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    tsd = await make_tsd()
    notes = [
        {"tsuid": f"0000010000010{i % 100:05X}", "startTime": T + i, "description": f"n{i}"}
        for i in range(20_000)
    ]
    t0 = time.perf_counter()
    status, body = await post(http, tsd, "/api/annotation/bulk", notes)
    elapsed = time.perf_counter() - t0
    assert status == 200
    assert len(body) == 20_000
    assert elapsed < 10.0, f"{elapsed:.1f} s"  # issue 25's acceptance bound (was 134 s)
