"""The origin guard over real HTTP: what a browser sends for a foreign page's request is
refused with a 403 before anything changes; clients without browser headers, the TSD's own
pages and listed CORS origins keep OpenTSDB's behaviour (GET forms, method_override)."""

from __future__ import annotations

import aiohttp
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import storage_snapshot
from tsd.daemon import Daemon
from tsd.server.http.access import ROUTE_RIGHTS
from tsd.server.http.app import ROUTE_MODULES

T0 = 1_700_000_000

#: (method, path, body): every kind of state change, in OpenTSDB's forms
STATE_CHANGES = [
    pytest.param("GET", "/diediedie", None, id="diediedie"),
    pytest.param("GET", "/api/dropcaches", None, id="dropcaches"),
    pytest.param("GET", "/api/uid/assign?metric=evil.m", None, id="uid_assign_get"),
    pytest.param("GET", "/api/uid/assign?metric=evil.m&method_override=x", None, id="bad_override"),
    pytest.param("POST", "/api/uid/assign", '{"metric":["evil.m"]}', id="uid_assign_post"),
    pytest.param("GET", "/api/uid/rename?metric=good.m&name=evil.m", None, id="uid_rename"),
    pytest.param(
        "POST",
        "/api/put?sync",
        f'{{"metric":"evil.m","timestamp":{T0},"value":1,"tags":{{"h":"a"}}}}',
        id="put_text_plain",
    ),
    pytest.param(
        "POST", "/api/annotation", f'{{"startTime":{T0},"description":"x"}}', id="note_post"
    ),
    pytest.param("DELETE", f"/api/annotation?start_time={T0}", None, id="note_delete"),
    pytest.param(
        "GET",
        f"/api/annotation?start_time={T0}&method_override=delete",
        None,
        id="note_delete_override",
    ),
    pytest.param(
        "GET",
        f"/api/query?start={T0 - 10}&m=sum:good.m&method_override=delete",
        None,
        id="query_delete_override",
    ),
    pytest.param(
        "POST",
        "/api/query",
        f'{{"start":{T0 - 10},"delete":true,"queries":[{{"aggregator":"sum","metric":"good.m"}}]}}',
        id="query_delete_body",
    ),
]

#: what browsers send on a foreign page's request
FOREIGN = [
    pytest.param({"Origin": "http://evil.example"}, id="origin"),
    pytest.param({"Origin": "null"}, id="origin_null"),
    pytest.param({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, id="cross_site"),
    pytest.param({"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"}, id="same_site"),
    pytest.param({"Referer": "http://evil.example/page.html"}, id="referer"),
]


async def seeded(make_tsd: MakeTsd, **keys: str) -> Daemon:
    """A daemon holding one series and one global annotation, deletes allowed."""
    daemon = await make_tsd(**{"tsd.http.query.allow_delete": "true", **keys})
    base = f"http://127.0.0.1:{daemon.port}"
    async with aiohttp.ClientSession() as http:
        point = {"metric": "good.m", "timestamp": T0, "value": 1, "tags": {"h": "a"}}
        async with http.post(base + "/api/put?sync", json=point) as reply:
            assert reply.status == 204
        note = {"startTime": T0, "description": "kept"}
        async with http.post(base + "/api/annotation", json=note) as reply:
            assert reply.status == 200
    return daemon


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@pytest.mark.parametrize("headers", FOREIGN)
@pytest.mark.parametrize(("method", "path", "body"), STATE_CHANGES)
async def test_foreign_page_changes_nothing(
    make_tsd: MakeTsd, method: str, path: str, body: str | None, headers: dict[str, str]
) -> None:
    daemon = await seeded(make_tsd)
    before = await storage_snapshot(daemon)
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method,
            f"http://127.0.0.1:{daemon.port}{path}",
            data=body,
            headers={"Content-Type": "text/plain", **headers},
        ) as reply,
    ):
        assert reply.status == 403
        assert reply.headers["Content-Type"].startswith("application/json")
        error = (await reply.json())["error"]
        assert error["message"] == "Cross-origin request refused"
    assert await storage_snapshot(daemon) == before
    assert not daemon.shutdown_requested


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no_browser_headers"),
        pytest.param({"Origin": "http://{host}", "Sec-Fetch-Site": "same-origin"}, id="own_page"),
        pytest.param({"Sec-Fetch-Site": "none"}, id="typed_in_address_bar"),
        pytest.param({"Origin": "http://grafana.example"}, id="listed_cors_origin"),
    ],
)
async def test_same_origin_and_plain_clients_keep_get_forms(
    make_tsd: MakeTsd, headers: dict[str, str]
) -> None:
    # OpenTSDB's CORS check answers any Origin it does not list once cors_domains is set,
    # this TSD's own included: set it only where the case needs it.
    listed = headers.get("Origin", "") == "http://grafana.example"
    cors = {"tsd.http.request.cors_domains": "http://grafana.example"} if listed else {}
    daemon = await seeded(make_tsd, **cors)
    host = f"127.0.0.1:{daemon.port}"
    headers = {k: v.format(host=host) for k, v in headers.items()}
    async with aiohttp.ClientSession(headers=headers) as http:
        base = f"http://{host}"
        async with http.get(base + "/api/uid/assign?metric=new.m") as reply:
            assert reply.status == 200, await reply.text()
        override = f"/api/annotation?start_time={T0}&method_override=delete"
        async with http.get(base + override) as reply:
            assert reply.status == 204
        async with http.get(base + f"/api/annotation?start_time={T0}") as reply:
            assert reply.status == 404
    assert await daemon.uids.metrics.get_id("new.m")


async def test_foreign_reads_still_answer(tsd: Daemon) -> None:
    """Reads change nothing; the browser's same-origin policy keeps their answers from the
    page, so the guard lets them through (Grafana's browser mode uses CORS for them)."""
    async with (
        aiohttp.ClientSession(headers={"Origin": "http://evil.example"}) as http,
        http.get(f"http://127.0.0.1:{tsd.port}/api/version") as reply,
    ):
        assert reply.status == 200
        assert reply.headers["X-Content-Type-Options"] == "nosniff"


async def test_star_cors_opens_reads_not_state_changes(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.http.request.cors_domains": "*"})
    async with (
        aiohttp.ClientSession(headers={"Origin": "http://evil.example"}) as http,
        http.get(f"http://127.0.0.1:{daemon.port}/api/uid/assign?metric=x") as reply,
    ):
        assert reply.status == 403
        assert reply.headers["Access-Control-Allow-Origin"] == "http://evil.example"


def test_every_route_has_a_right() -> None:
    import importlib

    routes = {key for name in ROUTE_MODULES for key in importlib.import_module(name).ROUTES}
    assert routes <= set(ROUTE_RIGHTS)
