"""Discovery and metadata endpoints over real sockets: /api/suggest, /api/search, /api/uid
(uidmeta, tsmeta, rename), /api/annotation(s), jsonp, compression, dropcaches, config and
the query page, with OpenTSDB's statuses and messages."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tsd.daemon import Daemon
from tsd.server.http.middlewares import INLINE_COMPRESS_BYTES

T = 1_369_141_261
JSON = "application/json; charset=UTF-8"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Client:
    def __init__(self, daemon: Daemon, http: aiohttp.ClientSession) -> None:
        self.base = f"http://127.0.0.1:{daemon.port}"
        self.http = http

    async def call(
        self, method: str, path: str, body: Any = None, **headers: str
    ) -> tuple[int, Any]:
        data = None if body is None else orjson.dumps(body)
        async with self.http.request(method, self.base + path, data=data, headers=headers) as r:
            raw = await r.read()
            return r.status, orjson.loads(raw) if raw else None

    async def raw(
        self, method: str, path: str, **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        """The reply as sent (not decompressed; identity unless Accept-Encoding is given)."""
        headers.setdefault("Accept-Encoding", "identity")
        async with self.http.request(
            method, self.base + path, headers=headers, auto_decompress=False
        ) as r:
            return r.status, dict(r.headers), await r.read()


async def loaded(make_tsd: MakeTsd, http: aiohttp.ClientSession, **keys: str) -> Client:
    client = Client(await make_tsd(**keys), http)
    points = [
        {"metric": m, "timestamp": T, "value": 1, "tags": {"host": h}}
        for m in ("sys.cpu.user", "sys.cpu.nice", "Sys.Upper")
        for h in ("web01", "web02")
    ]
    assert (await client.call("POST", "/api/put?sync", points))[0] == 204
    return client


def error(body: Any) -> tuple[int, str, str]:
    e = body["error"]
    return e["code"], e["message"], e.get("details", "")


# -- /api/suggest -----------------------------------------------------------------------------


async def test_suggest(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = await loaded(make_tsd, http)
    # Byte order: upper case first.
    assert await c.call("GET", "/api/suggest?type=metrics") == (
        200,
        ["Sys.Upper", "sys.cpu.nice", "sys.cpu.user"],
    )
    assert await c.call("GET", "/api/suggest?type=metrics&q=sys.cpu&max=1") == (
        200,
        ["sys.cpu.nice"],
    )
    assert await c.call("GET", "/api/suggest?type=metrics&q=sys&max=0") == (
        200,
        ["sys.cpu.nice", "sys.cpu.user"],
    )
    assert await c.call("GET", "/api/suggest?type=tagk") == (200, ["host"])
    body = {"type": "tagv", "q": "web", "max": 1}
    assert await c.call("POST", "/api/suggest", body) == (200, ["web01"])
    # The 1.x path reads the query string, even for a POST.
    assert await c.call("POST", "/suggest?type=tagv&q=web02") == (200, ["web02"])


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        pytest.param(
            "GET", "/api/suggest?type=metric", None,
            (400, "Invalid 'type' parameter:metric", ""), id="singular_type",
        ),
        pytest.param(
            "GET", "/api/suggest?q=a", None,
            (400, "Missing parameter <code>type</code>", ""), id="no_type",
        ),
        pytest.param(
            "GET", "/api/suggest?type=tagk&max=ten", None,
            (400, "Unable to parse 'max' as a number", ""), id="bad_max",
        ),
        pytest.param(
            "POST", "/api/suggest", {"q": "a"}, (400, "Missing 'type' parameter", ""),
            id="post_without_type",
        ),
        pytest.param(
            "PUT", "/api/suggest?type=tagk", None,
            (405, "Method not allowed",
             "The HTTP method [PUT] is not permitted for this endpoint"),
            id="put",
        ),
    ],
)  # fmt: skip
async def test_suggest_errors(
    make_tsd: MakeTsd,
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any,
    expected: tuple[int, str, str],
) -> None:
    c = Client(await make_tsd(), http)
    status, reply = await c.call(method, path, body)
    assert (status, *error(reply)[1:]) == expected


# -- /api/search ------------------------------------------------------------------------------


async def test_lookup_response_shape(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = await loaded(make_tsd, http)
    status, body = await c.call("GET", "/api/search/lookup?m=sys.cpu.user{host=web01}")
    assert status == 200
    assert body == {
        "type": "LOOKUP",
        "metric": "sys.cpu.user",
        "tags": [{"key": "host", "value": "web01"}],
        "limit": 25,
        "time": body["time"],
        "results": [
            {"tsuid": "000001000001000001", "metric": "sys.cpu.user", "tags": {"host": "web01"}}
        ],
        "startIndex": 0,
        "totalResults": 1,
    }
    assert isinstance(body["time"], float)
    # The POST form: no tags given, no tags echoed; the metric defaults to "*".
    # No metric and no tags: OpenTSDB's default metric "*" lists every series.
    status, body = await c.call("POST", "/api/search/lookup", {"limit": 1})
    assert (status, body["metric"], body["totalResults"]) == (200, "*", 1)
    status, body = await c.call("GET", "/api/search/lookup?m={}")
    assert error(body) == (400, "Unable to parse query", "Missing metric and tags: {}")
    status, body = await c.call("POST", "/api/search/lookup", {"metric": "sys.cpu.nice"})
    assert (status, "tags" in body, body["totalResults"]) == (200, False, 2)
    status, body = await c.call(
        "POST", "/api/search/lookup", {"tags": [{"key": "host", "value": "web02"}]}
    )
    assert body["metric"] == "*"
    assert sorted(r["metric"] for r in body["results"]) == [
        "Sys.Upper",
        "sys.cpu.nice",
        "sys.cpu.user",
    ]


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        pytest.param("GET", "/api/search/lookup?m=nope", (404,
                     "Unable to resolve one or more UIDs", "No such name for 'metrics': 'nope'"),
                     id="unknown_metric"),
        pytest.param("GET", "/api/search/lookup", (400, "Missing parameter <code>m</code>", ""),
                     id="no_m"),
        pytest.param("GET", "/api/search/lookup?m=a&limit=x",
                     (400, "Unable to convert 'limit' to a valid number", ""), id="bad_limit"),
        pytest.param("GET", "/api/search/lookup?m=a{b", (400, "Unable to parse query",
                     "Missing '}' at the end of: a{b"), id="bad_m"),
        pytest.param("GET", "/api/search/tsmeta?query=name:*",
                     (400, "Searching is not enabled", "Searching is not enabled"),
                     id="plugin_search"),
        pytest.param("GET", "/api/search/foo", (400, "Invalid search query type supplied",
                     "Unknown type: foo"), id="unknown_type"),
        pytest.param("DELETE", "/api/search/lookup?m=a",
                     (400, "Unsupported method: DELETE", ""), id="delete"),
    ],
)  # fmt: skip
async def test_search_errors(
    make_tsd: MakeTsd, http: aiohttp.ClientSession, method: str, path: str, expected: Any
) -> None:
    c = await loaded(make_tsd, http)
    status, body = await c.call(method, path)
    assert (status, *error(body)[1:]) == expected


# -- /api/uid/uidmeta, tsmeta, rename ---------------------------------------------------------


async def test_uidmeta_over_http(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = await loaded(make_tsd, http)
    status, body = await c.call("GET", "/api/uid/uidmeta?uid=000001&type=metric")
    assert (status, body["name"], body["created"]) == (200, "sys.cpu.user", 0)
    status, body = await c.call(
        "POST", "/api/uid/uidmeta", {"uid": "000001", "type": "metric", "displayName": "CPU"}
    )
    assert (status, body["displayName"], body["description"]) == (200, "CPU", "")
    # The query-string form, through method_override.
    status, body = await c.call(
        "GET", "/api/uid/uidmeta?uid=000001&type=metric&description=user&method_override=post"
    )
    assert (status, body["displayName"], body["description"]) == (200, "CPU", "user")
    status, body = await c.call("PUT", "/api/uid/uidmeta", {"uid": "000001", "type": "metric"})
    assert (status, body) == (304, None)
    status, body = await c.call("GET", "/api/uid/uidmeta?uid=0000FF&type=metric")
    assert error(body) == (
        404,
        "Could not find the requested UID",
        "No such unique ID for 'metrics': [0, 0, -1]",
    )
    status, body = await c.call("GET", "/api/uid/uidmeta?type=metric")
    assert error(body)[1] == "Missing parameter <code>uid</code>"
    assert (await c.call("DELETE", "/api/uid/uidmeta?uid=000001&type=metric"))[0] == 204
    status, body = await c.call("GET", "/api/uid/uidmeta?uid=000001&type=metric")
    assert body["displayName"] == ""


async def test_tsmeta_over_http(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = await loaded(make_tsd, http)
    status, body = await c.call("GET", "/api/uid/tsmeta?tsuid=000001000001000001")
    assert error(body) == (404, "Could not find Timeseries meta data", "")
    status, body = await c.call(
        "POST", "/api/uid/tsmeta?m=sys.cpu.user{host=web01}", {"description": "d"}
    )
    assert error(body)[1] == 'Could not find TSMeta, specify "create=true" to create a new one.'
    status, body = await c.call(
        "POST", "/api/uid/tsmeta?m=sys.cpu.user{host=web01}&create=true", {"units": "%"}
    )
    assert (status, body["tsuid"], body["units"], body["max"]) == (
        200,
        "000001000001000001",
        "%",
        "NaN",
    )
    status, body = await c.call("POST", "/api/uid/tsmeta", {"tsuid": "000001000001000001"})
    assert status == 304
    status, body = await c.call(
        "POST", "/api/uid/tsmeta", {"tsuid": "000001000001000001", "notes": "n"}
    )
    assert (body["units"], body["notes"]) == ("%", "n")
    status, listed = await c.call("GET", "/api/uid/tsmeta?m=sys.cpu.user")
    assert [m["tsuid"] for m in listed] == ["000001000001000001"]
    status, listed = await c.call("GET", "/api/uid/tsmeta?m=sys.cpu.user{host=web02}")
    assert listed == []
    status, body = await c.call("GET", "/api/uid/tsmeta?m=nope")
    assert error(body)[:2] == (404, "Unable to find one of the UIDs")
    assert (await c.call("DELETE", "/api/uid/tsmeta?tsuid=000001000001000001"))[0] == 204
    assert (await c.call("GET", "/api/uid/tsmeta?tsuid=000001000001000001"))[0] == 404


async def test_rename_over_http(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = await loaded(make_tsd, http)
    assert await c.call("GET", "/api/uid/rename?metric=sys.cpu.user&name=sys.cpu.usr") == (
        200,
        {"result": "true"},
    )
    assert await c.call("POST", "/api/uid/rename", {"tagv": "web02", "name": "web03"}) == (
        200,
        {"result": "true"},
    )
    status, body = await c.call("GET", "/api/uid/rename?metric=sys.cpu.user&name=x")
    assert (status, body) == (
        400,
        {"result": "false", "error": 'Name("sys.cpu.user") does not exist'},
    )
    status, body = await c.call("GET", "/api/uid/rename?metric=sys.cpu.usr")
    assert error(body)[1] == "Missing necessary values to rename UID"
    # The series follow their UIDs: lookups see the new names.
    status, body = await c.call("GET", "/api/search/lookup?m=sys.cpu.usr")
    assert sorted(r["tags"]["host"] for r in body["results"]) == ["web01", "web03"]


# -- annotations ------------------------------------------------------------------------------


async def test_annotation_over_http(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = Client(await make_tsd(), http)
    note = {"tsuid": "000001000001000001", "startTime": T, "description": "outage",
            "custom": {"owner": "ops"}}  # fmt: skip
    status, body = await c.call("POST", "/api/annotation", note)
    assert (status, body) == (
        200,
        {"tsuid": "000001000001000001", "description": "outage", "notes": "",
         "custom": {"owner": "ops"}, "endTime": 0, "startTime": T},
    )  # fmt: skip
    assert (await c.call("POST", "/api/annotation", note))[0] == 200  # custom always counts
    status, _ = await c.call("POST", "/api/annotation", {"tsuid": note["tsuid"], "startTime": T})
    assert status == 304
    status, body = await c.call("GET", f"/api/annotation?tsuid=000001000001000001&start_time={T}")
    assert body["description"] == "outage"
    status, body = await c.call("GET", f"/api/annotation?start_time={T}")
    assert error(body) == (404, "Unable to locate annotation in storage", "")
    status, body = await c.call("POST", "/api/annotation", {"description": "no time"})
    assert error(body)[:2] == (400, "The start timestamp has not been set")
    # Global notes, the query-string form (times cut to seconds), and the range list.
    status, body = await c.call("POST", f"/api/annotation?start_time={T}000&description=g")
    assert (status, body["startTime"], body["tsuid"]) == (200, T, "")
    status, body = await c.call("GET", f"/api/annotations?start_time={T - 10}&end_time={T + 10}")
    assert [n["description"] for n in body] == ["g"]
    assert (await c.call("DELETE", f"/api/annotation?start_time={T}"))[0] == 204
    status, body = await c.call("GET", f"/api/annotations?start_time={T - 10}")
    assert body == []


async def test_annotation_bulk(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = Client(await make_tsd(), http)
    notes = [
        {"tsuid": "000001000001000001", "startTime": T + i, "description": f"n{i}"}
        for i in range(3)
    ] + [{"startTime": T, "description": "global"}]
    status, body = await c.call("POST", "/api/annotation/bulk", notes)
    assert (status, [n["description"] for n in body]) == (200, ["n0", "n1", "n2", "global"])
    status, body = await c.call("POST", "/api/annotation/bulk", [{"description": "x"}])
    assert error(body) == (
        400,
        "The start timestamp has not been set",
        "Annotation error: TSUID:  Start: 0  Description: x",
    )
    request = {"tsuids": ["000001000001000001"], "startTime": T, "endTime": T + 1}
    status, body = await c.call("DELETE", "/api/annotation/bulk", request)
    assert (status, body) == (
        200,
        {"startTime": T * 1000, "endTime": (T + 1) * 1000, "tsuids": ["000001000001000001"],
         "global": False, "totalDeleted": 2},
    )  # fmt: skip
    status, body = await c.call("DELETE", f"/api/annotation/bulk?start_time={T}&global")
    assert (status, body["totalDeleted"], body["tsuids"]) == (200, 1, None)
    status, body = await c.call("DELETE", f"/api/annotation/bulk?start_time={T}")
    assert error(body)[1] == "Missing the TSUIDs or global annotations flag"
    status, body = await c.call("GET", "/api/annotation/bulk")
    assert error(body)[0] == 405


# -- jsonp, compression, small endpoints -------------------------------------------------------


async def test_jsonp_wraps_answers_and_errors(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    c = await loaded(make_tsd, http)
    status, headers, body = await c.raw("GET", "/api/suggest?type=tagk&jsonp=cb")
    assert (status, body, headers["Content-Type"]) == (200, b'cb(["host"])', JSON)
    status, headers, body = await c.raw("GET", "/api/suggest?type=nope&jsonp=cb")
    assert status == 400
    assert body.startswith(b'cb({"error":{"code":400,')


@pytest.mark.parametrize(
    ("accept", "encoding"),
    [
        pytest.param("gzip, deflate", "gzip", id="gzip"),
        pytest.param("deflate", "deflate", id="deflate"),
        pytest.param("gzip;q=0, deflate", "deflate", id="gzip_refused"),
        pytest.param("identity", None, id="identity"),
    ],
)
async def test_responses_are_compressed_when_accepted(
    make_tsd: MakeTsd, http: aiohttp.ClientSession, accept: str, encoding: str | None
) -> None:
    c = await loaded(make_tsd, http)
    status, headers, body = await c.raw(
        "GET", "/api/suggest?type=metrics", **{"Accept-Encoding": accept}
    )
    assert status == 200
    assert headers.get("Content-Encoding") == encoding
    if encoding == "gzip":
        body = gzip.decompress(body)
    if encoding == "deflate":
        body = zlib.decompress(body)
    assert orjson.loads(body) == ["Sys.Upper", "sys.cpu.nice", "sys.cpu.user"]


@pytest.mark.parametrize("points", [360, 16_000], ids=["inline", "thread"])
@pytest.mark.parametrize("accept", ["gzip", "deflate"])
async def test_query_answers_are_compressed_on_both_sides_of_the_inline_limit(
    make_tsd: MakeTsd, http: aiohttp.ClientSession, points: int, accept: str
) -> None:
    """A body up to INLINE_COMPRESS_BYTES is compressed on the event loop, a bigger one
    in a worker thread: both decompress (by zlib) to the same answer as an identity
    reply."""
    c = Client(await make_tsd(), http)
    puts = [
        {"metric": "z.m", "timestamp": T + 10 * i, "value": i + 0.5, "tags": {"h": "a"}}
        for i in range(points)
    ]
    for lo in range(0, points, 4000):  # bodies the test client sends without a warning
        assert (await c.call("POST", "/api/put?sync", puts[lo : lo + 4000]))[0] == 204
    path = f"/api/query?start={T}&end={T + 10 * points}&m=sum:z.m"
    status, headers, plain = await c.raw("GET", path)
    assert (status, headers.get("Content-Encoding")) == (200, None)
    assert (len(plain) <= INLINE_COMPRESS_BYTES) == (points == 360)
    status, headers, body = await c.raw("GET", path, **{"Accept-Encoding": accept})
    assert (status, headers.get("Content-Encoding")) == (200, accept)
    assert int(headers["Content-Length"]) == len(body)
    assert (gzip.decompress(body) if accept == "gzip" else zlib.decompress(body)) == plain


async def test_dropcaches_config_and_aggregators(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    c = await loaded(make_tsd, http, **{"tsd.custom.password": "secret"})
    assert await c.call("GET", "/api/dropcaches") == (
        200,
        {"status": "200", "message": "Caches dropped"},
    )
    assert (await c.call("POST", "/api/dropcaches"))[0] == 405
    # Lookups still resolve after the caches are gone.
    status, body = await c.call("GET", "/api/search/lookup?m=sys.cpu.user")
    assert (status, body["totalResults"]) == (200, 2)
    status, config = await c.call("GET", "/api/config")
    assert list(config) == sorted(config)
    assert all(isinstance(v, str) for v in config.values())
    assert config["tsd.custom.password"] == "********"
    status, aggregators = await c.call("GET", "/api/aggregators")
    assert status == 200
    assert {"sum", "avg", "zimsum", "mimmax"} <= set(aggregators)


async def test_grafana_browser_mode_preflight(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    """Grafana's old "direct" access: the browser calls the TSD, with CORS preflights."""
    c = await loaded(make_tsd, http, **{"tsd.http.request.cors_domains": "*"})
    origin = "http://grafana.example:3000"
    status, headers, _ = await c.raw(
        "OPTIONS",
        "/api/suggest?type=metrics&q=cpu",
        Origin=origin,
        **{"Access-Control-Request-Method": "GET"},
    )
    assert (status, headers["Access-Control-Allow-Origin"]) == (200, origin)
    status, headers, body = await c.raw("GET", "/api/suggest?type=tagk", Origin=origin)
    assert (status, headers["Access-Control-Allow-Origin"], body) == (200, origin, b'["host"]')


# -- the query page ---------------------------------------------------------------------------


async def test_query_page_and_static_files(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    c = Client(await make_tsd(), http)
    status, headers, body = await c.raw("GET", "/")
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=UTF-8")
    assert b'<script src="/s/tsd.js">' in body
    status, headers, body = await c.raw("GET", "/s/tsd.js")
    assert (status, headers["Content-Type"]) == (200, "text/javascript; charset=UTF-8")
    for missing in ("/s/nope.js", "/s/..%2Fui.py", "/s/", "/nothing-here"):
        assert (await c.raw("GET", missing))[0] == 404, missing


async def test_write_only_mode_has_no_query_page_or_suggest(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    c = Client(await make_tsd(**{"tsd.mode": "wo"}), http)
    assert (await c.raw("GET", "/"))[0] == 404
    assert (await c.raw("GET", "/api/suggest?type=metrics"))[0] == 404
    assert (await c.raw("GET", f"/api/annotations?start_time={T}"))[0] == 200
