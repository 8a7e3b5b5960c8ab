"""/api/query/exp over real HTTP on a running daemon: the wire form and the error bodies."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from tests.server.test_http_api import dp, post, url
from tsd.daemon import Daemon


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_exp_answers_outputs_and_echoes_the_query(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    now = int(time.time()) // 60 * 60 - 600
    points = [dp("x.m", now + 60 * i, i + 1, host="h") for i in range(3)]
    assert (await post(http, tsd, "/api/put?sync", orjson.dumps(points)))[0] == 204
    body = {
        "time": {"start": str(now), "end": str(now + 120), "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "x.m", "fillPolicy": {"policy": "nan"}}],
        "expressions": [{"id": "e", "expr": "a * 2 + 0.5"}],
        "outputs": [{"id": "e", "alias": "twice"}],
    }
    status, headers, raw = await post(http, tsd, "/api/query/exp", orjson.dumps(body))
    assert status == 200, raw
    assert headers["Content-Type"] == "application/json; charset=UTF-8"
    assert raw.startswith(
        b'{"outputs":[{"id":"e","alias":"twice","dps":[[%d,2.5],[%d,4.5],[%d,6.5]],'
        % (now * 1000, now * 1000 + 60000, now * 1000 + 120000)
    )
    answer = orjson.loads(raw)
    assert answer["outputs"][0]["dpsMeta"] == {
        "firstTimestamp": now * 1000,
        "lastTimestamp": now * 1000 + 120000,
        "setCount": 3,
        "series": 1,
    }
    assert answer["outputs"][0]["meta"] == [
        {"index": 0, "metrics": ["timestamp"]},
        {"index": 1, "metrics": ["x.m"], "commonTags": {"host": "h"}, "aggregatedTags": []},
    ]
    assert answer["query"]["metrics"][0]["fillPolicy"] == {"policy": "nan", "value": "NaN"}
    assert answer["query"]["expressions"][0]["join"] == {
        "operator": "union",
        "useQueryTags": False,
        "includeAggTags": True,
    }


@pytest.mark.parametrize(
    ("method", "body", "status", "message"),
    [
        ("GET", b"", 500, "Incoming data was null or empty"),
        ("POST", b"{not json", 500, "com.fasterxml.jackson.core.JsonParseException: "),
        (
            "POST",
            b'{"time":{"start":"1h-ago","aggregator":"sum"}}',
            500,
            "missing or empty metrics",
        ),
        (
            "POST",
            b'{"time":{"start":"1h-ago","aggregator":"sum"},"metrics":[{"id":"a","metric":"nx"}]}',
            400,
            "No such name for 'metrics': 'nx'",
        ),
    ],
)
async def test_exp_errors_carry_opentsdb_status_and_message(
    tsd: Daemon,
    http: aiohttp.ClientSession,
    method: str,
    body: bytes,
    status: int,
    message: str,
) -> None:
    async with http.request(method, url(tsd, "/api/query/exp"), data=body) as response:
        assert response.status == status
        error = orjson.loads(await response.read())["error"]
    assert error["code"] == status
    assert error["message"].startswith(message)


async def test_gexp_answers_in_the_query_format(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    now = int(time.time()) // 60 * 60 - 600
    points = [dp("g.m", now + 60 * i, i - 1, host=h) for i in range(3) for h in ("a", "b")]
    assert (await post(http, tsd, "/api/put?sync", orjson.dumps(points)))[0] == 204
    path = f"/api/query/gexp?start={now}&end={now + 120}&exp=alias(scale(sum:g.m,-2),twice)"
    async with http.get(url(tsd, path)) as response:
        assert response.status == 200
        raw = await response.read()
    assert raw == (
        b'[{"metric":"twice","tags":{},"aggregateTags":[],"dps":{"%d":4,"%d":0,"%d":4}}]'
        % (now, now + 60, now + 120)
    )
    body = orjson.dumps({"start": now, "queries": [{"metric": "g.m", "aggregator": "sum"}]})
    status, _, raw = await post(http, tsd, "/api/query/gexp", body)
    assert status == 400
    assert b"expressions" in raw  # 2.4.1 reads a POST without expressions and fails
