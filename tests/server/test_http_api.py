"""HTTP over real sockets: /api/put as clients send it, the small endpoints, the routing."""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import stored
from tests.write.readback import StoredPoint
from tsd.daemon import Daemon
from tsd.data_points import make_tags
from tsd.server.http.put import PUT_REFS

T = 1_795_237_078
JSON = "application/json; charset=UTF-8"


def dp(metric: str, ts: int, value: Any, **tags: str) -> dict[str, Any]:
    return {"metric": metric, "timestamp": ts, "value": value, "tags": tags}


def sp(metric: str, ts_ms: int, value: int | float, **tags: str) -> StoredPoint:
    return StoredPoint(metric, make_tags(tags), ts_ms, value)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=True) as session:
        yield session


def url(daemon: Daemon, path: str) -> str:
    return f"http://127.0.0.1:{daemon.port}{path}"


async def post(
    http: aiohttp.ClientSession, daemon: Daemon, path: str, body: bytes, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    async with http.post(url(daemon, path), data=body, headers=headers) as response:
        return response.status, dict(response.headers), await response.read()


# -- /api/put ---------------------------------------------------------------------------------


@pytest.mark.each_backend
async def test_put_one_object_answers_204_and_stores(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    body = orjson.dumps(dp("sys.cpu.nice", 1346846400, 18, host="web01", dc="lga"))
    status, headers, reply = await post(http, tsd, "/api/put", body)
    assert (status, reply) == (204, b"")
    assert headers["Content-Type"] == JSON
    assert await stored(tsd) == [sp("sys.cpu.nice", 1346846400_000, 18, dc="lga", host="web01")]


@pytest.mark.each_backend
async def test_opentsdb_py_gzip_no_content_type_details(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    """opentsdb-py: gzip, no Content-Type, ?details=true, reads the JSON whatever the status."""
    points = [dp("py.metric", T, 17, host="vm"), dp("py.metric", T + 1, "17", host="vm")]
    body = gzip.compress(orjson.dumps(points))
    async with http.post(
        url(tsd, "/api/put?details=true"),
        data=body,
        headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip, deflate"},
        skip_auto_headers=["Content-Type"],
    ) as response:
        assert response.status == 200
        assert orjson.loads(await response.read()) == {"success": 2, "failed": 0, "errors": []}
    assert await stored(tsd) == [
        sp("py.metric", T * 1000, 17, host="vm"),
        sp("py.metric", (T + 1) * 1000, 17, host="vm"),
    ]


@pytest.mark.each_backend
async def test_scollector_gzip_expects_exactly_204(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    points = [dp("os.cpu", T + i, i * 0.5, host="ny-web01") for i in range(500)]
    status, _, reply = await post(
        http,
        tsd,
        "/api/put",
        gzip.compress(orjson.dumps(points)),
        **{"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert (status, reply) == (204, b"")
    assert len(await stored(tsd)) == 500


async def test_deflate_body(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    body = zlib.compress(orjson.dumps([dp("z.m", T, 1, h="a")]))
    status, _, _ = await post(http, tsd, "/api/put", body, **{"Content-Encoding": "deflate"})
    assert status == 204
    assert await stored(tsd) == [sp("z.m", T * 1000, 1, h="a")]


@pytest.mark.slow
async def test_large_chunked_body_is_accepted(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    """OpenTSDB refuses anything over ~8 KiB ("Chunked request not supported")."""
    points = [dp("big.m", T + i, i, host=f"h{i % 10}") for i in range(20_000)]
    body = orjson.dumps(points)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    async with http.post(url(tsd, "/api/put"), data=chunks()) as response:
        assert response.status == 204
    assert len(await stored(tsd)) == 20_000


async def test_body_over_the_limit_is_413(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    daemon = await make_tsd(**{"tsd.http.request.max_body": "1000"})
    body = orjson.dumps([dp("m", T + i, i, h="a") for i in range(100)])
    status, headers, reply = await post(http, daemon, "/api/put", body)
    assert status == 413
    assert orjson.loads(reply)["error"]["code"] == 413
    assert headers["Content-Type"] == JSON


async def test_bad_point_without_details_is_the_generic_400(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    body = orjson.dumps([dp("ok", T, 1, h="a"), dp("bad", T, "x", h="a")])
    status, _, reply = await post(http, tsd, "/api/put", body)
    assert status == 400
    assert orjson.loads(reply) == {
        "error": {
            "code": 400,
            "message": "One or more data points had errors",
            "details": 'Please see the TSD logs or append "details" to the put request',
        }
    }
    assert await stored(tsd) == [sp("ok", T * 1000, 1, h="a")]


async def test_bad_point_with_details_lists_it(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    body = b'[{"metric":"sys.cpu","timestamp":1,"value":"x","tags":{"host":"a"}},' + (
        b'{"metric":"sys.cpu","timestamp":2,"value":1,"tags":{"host":"a"}}]'
    )
    status, _, reply = await post(http, tsd, "/api/put?details", body)
    assert status == 400
    assert orjson.loads(reply) == {
        "success": 1,
        "failed": 1,
        "errors": [
            {
                "datapoint": {
                    "metric": "sys.cpu",
                    "timestamp": 1,
                    "value": "x",
                    "tags": {"host": "a"},
                },
                "error": "Unable to parse value to a number",
            }
        ],
    }


async def test_summary_without_errors_is_200(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    status, _, reply = await post(http, tsd, "/api/put?summary", orjson.dumps(dp("s", T, 1, h="a")))
    assert (status, orjson.loads(reply)) == (200, {"success": 1, "failed": 0})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"", "Missing request content", id="empty"),
        pytest.param(b"hello", "The JSON must start as an object or an array", id="not_json"),
        pytest.param(b"[]", "No datapoints found in content", id="empty_array"),
        pytest.param(b'[{"metric":', "Unable to parse the given JSON", id="truncated"),
    ],
)
async def test_bad_bodies(
    tsd: Daemon, http: aiohttp.ClientSession, body: bytes, message: str
) -> None:
    status, _, reply = await post(http, tsd, "/api/put", body)
    assert status == 400
    assert orjson.loads(reply)["error"]["message"] == message


async def test_malformed_gzip_is_a_400(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    status, _, reply = await post(
        http, tsd, "/api/put", b"not gzip at all", **{"Content-Encoding": "gzip"}
    )
    assert status == 400
    # the server lives on
    status, _, _ = await post(http, tsd, "/api/put", orjson.dumps(dp("after", T, 1, h="a")))
    assert status == 204


async def test_unknown_metric_without_auto_create(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    daemon = await make_tsd(**{"tsd.core.auto_create_metrics": "false"})
    status, _, reply = await post(
        http, daemon, "/api/put?details", orjson.dumps(dp("no.such", T, 1, h="a"))
    )
    assert status == 400
    assert orjson.loads(reply)["errors"][0]["error"] == "Unknown metric"


async def test_sync_replies_once_stored(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    daemon = await make_tsd(**{"tsd.storage.flush_interval": "3600000"})  # only sync flushes
    status, _, reply = await post(
        http, daemon, "/api/put?sync&summary", orjson.dumps([dp("y", T, 1, h="a")])
    )
    assert (status, orjson.loads(reply)) == (200, {"success": 1, "failed": 0})
    # Visible to a query at once, without flushing the writer first (on the embedded
    # store the point is in the head until its hour is closed).
    async with http.get(url(daemon, f"/api/query?start={T}&m=sum:y")) as response:
        assert orjson.loads(await response.read())[0]["dps"] == {str(T): 1}


async def test_put_by_get_is_405(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/put")) as response:
        assert response.status == 405
        assert orjson.loads(await response.read()) == {
            "error": {
                "code": 405,
                "message": "Method not allowed",
                "details": "The HTTP method [GET] is not permitted for this endpoint",
            }
        }


# -- routing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param("/api/v1/put", 204, id="v1_prefix"),
        pytest.param("/API/Put", 204, id="case_insensitive"),
        pytest.param("/api/put/", 204, id="trailing_slash"),
        pytest.param("/api/v2/put", 501, id="version_too_high"),
        pytest.param("/api/nope", 404, id="unknown"),
        pytest.param("/api", 404, id="bare_api"),
        pytest.param("/nope", 404, id="unknown_ui_path"),
    ],
)
async def test_routing(tsd: Daemon, http: aiohttp.ClientSession, path: str, status: int) -> None:
    got, headers, reply = await post(http, tsd, path, orjson.dumps(dp("r", T, 1, h="a")))
    assert got == status
    if status == 404:
        assert orjson.loads(reply) == {"error": {"code": 404, "message": "Endpoint not found"}}
    if status >= 400:
        assert headers["Content-Type"] == JSON


async def test_write_only_and_read_only_modes(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    ro = await make_tsd(**{"tsd.mode": "ro"})
    status, _, _ = await post(http, ro, "/api/put", orjson.dumps(dp("m", T, 1, h="a")))
    assert status == 404
    wo = await make_tsd(**{"tsd.mode": "wo"})
    status, _, _ = await post(http, wo, "/api/put", orjson.dumps(dp("m", T, 1, h="a")))
    assert status == 204
    async with http.get(url(wo, "/api/query?start=1h-ago&m=sum:m")) as response:
        assert response.status == 404


# -- /api/uid/assign --------------------------------------------------------------------------


async def test_uid_assign_by_get_then_again(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/uid/assign?metric=sys.cpu.0,sys.cpu.1&tagv=web01")) as r:
        assert r.status == 200
        assert orjson.loads(await r.read()) == {
            "metric": {"sys.cpu.0": "000001", "sys.cpu.1": "000002"},
            "tagv": {"web01": "000001"},
        }
    body = orjson.dumps({"metric": ["sys.cpu.0", "sys.cpu.2", "bad name"]})
    status, _, reply = await post(http, tsd, "/api/uid/assign", body)
    assert status == 400
    assert orjson.loads(reply) == {
        "metric": {"sys.cpu.2": "000003"},
        "metric_errors": {
            "bad name": 'Invalid metric ("bad name"): illegal character:  ',
            "sys.cpu.0": "Name already exists with UID: 000001",
        },
    }


async def test_uid_assign_needs_values(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/uid/assign")) as r:
        assert r.status == 400
        assert orjson.loads(await r.read())["error"]["message"] == "Missing values to assign UIDs"


async def test_other_uid_endpoints_are_501(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/uid/treemeta?uid=000001&type=metric")) as r:
        assert r.status == 501


# -- small endpoints --------------------------------------------------------------------------


async def test_version(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/version")) as r:
        info = orjson.loads(await r.read())
        assert r.status == 200
    assert set(info) == {
        "version",
        "short_revision",
        "full_revision",
        "timestamp",
        "repo_status",
        "user",
        "host",
        "repo",
        "branch",
    }
    assert all(isinstance(v, str) for v in info.values())
    async with http.get(url(tsd, "/version")) as r:
        text = await r.text()
    assert text.startswith("tsd ")
    assert len(text.splitlines()) == 2


async def test_stats_in_opentsdb_shape(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    await post(http, tsd, "/api/put", orjson.dumps(dp("m", T, 1, h="a")))
    async with http.get(url(tsd, "/api/stats")) as r:
        records = orjson.loads(await r.read())
    added = [x for x in records if x["metric"] == "tsd.datapoints.added"]
    assert added == [
        {
            "metric": "tsd.datapoints.added",
            "timestamp": added[0]["timestamp"],
            "value": "1",
            "tags": {"host": added[0]["tags"]["host"], "type": "all"},
        }
    ]
    assert {"tsd.rpc.received", "tsd.connectionmgr.connections", "tsd.uid.cache-hit"} <= {
        x["metric"] for x in records
    }


async def test_dropcaches(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/dropcaches")) as r:
        assert orjson.loads(await r.read()) == {"status": "200", "message": "Caches dropped"}
    status, _, _ = await post(http, tsd, "/api/dropcaches", b"")
    assert status == 405


async def test_aggregators_lists_all_35(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/aggregators")) as r:
        names = orjson.loads(await r.read())
    assert len(names) == 35
    assert {"sum", "zimsum", "mimmax", "p999", "ep50r7", "squareSum", "none"} <= set(names)


async def test_config_shows_effective_values(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.get(url(tsd, "/api/config")) as r:
        config = orjson.loads(await r.read())
    assert config["tsd.core.auto_create_metrics"] == "true"
    assert config["tsd.storage.flush_interval"] == "1000"
    assert list(config) == sorted(config)


# -- CORS -------------------------------------------------------------------------------------


async def test_options_without_cors_is_405(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.options(url(tsd, "/api/put")) as r:
        assert r.status == 405


async def test_cors_allowed_origin_gets_the_headers(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    daemon = await make_tsd(**{"tsd.http.request.cors_domains": "grafana.example, other.example"})
    origin = {"Origin": "http://grafana.example"}
    async with http.options(url(daemon, "/api/query"), headers={"Origin": "grafana.example"}) as r:
        assert r.status == 200
        assert r.headers["Access-Control-Allow-Origin"] == "grafana.example"
        assert r.headers["Access-Control-Allow-Methods"] == "GET, POST, PUT, DELETE"
    async with http.get(url(daemon, "/api/version"), headers=origin) as r:
        assert r.status == 200  # OpenTSDB: not an allowed origin, still 200, refused in the body
        assert orjson.loads(await r.read())["error"]["message"] == "CORS domain not allowed"
        assert "Access-Control-Allow-Origin" not in r.headers
    async with http.get(url(daemon, "/api/version"), headers={"Origin": "OTHER.example"}) as r:
        assert r.status == 200
        assert r.headers["Access-Control-Allow-Origin"] == "OTHER.example"
        assert "version" in orjson.loads(await r.read())


# -- more client replays ----------------------------------------------------------------------


@pytest.mark.each_backend
async def test_telegraf_http_gzip_go_encoder_body(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    """Telegraf: gzip of '[' + json.Encoder objects (each ending in a newline) + ',' + ']'."""
    objects = [
        b'{"metric":"mem_used","timestamp":%d,"value":0.5,"tags":{"host":"vm"}}' % T,
        b'{"metric":"big","timestamp":%d,"value":1e+21,"tags":{"host":"vm"}}' % T,
        b'{"metric":"cnt","timestamp":%d,"value":42,"tags":{"host":"vm"}}' % T,
    ]
    body = b"[" + b",".join(o + b"\n" for o in objects) + b"]"
    status, _, _ = await post(
        http,
        tsd,
        "/api/put",
        gzip.compress(body),
        **{"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert status == 204
    assert await stored(tsd) == [
        sp("big", T * 1000, 1e21, host="vm"),
        sp("cnt", T * 1000, 42, host="vm"),
        sp("mem_used", T * 1000, 0.5, host="vm"),
    ]


async def test_tcollector_http_floats_and_connection_close(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    """tcollector --http: plain JSON, Connection: close, every value a float (42 -> 42.0)."""
    points = [
        dp("test.const", 1795236834, 42.0, dev="sda", host="vm"),
        dp("test.ms", 1795236834123, 0.0, host="vm"),
    ]
    status, _, _ = await post(
        http,
        tsd,
        "/api/put",
        orjson.dumps(points),
        **{"Content-Type": "application/json", "Connection": "close"},
    )
    assert status == 204
    assert await stored(tsd) == [
        sp("test.const", 1795236834_000, 42.0, dev="sda", host="vm"),
        sp("test.ms", 1795236834123, 0.0, host="vm"),
    ]


async def test_prometheus_adapter_gets_204_or_a_summary(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    """remote_storage_adapter: success only on exactly 204; otherwise it parses
    {"success": n, "failed": m}, which OpenTSDB gives only with summary/details."""
    good = [dp("prom_up", T, 1.0, instance="a_.9090", job="node")]
    status, _, reply = await post(http, tsd, "/api/put", orjson.dumps(good))
    assert (status, reply) == (204, b"")
    bad = [*good, dp("prom up", T, 1.0, job="node")]
    status, _, reply = await post(http, tsd, "/api/put?summary", orjson.dumps(bad))
    assert (status, orjson.loads(reply)) == (400, {"success": 1, "failed": 1})


async def test_known_series_answer_and_store_as_new_ones(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    """The second body goes through the known-series path: same reply, same cells, bad
    points in the middle still reported in body order."""

    def body(ts: int) -> bytes:
        return orjson.dumps(
            [
                dp("known.a", ts, 1, host="web01", dc="lga"),
                dp("known.a", ts, "x", host="web01", dc="lga"),
                dp("known.a", ts + 1, 2.5, dc="lga", host="web01"),  # same series, tags reordered
                dp("known.b", ts, -(2**40), host="web02"),
                dp("known.b", ts, 7, host="bad value!"),
                dp("known.c", ts * 1000 + 5, 3, host="web01"),
            ]
        )

    replies = []
    for ts in (T, T + 3600):
        status, _, reply = await post(http, tsd, "/api/put?details", body(ts))
        replies.append((status, orjson.loads(reply)))
    for ts, (status, reply) in zip((T, T + 3600), replies, strict=True):
        assert status == 400
        assert reply["success"] == 4
        assert [e["datapoint"]["value"] for e in reply["errors"]] == ["x", "7"]
        assert [e["datapoint"]["timestamp"] for e in reply["errors"]] == [ts, ts]
    assert await stored(tsd) == [
        *(
            sp("known.a", ms, v, dc="lga", host="web01")
            for ms, v in (
                (T * 1000, 1),
                ((T + 1) * 1000, 2.5),
                ((T + 3600) * 1000, 1),
                ((T + 3601) * 1000, 2.5),
            )
        ),
        *(sp("known.b", ts * 1000, -(2**40), host="web02") for ts in (T, T + 3600)),
        *(sp("known.c", ts * 1000 + 5, 3, host="web01") for ts in (T, T + 3600)),
    ]
    assert len(tsd.ingest.ref_cache(PUT_REFS)) >= 4  # the second body took the hot path


# -- jsonp: one wrapping, by the response middleware --------------------------------------------


async def test_jsonp_wraps_query_answers_once_with_the_last_callback(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    now = int(time.time()) - 60  # /api/query/last looks back from the current hour
    body = orjson.dumps(dp("jp.m", now, 7, host="h"))
    assert (await post(http, tsd, "/api/put?sync", body))[0] == 204
    answers = {
        f"/api/query?start={now - 10}&end={now + 10}&m=sum:jp.m&jsonp=a&jsonp=cb": (
            b'[{"metric":"jp.m","tags":{"host":"h"},"aggregateTags":[],"dps":{"%d":7}}]' % now
        ),
        "/api/query/last?timeseries=jp.m{host=h}&resolve&jsonp=cb": (
            b'[{"metric":"jp.m","timestamp":%d,"value":"7","tags":{"host":"h"},'
            b'"tsuid":"000001000001000001"}]' % (now * 1000)
        ),
    }
    for path, answer in answers.items():
        async with http.get(url(tsd, path)) as response:
            assert response.status == 200
            assert await response.read() == b"cb(" + answer + b")"
