"""POST /api/v1/write and /api/v1/read with hand-made requests (issue 30, items 1-3).

Requests are built with the protobuf runtime from full ``TimeSeries`` messages (labels as
embedded messages, as Prometheus sends them), snappy-compressed, and sent over a real
socket to an in-process daemon; what is stored is read back through /api/query and
through remote read.
"""

from __future__ import annotations

import errno
import math
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import cramjam
import pytest
import structlog

from tests.server.conftest import MakeTsd
from tests.server.test_auth import SECRETS, basic, bearer, users_file
from tsd.daemon import Daemon
from tsd.protocol.prom_wire import Label, ReadRequest, ReadResponse, TimeSeries, WriteRequest

T0 = 1_700_000_000_000
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
Labels = dict[str, str]


def write_body(series: list[tuple[Labels, list[tuple[int, float]]]]) -> bytes:
    request = WriteRequest()
    for labels, samples in series:
        full = TimeSeries()
        for name, value in labels.items():
            full.labels.add(name=name, value=value)
        for timestamp, number in samples:
            full.samples.add(timestamp=timestamp, value=number)
        request.timeseries.add().MergeFromString(full.SerializeToString())
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def read_body(matchers: list[tuple[int, str, str]], start: int, end: int) -> bytes:
    request = ReadRequest()
    query = request.queries.add(start_timestamp_ms=start, end_timestamp_ms=end)
    for kind, name, value in matchers:
        query.matchers.add(type=kind, name=name, value=value)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


EQ, NEQ, RE, NRE = 0, 1, 2, 3


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def write(http: aiohttp.ClientSession, daemon: Daemon, body: bytes, **headers: str) -> int:
    async with http.post(
        f"http://127.0.0.1:{daemon.port}/api/v1/write",
        data=body,
        headers={"Content-Encoding": "snappy", **headers},
    ) as reply:
        await reply.read()
        return reply.status


async def remote_read(
    http: aiohttp.ClientSession,
    daemon: Daemon,
    matchers: list[tuple[int, str, str]],
    start: int = T0 - 1000,
    end: int = T0 + 60_000,
) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    async with http.post(
        f"http://127.0.0.1:{daemon.port}/api/v1/read", data=read_body(matchers, start, end)
    ) as reply:
        raw = await reply.read()
        assert reply.status == 200, raw
        assert reply.headers["Content-Encoding"] == "snappy"
    response = ReadResponse()
    response.ParseFromString(bytes(cramjam.snappy.decompress_raw(raw)))
    (result,) = response.results
    return {
        tuple((label.name, label.value) for label in series.labels): [
            (s.timestamp, s.value) for s in series.samples
        ]
        for series in result.timeseries
    }


async def query(http: aiohttp.ClientSession, daemon: Daemon, metric: str) -> list[dict[str, Any]]:
    body = {
        "start": T0 - 1000,
        "end": T0 + 60_000,
        "msResolution": True,
        "queries": [{"aggregator": "none", "metric": metric}],
    }
    async with http.post(f"http://127.0.0.1:{daemon.port}/api/query", json=body) as reply:
        assert reply.status == 200, await reply.text()
        answer: list[dict[str, Any]] = await reply.json()
        return answer


async def metrics_text(http: aiohttp.ClientSession, daemon: Daemon) -> str:
    async with http.get(f"http://127.0.0.1:{daemon.port}/metrics") as reply:
        return await reply.text()


MAPPED = {
    "__name__": "prometheus_http_request_duration_seconds_bucket",
    "instance": "127.0.0.1:9090",
    "job": "prometheus",
    "le": "+Inf",
    "url": "http://localhost:9090/metrics",
    "version": "2.42.0+ds",
    "tags": "netgo,builtinassets",
    "city": "Zürich 中",
}


