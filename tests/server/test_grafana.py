"""Grafana's OpenTSDB data source against a running tsd, over real sockets.

The requests are Grafana's own (shared/reference/clients.md §1): the health check of the
legacy frontend and of the Go backend, the query editor's lookups, every template-variable
function (the frontend's metricFindQuery and the backend's resource handlers, including how
they turn lookup answers into variable values), panel queries as each ``tsdbVersion`` builds
them (2.1, 2.2, 2.3 with ``showQuery``/``query.index``, 2.4 with ``?arrays=true``, and the old
alerting backend with millisecond times), and annotation queries with and without
``globalAnnotations``. Template variables run with meta tracking off and on.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import orjson
import pytest
from yarl import URL

from tests.server.conftest import MakeTsd
from tsd.config import build_config
from tsd.daemon import Daemon

T0 = 1_699_999_200  # an hour boundary
STEP = 15
POINTS = 12
HOSTS = {"web01": ("lga", 10), "web02": ("lga", 20), "web03": ("sjc", 30)}

#: Grafana's built-in lists, used when the TSD does not answer (clients.md §1.7): a TSD
#: must offer at least these.
GRAFANA_AGGREGATORS = {"avg", "sum", "min", "max", "dev", "zimsum", "mimmin", "mimmax"}
GRAFANA_FILTERS = {
    "wildcard",
    "iliteral_or",
    "not_iliteral_or",
    "not_literal_or",
    "iwildcard",
    "literal_or",
    "regexp",
}

TRACKING = [
    pytest.param({}, id="meta_tracking_off"),
    pytest.param({"tsd.core.meta.enable_tsuid_tracking": "true"}, id="meta_tracking_on"),
    pytest.param(
        {
            "tsd.core.meta.enable_tsuid_tracking": "true",
            "tsd.core.meta.enable_realtime_ts": "true",
            "tsd.core.meta.enable_realtime_uid": "true",
        },
        id="realtime_meta",
    ),
]


#: Grafana's datasource with "Basic auth" on, as a read-only user; the test data is loaded
#: with a user that may write.
READER = ("grafana", secrets.token_hex(16))
WRITER = ("loader", secrets.token_hex(16))


@pytest.fixture(params=[pytest.param(False, id="open"), pytest.param(True, id="basic_auth")])
def auth_keys(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """No keys (OpenTSDB's open TSD), or authentication on with a reader and a writer."""
    if not request.param:
        return {}
    users = tmp_path / "users"
    users.write_text(
        "".join(
            f"{name} {rights} sha256:{hashlib.sha256(secret.encode()).hexdigest()}\n"
            for (name, secret), rights in ((READER, "read"), (WRITER, "write"))
        )
    )
    return {"tsd.core.authentication.enable": "true", AUTH_FILE: str(users)}


AUTH_FILE = "tsd.core.authentication.users_file"


@pytest.fixture
def make_tsd(make_tsd: MakeTsd, auth_keys: dict[str, str]) -> MakeTsd:
    async def make(**keys: str) -> Daemon:
        return await make_tsd(**auth_keys, **keys)

    return make


@pytest.fixture
async def http(auth_keys: dict[str, str]) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": aiohttp.encode_basic_auth(*READER)} if auth_keys else {}
    async with aiohttp.ClientSession(headers=headers) as session:
        yield session


class Tsd:
    """A daemon and a client session, requests written as Grafana writes them."""

    def __init__(self, daemon: Daemon, http: aiohttp.ClientSession) -> None:
        self.base = f"http://127.0.0.1:{daemon.port}"
        self.http = http

    async def get(self, raw: str) -> tuple[int, Any]:
        """GET a path with its query string exactly as given (already encoded)."""
        async with self.http.get(URL(self.base + raw, encoded=True)) as reply:
            body = await reply.read()
            return reply.status, orjson.loads(body) if body else None

    async def post(self, path: str, body: Any, *, writes: bool = False) -> tuple[int, Any]:
        """``writes``: as the loader, not as Grafana (when authentication is on)."""
        headers = {"Content-Type": "application/json"}
        if writes and "Authorization" in self.http.headers:
            headers["Authorization"] = aiohttp.encode_basic_auth(*WRITER)
        data = orjson.dumps(body)
        async with self.http.post(self.base + path, data=data, headers=headers) as r:
            reply = await r.read()
            return r.status, orjson.loads(reply) if reply else None


async def start(make_tsd: MakeTsd, http: aiohttp.ClientSession, **keys: str) -> Tsd:
    return Tsd(await make_tsd(**keys), http)


async def load(tsd: Tsd) -> None:
    points = [
        {"metric": "sys.cpu.user", "timestamp": T0 + STEP * i, "value": base + i,
         "tags": {"host": host, "dc": dc}}
        for host, (dc, base) in HOSTS.items()
        for i in range(POINTS)
    ] + [
        {"metric": "net.bytes.in", "timestamp": T0 + STEP * i, "value": 1000 * i,
         "tags": {"host": "web01", "iface": "eth0"}}
        for i in range(POINTS)
    ] + [
        {"metric": "events.deploy", "timestamp": T0 + 60, "value": 1, "tags": {"host": "web01"}}
    ]  # fmt: skip
    status, _ = await tsd.post("/api/put?sync", points, writes=True)
    assert status == 204
    status, series = await tsd.get("/api/search/lookup?m=events.deploy")
    tsuid = series["results"][0]["tsuid"]
    notes = [
        {"tsuid": tsuid, "startTime": T0 + 60, "description": "deploy v1"},
        {"startTime": T0 + 90, "description": "maintenance"},
    ]
    status, saved = await tsd.post("/api/annotation/bulk", notes, writes=True)
    assert (status, len(saved)) == (200, 2)


# -- the health check -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api/suggest?type=metrics&q=cpu&max=1000", id="legacy_frontend"),
        pytest.param("/api/suggest?q=cpu&type=metrics", id="go_backend"),
    ],
)
async def test_health_check_is_exactly_200_on_an_empty_store(
    make_tsd: MakeTsd, http: aiohttp.ClientSession, path: str
) -> None:
    tsd = await start(make_tsd, http)
    assert await tsd.get(path) == (200, [])


