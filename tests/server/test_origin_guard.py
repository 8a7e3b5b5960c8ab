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


async def test_clients_that_are_not_browsers_get_every_layers_reply(tsd: Daemon) -> None:
    """A request with none of a browser's headers skips the CORS and guard layers
    (middlewares.layered): its replies, errors included, still carry nosniff, OpenTSDB's
    JSON error body and content type, and a preflight still gets the CORS layer's 405."""
    base = f"http://127.0.0.1:{tsd.port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/api/version") as reply:
            assert reply.status == 200
            assert reply.headers["X-Content-Type-Options"] == "nosniff"
            assert reply.headers["Content-Type"] == "application/json; charset=UTF-8"
        async with http.get(base + "/api/nosuch") as reply:
            assert reply.status == 404
            assert reply.headers["X-Content-Type-Options"] == "nosniff"
            assert (await reply.json())["error"]["message"] == "Endpoint not found"
        async with http.get(base + "/api/query?start=1h-ago&m=sum:no.such.m") as reply:
            assert reply.status == 400
            assert reply.headers["X-Content-Type-Options"] == "nosniff"
            assert "no.such.m" in (await reply.json())["error"]["message"]
        async with http.options(base + "/api/version") as reply:
            assert reply.status == 405
            assert (await reply.json())["error"]["message"] == "Method not allowed"


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


# -- DNS rebinding (issue 25): a browser request must name this TSD ----------------------------

#: what a rebound page's browser sends: every header names the hostile name, as to the
#: browser the page and the TSD are one origin
REBOUND = [
    pytest.param({"Origin": "http://evil.example:{port}"}, id="origin"),
    pytest.param({"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, id="fetch_site"),
    pytest.param({"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}, id="navigate"),
    pytest.param({"Referer": "http://evil.example:{port}/"}, id="referer"),
    # a no-referrer GET over plain HTTP: no Origin, no Fetch Metadata, no Referer
    pytest.param({"Accept-Language": "en-US,en;q=0.9"}, id="accept_language"),
]


@pytest.mark.parametrize("headers", REBOUND)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/diediedie", id="diediedie"),
        pytest.param("GET", "/api/uid/assign?metric=evil.m", id="uid_assign"),
        pytest.param("GET", f"/api/query?start={T0 - 10}&m=sum:good.m", id="query"),
        pytest.param("GET", "/api/suggest?type=metrics", id="suggest"),
        pytest.param("GET", "/", id="page"),
    ],
)
async def test_rebound_name_is_refused(
    make_tsd: MakeTsd, method: str, path: str, headers: dict[str, str]
) -> None:
    """Reads included: the same-origin policy does not protect a rebound page's reads."""
    daemon = await seeded(make_tsd)
    before = await storage_snapshot(daemon)
    refused = daemon.registry.counter("http.foreign_host_refused")
    port = daemon.port
    sent = {"Host": f"evil.example:{port}", **{k: v.format(port=port) for k, v in headers.items()}}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"http://127.0.0.1:{port}{path}", headers=sent) as reply,
    ):
        assert reply.status == 403
        assert reply.headers["Content-Type"].startswith("application/json")
        body = await reply.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == 403
    assert body["error"]["message"] == "Host not allowed"
    assert "tsd.http.allowed_hosts" in body["error"]["details"]
    assert f"evil.example:{port}" in body["error"]["details"]
    assert "good.m" not in str(body)
    assert refused.value == 1
    assert await storage_snapshot(daemon) == before
    assert not daemon.shutdown_requested
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/api/stats") as reply,
    ):
        stats = await reply.json()
    assert [r["value"] for r in stats if r["metric"] == "tsd.http.foreign_host_refused"] == ["1"]


def own_names() -> list[str]:
    import socket

    return [socket.gethostname(), socket.getfqdn()]