async def test_labels_are_mapped_and_come_back_exactly(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd(**{"tsd.storage.max_tags": "16"})
    samples = [(T0, 1.0), (T0 + 1000, 0.1), (T0 + 2000, -2.5e-300)]
    assert await write(http, daemon, write_body([(MAPPED, samples)])) == 204
    (series,) = await query(http, daemon, "prometheus_http_request_duration_seconds_bucket")
    assert series["tags"] == {
        "instance": "127.0.0.1_.3A9090",
        "job": "prometheus",
        "le": "_.2BInf",
        "url": "http_.3A//localhost_.3A9090/metrics",
        "version": "2.42.0_.2Bds",
        "tags": "netgo_.2Cbuiltinassets",
        "city": "Zürich_.20_.E4_.B8_.AD",
    }
    assert [(int(t), v) for t, v in series["dps"].items()] == samples
    found = await remote_read(http, daemon, [(EQ, "__name__", MAPPED["__name__"])])
    assert found == {tuple(sorted(MAPPED.items())): samples}


async def test_allow_specialchars_stores_names_as_they_are(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd(**{"tsd.core.tag.allow_specialchars": ":+"})
    labels = {"__name__": "up", "instance": "h:1", "le": "+Inf"}
    assert await write(http, daemon, write_body([(labels, [(T0, 1.0)])])) == 204
    (series,) = await query(http, daemon, "up")
    assert series["tags"] == {"instance": "h:1", "le": "+Inf"}
    found = await remote_read(http, daemon, [(EQ, "__name__", "up")])
    assert found == {tuple(sorted(labels.items())): [(T0, 1.0)]}


async def test_nonfinite_samples_are_counted_and_the_rest_stored(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd()
    labels = {"__name__": "summary", "job": "j"}
    samples = [(T0, 1.0), (T0 + 1, math.nan), (T0 + 2, STALE), (T0 + 3, math.inf), (T0 + 4, 2.0)]
    assert await write(http, daemon, write_body([(labels, samples)])) == 204
    # the same series again, known now (the cached path)
    assert await write(http, daemon, write_body([(labels, [(T0 + 5, -math.inf)])])) == 204
    found = await remote_read(http, daemon, [(EQ, "__name__", "summary")])
    assert found == {tuple(sorted(labels.items())): [(T0, 1.0), (T0 + 4, 2.0)]}
    text = await metrics_text(http, daemon)
    assert 'tsd_prometheus_write_skipped_total{reason="nan"} 1.0' in text
    assert 'tsd_prometheus_write_skipped_total{reason="stale"} 1.0' in text
    assert 'tsd_prometheus_write_skipped_total{reason="inf"} 2.0' in text
    assert 'tsd_ingest_errors_total{protocol="prometheus"} 0.0' in text
    assert 'tsd_ingest_points_total{protocol="prometheus"} 2.0' in text


async def test_as_many_samples_as_series_but_not_one_each(make_tsd: MakeTsd, http) -> None:
    """A series without samples (an exemplar's) beside one with two: as many samples as
    series, yet each sample is stored under its own series, new or known."""
    daemon = await make_tsd()
    empty = {"__name__": "m", "job": "exemplars"}
    two = {"__name__": "m", "job": "two"}
    one = {"__name__": "m", "job": "one"}
    assert await write(http, daemon, write_body([(one, [(T0, 0.5)])])) == 204
    body = write_body([(one, [(T0 + 1, 1.5)]), (empty, []), (two, [(T0, 1.0), (T0 + 1, 2.0)])])
    assert await write(http, daemon, body) == 204  # "two" new
    body = write_body([(two, [(T0 + 2, 3.0), (T0 + 3, 4.0)]), (empty, []), (one, [(T0 + 2, 2.5)])])
    assert await write(http, daemon, body) == 204  # every series known but the empty one
    found = await remote_read(http, daemon, [(EQ, "__name__", "m")])
    assert found == {
        tuple(sorted(one.items())): [(T0, 0.5), (T0 + 1, 1.5), (T0 + 2, 2.5)],
        tuple(sorted(two.items())): [(T0, 1.0), (T0 + 1, 2.0), (T0 + 2, 3.0), (T0 + 3, 4.0)],
    }


async def test_a_label_made_to_end_like_a_sample_does_not_take_one(make_tsd: MakeTsd, http) -> None:
    """A series without samples whose last label value ends with the bytes of the next
    series' first sample (that series has two): the bytes line up as a sample per series,
    yet the first key is not whole fields (tsd.protocol.prom_wire.decode_key), so the
    request is read whole and each sample lands in its own series."""
    crafted = T0 + 3_332_162  # a sample of it (value 0.0 left out) is valid UTF-8
    alone = TimeSeries()
    alone.samples.add(timestamp=crafted)
    field = alone.SerializeToString()  # the sample's field, as the runtime writes it
    bait = {"__name__": "m", "job": "bait" + field.decode()}
    two = {"__name__": "m", "job": "two"}
    known = {"__name__": "m", "job": "known"}
    daemon = await make_tsd()
    assert await write(http, daemon, write_body([(known, [(T0, 1.0)])])) == 204
    body = write_body([(known, [(T0 + 1, 2.0)]), (bait, []), (two, [(crafted, 0.0), (T0, 3.0)])])
    assert await write(http, daemon, body) == 204
    found = await remote_read(http, daemon, [(EQ, "__name__", "m")], end=crafted + 1)
    assert found == {
        tuple(sorted(known.items())): [(T0, 1.0), (T0 + 1, 2.0)],
        tuple(sorted(two.items())): [(T0, 3.0), (crafted, 0.0)],
    }


async def test_a_label_that_is_not_utf8_is_refused_alone(make_tsd: MakeTsd, http) -> None:
    """A label value that is not UTF-8 (a protobuf ``string`` must be) refuses its series
    only, whether it has a sample or none beside a series with two."""
    daemon = await make_tsd()
    good = {"__name__": "m", "job": "good"}
    label = Label(name="job", value="X").SerializeToString()

    def with_bad(samples: list[tuple[int, float]], good_samples: list[tuple[int, float]]) -> bytes:
        request = WriteRequest()
        bad = request.timeseries.add()
        bad.labels.append(Label(name="__name__", value="m").SerializeToString())
        bad.labels.append(label.replace(b"X", b"\xff"))
        for timestamp, number in samples:
            bad.samples.add(timestamp=timestamp, value=number)
        series = request.timeseries.add()
        for name, value in good.items():
            series.labels.append(Label(name=name, value=value).SerializeToString())
        for timestamp, number in good_samples:
            series.samples.add(timestamp=timestamp, value=number)
        return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))

    assert await write(http, daemon, with_bad([(T0, 9.0)], [(T0, 1.0)])) == 204
    assert await write(http, daemon, with_bad([], [(T0 + 1, 2.0), (T0 + 2, 3.0)])) == 204
    found = await remote_read(http, daemon, [(EQ, "__name__", "m")])
    assert found == {tuple(sorted(good.items())): [(T0, 1.0), (T0 + 1, 2.0), (T0 + 2, 3.0)]}
    text = await metrics_text(http, daemon)
    assert 'tsd_prometheus_write_refused_total{reason="bad_label"} 1.0' in text


async def test_series_that_cannot_be_stored_do_not_fail_the_batch(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd(**{"tsd.storage.max_tags": "2"})
    good = {"__name__": "good", "job": "j", "empty": ""}
    body = write_body(
        [
            ({"__name__": "wide", "a": "1", "b": "2", "c": "3"}, [(T0, 1.0), (T0 + 1, 2.0)]),
            ({"job": "nameless"}, [(T0, 1.0)]),
            ({"__name__": "bare"}, [(T0, 1.0)]),
            (good, [(T0, 7.0)]),
            ({"__name__": "early", "job": "j"}, [(1000, 1.0)]),
        ]
    )
    with structlog.testing.capture_logs() as logs:
        assert await write(http, daemon, body) == 204
    found = await remote_read(http, daemon, [(RE, "__name__", ".+")], start=0)
    assert found == {(("__name__", "good"), ("job", "j")): [(T0, 7.0)]}
    text = await metrics_text(http, daemon)
    assert 'tsd_prometheus_write_refused_total{reason="too_many_labels"} 2.0' in text
    assert 'tsd_prometheus_write_refused_total{reason="no_metric_name"} 1.0' in text
    assert 'tsd_prometheus_write_refused_total{reason="no_labels"} 1.0' in text
    assert 'tsd_prometheus_write_refused_total{reason="bad_timestamp"} 1.0' in text
    assert 'tsd_ingest_errors_total{protocol="prometheus"} 5.0' in text
    (event,) = [e for e in logs if e["event"] == "prometheus.write_refused"]
    assert event["samples"] == 5
    assert "tsd.storage.max_tags (2)" in event["first"][0]


async def test_unknown_metrics_with_auto_create_off(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd(**{"tsd.core.auto_create_metrics": "false"})
    body = write_body([({"__name__": "new_metric", "job": "j"}, [(T0, 1.0)])])
    assert await write(http, daemon, body) == 204
    text = await metrics_text(http, daemon)
    assert 'tsd_prometheus_write_refused_total{reason="unknown_metric"} 1.0' in text
    assert 'tsd_ingest_errors_total{protocol="prometheus"} 1.0' in text


async def test_bad_bodies_are_400(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd()
    assert await write(http, daemon, b"not snappy at all") == 400
    not_protobuf = bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff"))
    assert await write(http, daemon, not_protobuf) == 400
    async with http.get(f"http://127.0.0.1:{daemon.port}/api/v1/write") as reply:
        assert reply.status == 405
    # the daemon still takes good requests
    good = write_body([({"__name__": "m", "job": "j"}, [(T0, 1.0)])])
    assert await write(http, daemon, good) == 204


async def test_read_matchers_have_prometheus_meaning(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd()
    series = [
        {"__name__": "a", "job": "x", "env": "prod"},
        {"__name__": "a", "job": "xa"},
        {"__name__": "b", "job": "x"},
        {"__name__": "c_total", "job": "y:1"},
    ]
    body = write_body([(labels, [(T0 + i, float(i))]) for i, labels in enumerate(series)])
    assert await write(http, daemon, body) == 204

    async def names(*matchers: tuple[int, str, str]) -> list[Labels]:
        found = await remote_read(http, daemon, list(matchers))
        return sorted((dict(key) for key in found), key=lambda d: sorted(d.items()))

    a_prod, a_xa, b_x, c_y = series
    assert await names((EQ, "__name__", "a"), (EQ, "env", "")) == [a_xa]
    assert await names((EQ, "__name__", "a"), (NEQ, "env", "prod")) == [a_xa]
    assert await names((RE, "job", "x")) == [a_prod, b_x]  # anchored: not "xa"
    assert await names((RE, "job", "x|xa"), (NRE, "env", "p.*")) == [a_xa, b_x]
    assert await names((RE, "__name__", "a|b"), (NRE, "job", "x")) == [a_xa]
    assert await names((RE, "__name__", ".*_total")) == [c_y]
    assert await names((EQ, "job", "y:1")) == [c_y]
    assert await names((EQ, "__name__", "nope")) == []
    assert await names((EQ, "__name__", "a"), (RE, "env", "")) == [a_xa]
    # the time range is honoured
    found = await remote_read(http, daemon, [(EQ, "__name__", "a")], start=T0 + 1, end=T0 + 1)
    assert list(found.values()) == [[(T0 + 1, 1.0)]]


async def test_bad_matchers_are_400(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd()
    for matcher in [(RE, "job", "("), (7, "job", "x")]:
        async with http.post(
            f"http://127.0.0.1:{daemon.port}/api/v1/read", data=read_body([matcher], 0, T0)
        ) as reply:
            assert reply.status == 400, matcher


async def test_remote_storage_needs_credentials_when_authentication_is_on(
    make_tsd: MakeTsd, http, tmp_path: Path
) -> None:
    daemon = await make_tsd(
        **{
            "tsd.core.authentication.enable": "true",
            "tsd.core.authentication.users_file": str(users_file(tmp_path)),
        }
    )
    body = write_body([({"__name__": "m", "job": "j"}, [(T0, 1.0)])])
    assert await write(http, daemon, body) == 401
    assert await write(http, daemon, body, **basic("reader")) == 403
    assert await write(http, daemon, body, **basic("writer")) == 204
    url = f"http://127.0.0.1:{daemon.port}/api/v1/read"
    request = read_body([(EQ, "__name__", "m")], 0, T0 + 1)
    async with http.post(url, data=request) as reply:
        assert reply.status == 401
    async with http.post(url, data=request, headers=bearer("reader")) as reply:
        assert reply.status == 200
    assert SECRETS


async def test_remote_read_is_bounded_by_the_query_limits(make_tsd: MakeTsd, http) -> None:
    daemon = await make_tsd(**{"tsd.query.limits.data_points.default": "5"})
    labels = {"__name__": "many", "job": "j"}
    body = write_body([(labels, [(T0 + i, float(i)) for i in range(20)])])
    assert await write(http, daemon, body) == 204
    async with http.post(
        f"http://127.0.0.1:{daemon.port}/api/v1/read",
        data=read_body([(EQ, "__name__", "many")], T0, T0 + 60_000),
    ) as reply:
        assert reply.status == 413, await reply.text()
    # a series under the limit reads as usual
    few = {"__name__": "few", "job": "j"}
    assert await write(http, daemon, write_body([(few, [(T0, 1.0), (T0 + 1, 2.0)])])) == 204
    found = await remote_read(http, daemon, [(EQ, "__name__", "few")])
    assert list(found.values()) == [[(T0, 1.0), (T0 + 1, 2.0)]]


async def test_a_full_disk_is_a_503_that_prometheus_retries(make_tsd: MakeTsd, http, monkeypatch):
    """The write-ahead log's writes fail as on a full disk (the fault injected as
    tests/server/test_disk_full.py does): 503, nothing acknowledged; once space returns the
    same request (Prometheus' retry) is stored."""
    from tests.server.test_disk_full import LogDisk
    from tsd.write.batch_writer import WriterLimits

    log_disk = LogDisk(monkeypatch)
    daemon = await make_tsd(writer_limits=WriterLimits(retry_delays_s=()))
    labels = {"__name__": "m", "job": "j"}
    assert await write(http, daemon, write_body([(labels, [(T0, 1.0)])])) == 204
    body = write_body([(labels, [(T0 + 1, 2.0)])])
    log_disk.failure = errno.ENOSPC
    assert await write(http, daemon, body) == 503
    log_disk.failure = None
    assert await write(http, daemon, body) == 204
    found = await remote_read(http, daemon, [(EQ, "__name__", "m")])
    assert found == {tuple(sorted(labels.items())): [(T0, 1.0), (T0 + 1, 2.0)]}


@pytest.mark.slow  # a daemon process, kill -9
async def test_a_204_means_the_log_holds_the_samples(tmp_path: Path) -> None:
    """Samples of known series are acknowledged once the write-ahead log holds them, before
    the head does: a kill -9 right after the 204s loses none of them."""
    import signal

    from tests.server.test_lifecycle import TsdProcess, read_store

    data_dir = tmp_path / "data"
    tsd = await TsdProcess.start(data_dir)
    series = [{"__name__": "m", "instance": f"h{n}:9100"} for n in range(50)]
    async with aiohttp.ClientSession() as session:

        async def send(timestamp: int) -> int:
            body = write_body(
                [(labels, [(timestamp, float(n))]) for n, labels in enumerate(series)]
            )
            async with session.post(
                f"http://127.0.0.1:{tsd.port}/api/v1/write",
                data=body,
                headers={"Content-Encoding": "snappy"},
            ) as reply:
                return reply.status

        assert await send(T0) == 204  # new series: resolved, then stored
        for second in range(1, 6):  # known series: the log's acknowledgement
            assert await send(T0 + second * 1000) == 204
    tsd.process.send_signal(signal.SIGKILL)
    assert await tsd.process.wait() == -signal.SIGKILL
    tsd = await TsdProcess.start(data_dir)
    assert await tsd.stop(signal.SIGTERM) == 0
    stored = sorted((p.timestamp_ms, p.value) for p in await read_store(data_dir))
    assert stored == sorted((T0 + s * 1000, float(n)) for s in range(6) for n in range(50))