# -- the query editor -------------------------------------------------------------------------


async def test_query_editor_lookups(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    tsd = await start(make_tsd, http)
    await load(tsd)
    # The metric picker asks once with an empty prefix, then per keystroke.
    assert await tsd.get("/api/suggest?type=metrics&q=&max=1000") == (
        200,
        ["events.deploy", "net.bytes.in", "sys.cpu.user"],
    )
    assert await tsd.get("/api/suggest?type=metrics&q=sys&max=1000") == (200, ["sys.cpu.user"])
    assert await tsd.get("/api/suggest?type=tagv&q=web&max=1000") == (
        200,
        ["web01", "web02", "web03"],
    )
    status, aggregators = await tsd.get("/api/aggregators")
    assert status == 200
    assert isinstance(aggregators, list)
    assert set(aggregators) >= GRAFANA_AGGREGATORS
    status, filters = await tsd.get("/api/config/filters")
    assert status == 200
    assert set(filters) >= GRAFANA_FILTERS
    assert all(set(f) == {"description", "examples"} for f in filters.values())


# -- template variables -----------------------------------------------------------------------


class GrafanaVariables:
    """Grafana's template-variable functions, sending the requests each code path sends
    and deriving the values as it does (dedupe; the backend also sorts)."""

    def __init__(self, tsd: Tsd, lookup_limit: int = 1000) -> None:
        self.tsd = tsd
        self.limit = lookup_limit

    async def frontend(self, query: str) -> list[str]:
        """The legacy frontend's metricFindQuery (requests from the browser)."""
        if match := re.fullmatch(r"metrics\((.*)\)", query):
            return await self._suggest("metrics", match[1])
        if match := re.fullmatch(r"tag_names\((.*)\)", query):
            body = await self._ok(f"/api/search/lookup?m={_enc(match[1])}&limit=1000")
            return _unique(key for r in body["results"] for key in r["tags"])
        if match := re.fullmatch(r"tag_values\((.*?),\s?(.*)\)", query):
            key, *rest = [k.strip() for k in match[2].split(",")]
            m = f"{match[1]}{{{','.join([key + '=*', *rest])}}}"
            body = await self._ok(f"/api/search/lookup?m={_enc(m)}&limit={self.limit}")
            return _unique(r["tags"][key] for r in body["results"] if key in r["tags"])
        if match := re.fullmatch(r"suggest_tagk\((.*)\)", query):
            return await self._suggest("tagk", match[1])
        if match := re.fullmatch(r"suggest_tagv\((.*)\)", query):
            return await self._suggest("tagv", match[1])
        raise AssertionError(query)

    async def backend(self, query: str) -> list[str]:
        """The Go backend's resource handlers (query strings built by url.Values.Encode:
        keys sorted, values escaped; an unset lookupLimit is sent as 0)."""
        if match := re.fullmatch(r"tag_names\((.*)\)", query):
            body = await self._ok(f"/api/search/lookup?limit=1000&m={_go_escape(match[1])}")
            return sorted({key for r in body["results"] for key in r["tags"]})
        if match := re.fullmatch(r"tag_values\((.*?),\s?(.*)\)", query):
            key, *rest = [k.strip() for k in match[2].split(",")]
            m = f"{match[1]}{{{','.join([key + '=*', *rest])}}}"
            body = await self._ok(f"/api/search/lookup?limit=0&m={_go_escape(m)}")
            return sorted({r["tags"][key] for r in body["results"] if key in r["tags"]})
        return sorted(await self.frontend(query))

    async def _suggest(self, kind: str, prefix: str) -> list[str]:
        result: list[str] = await self._ok(
            f"/api/suggest?type={kind}&q={_enc(prefix)}&max={self.limit}"
        )
        return result

    async def _ok(self, raw: str) -> Any:
        status, body = await self.tsd.get(raw)
        assert status == 200, (raw, body)
        return body


def _enc(text: str) -> str:
    """encodeURIComponent."""
    return quote(text, safe="-_.!~*'()")


def _go_escape(text: str) -> str:
    """Go's url.QueryEscape."""
    return quote_plus(text, safe="-_.~")


VARIABLES = [
    pytest.param("metrics(sys.)", ["sys.cpu.user"], id="metrics"),
    pytest.param("metrics()", ["events.deploy", "net.bytes.in", "sys.cpu.user"], id="metrics_all"),
    pytest.param("tag_names(sys.cpu.user)", ["dc", "host"], id="tag_names"),
    pytest.param("tag_names(net.bytes.in)", ["host", "iface"], id="tag_names_other"),
    pytest.param("tag_values(sys.cpu.user, host)", ["web01", "web02", "web03"], id="tag_values"),
    pytest.param("tag_values(sys.cpu.user, host, dc=lga)", ["web01", "web02"], id="tag_values_kv"),
    pytest.param("tag_values(sys.cpu.user,dc)", ["lga", "sjc"], id="tag_values_no_space"),
    pytest.param("suggest_tagk(ho)", ["host"], id="suggest_tagk"),
    pytest.param("suggest_tagv(web0)", ["web01", "web02", "web03"], id="suggest_tagv"),
]


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@pytest.mark.parametrize("keys", TRACKING)
@pytest.mark.parametrize(("query", "expected"), VARIABLES)
async def test_template_variables(
    make_tsd: MakeTsd,
    http: aiohttp.ClientSession,
    keys: dict[str, str],
    query: str,
    expected: list[str],
) -> None:
    tsd = await start(make_tsd, http, **keys)
    await load(tsd)
    variables = GrafanaVariables(tsd)
    assert sorted(await variables.frontend(query)) == expected
    assert await variables.backend(query) == expected


async def test_template_variables_survive_a_restart(
    tmp_path: Path, http: aiohttp.ClientSession, auth_keys: dict[str, str]
) -> None:
    """The series index is in storage: a restarted TSD answers before any new write."""
    keys = {
        **auth_keys,
        "tsd.network.bind": "127.0.0.1",
        "tsd.network.port": "0",
        "tsd.storage.data_dir": str(tmp_path / "data"),
        "tsd.core.auto_create_metrics": "true",
    }
    first = Daemon(build_config(keys))
    await first.start()
    try:
        await load(Tsd(first, http))
    finally:
        await first.stop()
    second = Daemon(build_config(keys))
    await second.start()
    try:
        variables = GrafanaVariables(Tsd(second, http))
        assert await variables.backend("tag_values(sys.cpu.user, host)") == [
            "web01",
            "web02",
            "web03",
        ]
    finally:
        await second.stop()


# -- panel queries ----------------------------------------------------------------------------


def cpu(host: str, i: int) -> int:
    return HOSTS[host][1] + i


def ds_avg(host: str, bucket_s: int, start: int = T0) -> dict[int, float]:
    """The per-host average of each bucket_s bucket."""
    buckets: dict[int, list[int]] = {}
    for i in range(POINTS):
        ts = T0 + STEP * i
        buckets.setdefault(ts - (ts - start) % bucket_s, []).append(cpu(host, i))
    return {ts: sum(v) / len(v) for ts, v in buckets.items()}


async def test_panel_tsdb_2_1_two_targets_in_one_request(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    """tsdbVersion 1 (<=2.1): tags only, no dropResets; results matched by metric and tags."""
    tsd = await start(make_tsd, http)
    await load(tsd)
    body = {
        "start": T0 * 1000,
        "end": (T0 + 179) * 1000,
        "queries": [
            {"metric": "sys.cpu.user", "aggregator": "avg", "downsample": "30s-avg",
             "tags": {"host": "web01|web02"}},
            {"metric": "net.bytes.in", "aggregator": "sum", "rate": True,
             "rateOptions": {"counter": False}, "downsample": "30s-sum", "tags": {}},
        ],
        "msResolution": False,
        "globalAnnotations": True,
    }  # fmt: skip
    status, series = await tsd.post("/api/query", body)
    assert status == 200
    by_target = {(s["metric"], tuple(sorted(s["tags"].items()))): s for s in series}
    for host in ("web01", "web02"):
        got = by_target[("sys.cpu.user", (("dc", "lga"), ("host", host)))]
        assert {int(k): v for k, v in got["dps"].items()} == ds_avg(host, 30)
        assert got["aggregateTags"] == []
    net = by_target[("net.bytes.in", (("host", "web01"), ("iface", "eth0")))]
    # 30s sums of a counter growing 1000 per 15 s grow 4000 per 30 s: 133.33/s.
    assert list(net["dps"].values()) == pytest.approx([4000 / 30] * 5)
    # Global annotations come with every series (legacy annotations read data[0]).
    assert [n["description"] for n in series[0]["globalAnnotations"]] == ["maintenance"]


async def test_panel_tsdb_2_2_filters_and_grafana_keys(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    """tsdbVersion 2: filters with group-by, the whole cloned target with Grafana's own keys
    (refId, datasource, hide, ...), tags and filters both present."""
    tsd = await start(make_tsd, http)
    await load(tsd)
    body = {
        "start": T0 * 1000,
        "queries": [
            {"refId": "A", "datasource": {"type": "opentsdb", "uid": "tsd1"}, "hide": False,
             "metric": "sys.cpu.user", "aggregator": "sum", "alias": "$tag_host",
             "downsampleAggregator": "avg", "downsampleFillPolicy": "none",
             "downsampleInterval": "", "disableDownsampling": False, "shouldComputeRate": False,
             "isCounter": False, "counterMax": "", "counterResetValue": "", "tags": {},
             "filters": [
                 {"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": True},
                 {"type": "literal_or", "tagk": "dc", "filter": "lga|sjc", "groupBy": False},
             ],
             "downsample": "1m-avg"},
        ],
        "msResolution": False,
        "globalAnnotations": True,
    }  # fmt: skip
    status, series = await tsd.post("/api/query", body)
    assert status == 200, series
    assert sorted(s["tags"]["host"] for s in series) == ["web01", "web02", "web03"]
    for s in series:
        assert {int(k): v for k, v in s["dps"].items()} == ds_avg(s["tags"]["host"], 60)


async def test_panel_tsdb_2_3_show_query_and_ms_resolution(
    make_tsd: MakeTsd, http: aiohttp.ClientSession
) -> None:
    """tsdbVersion 3: ``showQuery`` (Grafana maps series to targets by ``query.index``),
    millisecond resolution, counter rate with counterMax, a fill policy, explicitTags."""
    tsd = await start(make_tsd, http)
    await load(tsd)
    body = {
        "start": T0 * 1000,
        "end": (T0 + 179) * 1000,
        "queries": [
            {"refId": "A", "metric": "sys.cpu.user", "aggregator": "max",
             "downsample": "1m-max", "tags": {"host": "*"}},
            {"refId": "B", "metric": "net.bytes.in", "aggregator": "sum",
             "downsampleAggregator": "max", "downsampleFillPolicy": "zero",
             "downsampleInterval": "30s", "tags": {"host": "*", "iface": "eth0"},
             "shouldComputeRate": True, "isCounter": True, "counterMax": "65535",
             "explicitTags": True, "rate": True,
             "rateOptions": {"counter": True, "counterMax": 65535, "dropResets": False},
             "downsample": "30s-max-zero"},
        ],
        "msResolution": True,
        "globalAnnotations": True,
        "showQuery": True,
    }  # fmt: skip
    status, series = await tsd.post("/api/query", body)
    assert status == 200, series
    indexes = sorted((s["query"]["index"], s["metric"]) for s in series)
    assert indexes == [(0, "sys.cpu.user")] * 3 + [(1, "net.bytes.in")]
    for s in series:
        assert all(len(k) == 13 for k in s["dps"])  # ms keys
    web01 = next(s for s in series if s["tags"].get("host") == "web01" and s["query"]["index"] == 0)
    assert web01["dps"][str(T0 * 1000)] == cpu("web01", 3)


@pytest.mark.parametrize(
    ("path", "unit"),
    [
        pytest.param("/api/query?arrays=true", 1, id="backend_2_4_seconds"),
        pytest.param("/api/query", 1000, id="old_backend_milliseconds"),
    ],
)
async def test_panel_go_backend(
    make_tsd: MakeTsd, http: aiohttp.ClientSession, path: str, unit: int
) -> None:
    """The Go backend: one sub-query per request, keys sorted; tsdbVersion 4 adds
    ``?arrays=true`` and reads ``dps`` as [[ts, value], ...]. Before Sep 2025 it sent ms."""
    tsd = await start(make_tsd, http)
    await load(tsd)
    body = {
        "start": T0 * unit,
        "end": (T0 + 179) * unit,
        "queries": [
            {"aggregator": "sum", "downsample": "1m-avg", "explicitTags": True,
             "filters": [{"filter": "web01|web02", "groupBy": False, "tagk": "host",
                          "type": "literal_or"},
                         {"filter": "*", "groupBy": True, "tagk": "dc", "type": "wildcard"}],
             "metric": "sys.cpu.user"},
        ],
    }  # fmt: skip
    status, series = await tsd.post(path, body)
    assert status == 200, series
    assert len(series) == 1
    assert series[0]["tags"] == {"dc": "lga"}
    assert series[0]["aggregateTags"] == ["host"]
    expected = {ts: ds_avg("web01", 60)[ts] + ds_avg("web02", 60)[ts] for ts in ds_avg("web01", 60)}
    dps = series[0]["dps"]
    if "arrays" in path:
        assert dps == [[ts, v] for ts, v in sorted(expected.items())]
    else:
        assert {int(k): v for k, v in dps.items()} == expected
    assert "globalAnnotations" not in series[0]


# -- annotations ------------------------------------------------------------------------------


async def test_annotation_queries(make_tsd: MakeTsd, http: aiohttp.ClientSession) -> None:
    """Grafana's annotation rows: a sum query over the target metric; the frontend reads
    ``annotations`` (or ``globalAnnotations``) of ``data[0]``: description and startTime."""
    tsd = await start(make_tsd, http)
    await load(tsd)
    legacy = {
        "start": T0 * 1000,
        "queries": [{"aggregator": "sum", "metric": "events.deploy"}],
        "msResolution": False,
        "globalAnnotations": True,
    }
    status, series = await tsd.post("/api/query", legacy)
    assert status == 200
    assert [(n["description"], n["startTime"]) for n in series[0]["annotations"]] == [
        ("deploy v1", T0 + 60)
    ]
    assert [(n["description"], n["startTime"]) for n in series[0]["globalAnnotations"]] == [
        ("maintenance", T0 + 90)
    ]
    # The Go backend sends no globalAnnotations: series notes only.
    backend = {
        "start": T0,
        "end": T0 + 3599,
        "queries": [{"aggregator": "sum", "metric": "events.deploy"}],
    }
    status, series = await tsd.post("/api/query", backend)
    assert status == 200
    assert [n["description"] for n in series[0]["annotations"]] == ["deploy v1"]
    assert not series[0].get("globalAnnotations")
    # Global notes alone, as /api/annotations lists them.
    status, notes = await tsd.get(f"/api/annotations?start_time={T0}&end_time={T0 + 3600}")
    assert status == 200
    assert [n["description"] for n in notes] == ["maintenance"]


def _unique(values: Any) -> list[str]:
    return list(dict.fromkeys(values))
