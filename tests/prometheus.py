"""Real Prometheus servers for the remote storage tests (Debian's ``prometheus`` package).

:func:`running_prometheus` starts one on a free loopback port with its own data directory
and configuration, waits until it is ready and stops it (by its pid) afterwards.
:func:`compare_range` reads every raw sample of a window from a Prometheus' HTTP API
(``{__name__=~".+"}[range]`` at one instant: the stored samples as Prometheus formats
them, so two servers' answers compare as text).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.hbase.opentsdb import stop_process
from tests.readiness import wait_http_ready

START_TIMEOUT_S = 60.0
#: how long the round-trip tests let Prometheus scrape and remote-write (a minute by hand:
#: TSD_PROM_SECONDS=60)
ROUND_TRIP_SECONDS = float(os.environ.get("TSD_PROM_SECONDS", "30"))

#: Series key -> [(timestamp text, value text)]
Samples = dict[tuple[tuple[str, str], ...], list[tuple[str, str]]]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Prometheus:
    port: int
    workdir: Path
    pid: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def api(self, path: str, **params: str) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}{path}", params=params) as response,
        ):
            body = await response.json()
            assert response.status == 200, body
            assert body["status"] == "success", body
            return body["data"]

    async def metric_value(self, expr: str) -> float:
        """The sum of an instant vector (0.0 when it is empty)."""
        data = await self.api("/api/v1/query", query=f"sum({expr}) or vector(0)")
        return float(data["result"][0]["value"][1])

    async def raw_samples(self, range_s: int, at: float, selector: str) -> Samples:
        """Every sample of ``selector`` in ``(at - range_s, at]``."""
        data = await self.api("/api/v1/query", query=f"{selector}[{range_s}s]", time=f"{at:.3f}")
        found: Samples = {}
        for series in data["result"]:
            key = tuple(sorted(series["metric"].items()))
            found[key] = [(f"{float(ts):.3f}", value) for ts, value in series["values"]]
        return found


@contextlib.asynccontextmanager
async def running_prometheus(
    workdir: Path, config: str, port: int = 0
) -> AsyncIterator[Prometheus]:
    """A Prometheus with ``config`` (YAML; ``{port}`` in it is its own port)."""
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus not found (apt-get install prometheus)")
    port = port or free_port()
    process, log = await asyncio.to_thread(_launch, binary, workdir, config, port)
    try:
        await _wait_ready(process, port, log)
        yield Prometheus(port, workdir, process.pid)
    finally:
        await stop_process(process)


def _launch(
    binary: str, workdir: Path, config: str, port: int
) -> tuple[subprocess.Popen[bytes], Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "prometheus.yml"
    conf.write_text(config.replace("{port}", str(port)))
    log = workdir / "prometheus.log"
    argv = [
        binary,
        f"--config.file={conf}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    return process, log


async def _wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    url = f"http://127.0.0.1:{port}/-/ready"
    await wait_http_ready("prometheus", url, process.poll, log, START_TIMEOUT_S, every_s=0.2)


def writer_config(tsd_port: int, *, auth: str = "") -> str:
    """Prometheus scraping itself and tsd's /metrics every second, remote writing to tsd
    (``auth``: extra YAML lines of the remote_write block, indented by 4)."""
    return f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{port}}"]
  - job_name: tsd
    static_configs:
      - targets: ["127.0.0.1:{tsd_port}"]
remote_write:
  - url: http://127.0.0.1:{tsd_port}/api/v1/write
    remote_timeout: 30s
{auth}    queue_config:
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
    metadata_config:
      send: false
"""


def reader_config(tsd_port: int, *, auth: str = "") -> str:
    """Prometheus with no target, reading only through tsd's remote read."""
    return f"""
global:
  scrape_interval: 1m
remote_read:
  - url: http://127.0.0.1:{tsd_port}/api/v1/read
    read_recent: true
    remote_timeout: 60s
{auth}"""


def finite(samples: Samples) -> Samples:
    """The samples whose value is finite (tsd stores no NaN nor infinity), series that
    keep some."""
    out: Samples = {}
    for key, values in samples.items():
        kept = [(ts, v) for ts, v in values if v not in ("NaN", "+Inf", "-Inf")]
        if kept:
            out[key] = kept
    return out


@dataclass
class RoundTrip:
    """What one remote write / remote read round trip saw."""

    #: every raw sample of the window in the writing Prometheus' own storage
    local: Samples
    #: the same window read by a second Prometheus through tsd's remote read
    remote: Samples
    #: the window: (at - range_s, at], in seconds
    at: float
    range_s: int
    #: the writer's counters at the end: samples sent, failed, dropped
    sent: float
    failed: float
    dropped: float