@pytest.mark.parametrize(
    ("host", "keys"),
    [
        pytest.param("127.0.0.1:{port}", {}, id="ipv4"),
        pytest.param("[::1]:{port}", {}, id="ipv6"),
        pytest.param("10.1.2.3", {}, id="other_ipv4_no_port"),
        pytest.param("localhost:{port}", {}, id="localhost"),
        pytest.param("LOCALHOST.:{port}", {}, id="localhost_case_dot"),
        pytest.param("tsd.localhost:{port}", {}, id="dot_localhost"),
        pytest.param("{hostname}:{port}", {}, id="hostname"),
        pytest.param("{fqdn}:{port}", {}, id="fqdn"),
        pytest.param(
            "tsd.example:{port}", {"tsd.http.allowed_hosts": "a.example, TSD.example"}, id="listed"
        ),
        pytest.param(
            "tsd.example:{port}", {"tsd.http.allowed_hosts": "tsd.example:{port}"}, id="listed_port"
        ),
        pytest.param("evil.example:{port}", {"tsd.http.allowed_hosts": "*"}, id="star"),
    ],
)
async def test_own_names_serve_browsers(make_tsd: MakeTsd, host: str, keys: dict[str, str]) -> None:
    """The page and state changes work on every name of this TSD (its own page's requests)."""
    daemon = await seeded(make_tsd)
    hostname, fqdn = own_names()
    names = {"hostname": hostname, "fqdn": fqdn, "port": daemon.port}
    host = host.format(**names)
    # Keys are read at start: a listed port must be known first; restart with it.
    if keys:
        port = daemon.port
        await daemon.stop()
        daemon = await seeded(
            make_tsd,
            **{"tsd.network.port": str(port)},
            **{k: v.format(**names) for k, v in keys.items()},
        )
    own = {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
    async with aiohttp.ClientSession(headers=own) as http:
        base = f"http://127.0.0.1:{daemon.port}"
        async with http.get(base + "/") as reply:
            assert reply.status == 200
        async with http.get(base + f"/api/query?start={T0 - 10}&m=sum:good.m") as reply:
            assert reply.status == 200, await reply.text()
            assert (await reply.json())[0]["metric"] == "good.m"
        async with http.get(base + "/api/uid/assign?metric=new.m") as reply:
            assert reply.status == 200, await reply.text()
    assert await daemon.uids.metrics.get_id("new.m")


async def test_a_listed_port_is_that_port_only(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.http.allowed_hosts": "tsd.example:1"})
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"http://127.0.0.1:{daemon.port}/api/version",
            headers={"Host": f"tsd.example:{daemon.port}", "Sec-Fetch-Site": "same-origin"},
        ) as reply,
    ):
        assert reply.status == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "[::1", "a b", ""])
async def test_clients_that_are_not_browsers_are_unaffected(make_tsd: MakeTsd, host: str) -> None:
    """collectors, curl, Grafana's server side: no browser header, any Host (OpenTSDB's)."""
    daemon = await make_tsd()
    point = {"metric": "plain.m", "timestamp": T0, "value": 1, "tags": {"h": "a"}}
    async with aiohttp.ClientSession(headers={"Host": host}) as http:
        base = f"http://127.0.0.1:{daemon.port}"
        async with http.post(base + "/api/put?sync", json=point) as reply:
            assert reply.status == 204
        async with http.get(base + f"/api/query?start={T0 - 10}&m=sum:plain.m") as reply:
            assert reply.status == 200
            assert (await reply.json())[0]["dps"] == {str(T0): 1}


@pytest.mark.parametrize("entry", ["a b", "tsd.example:port", "http://tsd.example/x", ":80"])
def test_a_bad_allowed_host_is_a_config_error(entry: str) -> None:
    from tsd.errors import ConfigError
    from tsd.server.http.guard import parse_allowed_hosts

    with pytest.raises(ConfigError, match="tsd.http.allowed_hosts"):
        parse_allowed_hosts(f"ok.example,{entry}")


#: What Grafana's data-source proxy ("Server" access of the old frontend data source) sends:
#: it drops Origin and Referer but passes the browser's Fetch Metadata on, with the Host of
#: the data source's URL (pkg/api/pluginproxy/ds_proxy.go, pkg/util/proxyutil).
GRAFANA_PROXY = {
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "cors",
    "Sec-Fetch-Dest": "empty",
    "X-Grafana-Referer": "http://grafana.example:3000/d/abc/board",
    "X-Forwarded-For": "192.0.2.7",
    "User-Agent": "Grafana/10.4.0",
}


@pytest.mark.parametrize(
    ("url_host", "listed", "status"),
    [
        pytest.param("127.0.0.1:{port}", "", 200, id="ip_url"),
        pytest.param("localhost:{port}", "", 200, id="localhost_url"),
        pytest.param("tsd:{port}", "tsd", 200, id="service_name_listed"),
        pytest.param("tsd:{port}", "", 403, id="service_name_not_listed"),
    ],
)
async def test_grafana_proxy_with_fetch_metadata(
    make_tsd: MakeTsd, url_host: str, listed: str, status: int
) -> None:
    """The data source URL must name the TSD by one of its names, as a browser would."""
    daemon = await seeded(make_tsd, **{"tsd.http.allowed_hosts": listed})
    headers = {**GRAFANA_PROXY, "Host": url_host.format(port=daemon.port)}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.get(f"http://127.0.0.1:{daemon.port}/api/suggest?type=metrics") as reply,
    ):
        assert reply.status == status
        body = await reply.json()
    if status == 200:
        assert body == ["good.m"]
    else:
        assert "tsd.http.allowed_hosts" in body["error"]["details"]
