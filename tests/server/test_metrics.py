"""GET /metrics: Prometheus' text format, read back with prometheus-client's own parser, and
its figures moving as points and queries arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.server.support import TelnetClient
from tsd.daemon import Daemon
from tsd.stats import Histogram

T = 1_795_237_078


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Scrape:
    """One scrape: every sample by (name, labels) and every family's type."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            assert family.name not in self.types, f"family {family.name} twice"
            self.types[family.name] = family.type
            for sample in family.samples:
                self._add(sample)

    def _add(self, sample: Sample) -> None:
        key = (sample.name, frozenset(sample.labels.items()))
        assert key not in self.samples, f"sample {key} twice"
        self.samples[key] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(http: aiohttp.ClientSession, daemon: Daemon) -> Scrape:
    async with http.get(f"http://127.0.0.1:{daemon.port}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return Scrape(await response.text())


async def test_metrics_parse_and_type_every_family(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    first = await scrape(http, tsd)
    assert first.types["tsd_ingest_points"] == "counter"
    assert first.types["tsd_uid_cache_hit"] == "counter"  # a gauge reading a count
    assert first.types["tsd_uid_cache_size"] == "gauge"
    assert first.types["tsd_writer_pending_cells"] == "gauge"
    # one stat name holding a gauge and counters becomes two families
    assert first.types["tsd_connectionmgr_connections_current"] == "gauge"
    assert first.types["tsd_connectionmgr_connections"] == "counter"
    assert first.types["tsd_storage_latency_seconds"] == "histogram"
    assert first.types["process_cpu_seconds"] == "counter"
    assert first.value("tsd_connectionmgr_connections_current", type="open") >= 1


async def test_metrics_move_with_points_and_queries(
    tsd: Daemon, http: aiohttp.ClientSession
) -> None:
    base = f"http://127.0.0.1:{tsd.port}"
    before = await scrape(http, tsd)

    body = [
        {"metric": "sys.m", "timestamp": T + i, "value": i, "tags": {"h": "a"}} for i in range(3)
    ]
    body.append({"metric": "sys.m", "timestamp": T, "value": "x", "tags": {"h": "a"}})
    async with http.post(f"{base}/api/put?sync", data=orjson.dumps(body)) as response:
        assert response.status == 400  # one bad point
    client = await TelnetClient.connect(tsd.port)
    await client.send(
        b"put sys.m %d 7 h=b\nput sys.m %d 8 h=b\nput sys.m nope 1 h=b\n" % (T, T + 1)
    )
    replies = await client.sync()
    await client.close()
    assert len(replies) == 1
    assert replies[0].startswith(b"put: invalid value")
    await tsd.writer.flush()
    if tsd.writer.head is not None:
        await tsd.writer.head.flush_all()  # the head's rows reach storage (a put)

    async with http.get(f"{base}/api/query?start={T - 10}&end={T + 10}&m=sum:sys.m") as r:
        assert r.status == 200
    async with http.get(f"{base}/api/query?start={T - 10}&m=sum:no.such.metric") as r:
        assert r.status == 400

    after = await scrape(http, tsd)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("tsd_ingest_points_total", protocol="http") == 3
    assert moved("tsd_ingest_errors_total", protocol="http") == 1
    assert moved("tsd_ingest_points_total", protocol="telnet") == 2
    assert moved("tsd_ingest_errors_total", protocol="telnet") == 1
    assert moved("tsd_datapoints_added_total", type="all") == 5
    assert moved("tsd_datapoints_stored_total", type="all") == 5
    assert moved("tsd_writer_batch_latency_seconds_count") >= 1
    assert moved("tsd_http_query_success_total") == 1
    assert moved("tsd_http_query_invalid_requests_total") == 1
    assert moved("tsd_http_query_latency_seconds_count", outcome="success") == 1
    assert moved("tsd_http_query_latency_seconds_count", outcome="invalid_requests") == 1
    assert after.value("tsd_http_query_latency_seconds_sum", outcome="success") > 0
    # points reach storage as puts, or (the embedded head's write-out) as one mutate
    assert (
        moved("tsd_storage_calls_total", op="put") + moved("tsd_storage_calls_total", op="mutate")
        >= 1
    )
    assert moved("tsd_storage_calls_total", op="scan") >= 1
    # four new UID names (sys.m, h, a, b): one check-and-put each (its forward mapping)
    assert moved("tsd_storage_check_and_puts_total") == 4
    assert moved("tsd_storage_latency_seconds_count", op="scan") == moved(
        "tsd_storage_calls_total", op="scan"
    )
    assert moved("tsd_uid_cache_miss_total", kind="metrics") >= 1
    buckets = [
        value
        for (name, labels), value in after.samples.items()
        if name == "tsd_http_query_latency_seconds_bucket" and ("outcome", "success") in labels
    ]
    assert max(buckets) == 1
    assert buckets == sorted(buckets)


def test_histogram_buckets_are_upper_bounds() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 3.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 4), (float("inf"), 5)]
    assert histogram.count == 5
    assert histogram.sum == pytest.approx(4.65)


async def test_metrics_refuses_other_methods(tsd: Daemon, http: aiohttp.ClientSession) -> None:
    async with http.post(f"http://127.0.0.1:{tsd.port}/metrics") as response:
        assert response.status == 405