async def _counter(prometheus: Prometheus, name: str) -> float:
    data = await prometheus.api("/api/v1/query", query=f"sum({name})")
    assert data["result"], f"{name} is not exposed by this Prometheus"
    return float(data["result"][0]["value"][1])


async def remote_round_trip(tsd_port: int, workdir: Path, seconds: float) -> RoundTrip:
    """Prometheus scrapes itself and tsd every second for ``seconds`` and remote writes to
    tsd; once it has sent everything of the window, its raw samples are read from it, and a
    second Prometheus, with only remote_read to tsd, reads the same window."""
    selector = '{__name__=~".+"}'
    async with running_prometheus(workdir / "writer", writer_config(tsd_port)) as writer:
        started = time.time()
        await asyncio.sleep(seconds)
        at = time.time() - 3.0
        range_s = int(at - started) - 2
        deadline = time.monotonic() + 60
        name = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"
        while await _counter(writer, name) < at + 1.5:
            assert time.monotonic() < deadline, "remote write did not catch up in 60 s"
            await asyncio.sleep(0.5)
        local = await writer.raw_samples(range_s, at, selector)
        sent = await _counter(writer, "prometheus_remote_storage_samples_total")
        failed = await _counter(writer, "prometheus_remote_storage_samples_failed_total")
        dropped = await _counter(writer, "prometheus_remote_storage_samples_dropped_total")
    async with running_prometheus(workdir / "reader", reader_config(tsd_port)) as reader:
        remote = await reader.raw_samples(range_s, at, selector)
    return RoundTrip(local, remote, at, range_s, sent, failed, dropped)


async def query_api_samples(
    base_url: str,
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]],
    start_ms: int,
    end_ms: int,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]]:
    """What an OpenTSDB-style /api/query (tsd's or OpenTSDB's) answers for the series of
    ``expected`` (OpenTSDB names), raw (``none``), in [start_ms, end_ms]."""
    metrics = sorted({metric for metric, _ in expected})
    found: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]] = {}
    async with aiohttp.ClientSession() as session:
        for first in range(0, len(metrics), 50):
            body = {
                "start": start_ms,
                "end": end_ms,
                "msResolution": True,
                "queries": [
                    {"aggregator": "none", "metric": metric}
                    for metric in metrics[first : first + 50]
                ],
            }
            async with session.post(f"{base_url}/api/query", json=body) as response:
                answer = await response.json()
                assert response.status == 200, answer
            for series in answer:
                key = (series["metric"], tuple(sorted(series["tags"].items())))
                found[key] = sorted((int(ts), float(v)) for ts, v in series["dps"].items())
    return found


OpenTsdbSamples = dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]]


def as_opentsdb(samples: Samples, special_chars: str = "", max_tags: int = 16) -> OpenTsdbSamples:
    """Prometheus' samples under the names tsd stores them with (tsd's mapping)."""
    from tsd.protocol.prom_labels import LabelMapper, MappedSeries

    mapper = LabelMapper(special_chars, max_tags)
    out: OpenTsdbSamples = {}
    for labels, values in samples.items():
        mapped = mapper.map_series(labels)
        assert isinstance(mapped, MappedSeries), (labels, mapped)
        out[(mapped.metric, mapped.tags)] = [
            (round(float(ts) * 1000), float(value)) for ts, value in values
        ]
    return out


def window_ms(trip: RoundTrip) -> tuple[int, int]:
    """The round trip's window as an /api/query range (both ends included)."""
    return round((trip.at - trip.range_s) * 1000) + 1, round(trip.at * 1000)


def check_round_trip(trip: RoundTrip, queried: OpenTsdbSamples) -> None:
    """The acceptance: nothing failed or dropped, the remote read equals the local finite
    samples, and so does /api/query (``queried``) under the mapped names."""
    assert trip.sent > 0
    assert trip.failed == 0
    assert trip.dropped == 0
    local = finite(trip.local)
    print(
        f"round trip: {len(local)} series, {sum(map(len, local.values()))} finite samples"
        f" in {trip.range_s} s ({len(trip.local) - len(local)} series of NaN only),"
        f" {trip.sent:.0f} samples sent, {trip.failed:.0f} failed, {trip.dropped:.0f} dropped"
    )
    assert len(local) > 100, len(local)
    # series whose labels had to be mapped: instance="127.0.0.1:port" in every one
    assert all(":" in dict(key)["instance"] for key in local)
    assert any(dict(key).get("le") == "+Inf" for key in local)
    assert set(trip.remote) == set(local), (
        sorted(set(local) - set(trip.remote))[:5],
        sorted(set(trip.remote) - set(local))[:5],
    )
    for key, values in local.items():
        assert trip.remote[key] == values, key
    expected = as_opentsdb(local)
    assert set(queried) >= set(expected), sorted(set(expected) - set(queried))[:5]
    for name, points in expected.items():
        assert queried[name] == points, name
