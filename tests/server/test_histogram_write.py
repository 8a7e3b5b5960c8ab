"""/api/histogram and the telnet ``histogram`` command on the embedded store: OpenTSDB
2.4.1's SimpleHistogram cells in the data table, and its answers to bad input
(src/tsd/HistogramDataPointRpc.java, src/core/SimpleHistogram.java). The same inputs are
compared byte for byte with OpenTSDB in tests/hbase/test_histogram_parity.py."""

from __future__ import annotations

import base64
import struct
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient
from tsd.daemon import Daemon
from tsd.storage.base import ScanSpec

CODECS = '{"net.opentsdb.core.SimpleHistogramDecoder": 3}'
HOUR = 1795478400
T = HOUR + 65


async def histo_tsd(make_tsd: MakeTsd) -> Daemon:
    return await make_tsd(**{"tsd.core.histograms.config": CODECS})


async def cells(daemon: Daemon) -> list[tuple[bytes, bytes]]:
    found = []
    async for row in daemon.storage.scan("tsdb", ScanSpec()):
        found += [(c.qualifier, c.value) for c in row.cells]
    return found


def simple_bytes(buckets: list[tuple[float, float, int]], under: int, over: int) -> bytes:
    """SimpleHistogram's bytes, written out by hand (Kryo varlongs of small counts are one
    byte each)."""
    out = bytes([3]) + struct.pack(">h", len(buckets))
    for low, high, count in buckets:
        out += struct.pack(">ff", low, high) + bytes([count])
    return out + bytes([under, over])


async def post(daemon: Daemon, body: Any, query: str = "") -> tuple[int, Any]:
    url = f"http://127.0.0.1:{daemon.port}/api/histogram{query}"
    async with aiohttp.ClientSession() as http, http.post(url, data=orjson.dumps(body)) as reply:
        text = await reply.read()
        return reply.status, orjson.loads(text) if text else None


async def test_buckets_and_text_and_bytes_store_one_cell_each(make_tsd: MakeTsd) -> None:
    tsd = await histo_tsd(make_tsd)
    point = {
        "metric": "h.m",
        "timestamp": T,
        "tags": {"host": "a"},
        "buckets": {"1,2.5": 5, "0,1": 4},
        "underflow": 1,
        "overflow": 2,
    }
    assert await post(tsd, point) == (204, None)
    expected = simple_bytes([(0, 1, 4), (1, 2.5, 5)], 1, 2)
    assert await cells(tsd) == [(b"\x06\x00\x41", expected)]
    client = await TelnetClient.connect(tsd.port)
    await client.send(f"histogram h.m {T + 1} 0,1=4:1,2.5=5:u=1:o=2 host=a\n".encode())
    raw = base64.b64encode(expected[1:]).decode()
    await client.send(f"histogram h.m {T + 2} 3 {raw} host=a\n".encode())
    assert await client.sync() == []
    await client.close()
    assert await cells(tsd) == [(bytes([6, 0, 65 + i]), expected) for i in range(3)]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"buckets": None}, "Histogram buckets cannot be null or empty if 'value' is empty."),
        ({"buckets": {"1": 2}}, "Unable to parse bucket bounds: 1"),
        ({"buckets": {"a,2": 2}}, "Unable to parse value to a number"),
        ({"buckets": None, "value": "AAE=", "id": 300}, "Invalid type. Must be from 0 to 255."),
        ({"buckets": None, "value": "AAE=", "id": 7}, "No codec found mapped to ID 7"),
        (
            {"buckets": None, "value": "AAE=", "id": 3},
            "Byte array shorter than 6 bytes detected: [0, 1]",
        ),
        ({"tags": {}}, "Missing tags"),
    ],
)
async def test_refused_histograms(make_tsd: MakeTsd, fields: dict[str, Any], error: str) -> None:
    tsd = await histo_tsd(make_tsd)
    point = {"metric": "h.m", "timestamp": T, "tags": {"host": "a"}, "buckets": {"0,1": 1}}
    point = {k: v for k, v in {**point, **fields}.items() if v is not None}
    status, body = await post(tsd, [point], "?details")
    assert status == 400
    assert body["errors"][0]["error"] == error


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (
            "histogram h.m 1 2",
            "histogram: illegal argument: not enough arguments (need least 5, got 3)",
        ),
        (f"histogram h.m {T}  host=a", "histogram: illegal argument: empty histogram value"),
        (
            f"histogram h.m {T} 3 AAE= host=a",
            "histogram: HBase error: Byte array shorter than 6 bytes detected: [0, 1]",
        ),
        (
            f"histogram h.m {T} 4 AAEAAAAAAAAAAA== host=a",
            "histogram: HBase error: No codec found mapped to ID 4",
        ),
        # OpenTSDB answers nothing when the text form fails (its errback fails too)
        (f"histogram h.m {T} 0,1=x host=a", None),
        (f"histogram h.m {T} 0=1 host=a", None),
        (f"histogram h.m {T} 0,1 host=a", None),
    ],
)
async def test_telnet_replies(make_tsd: MakeTsd, line: str, reply: str | None) -> None:
    tsd = await histo_tsd(make_tsd)
    client = await TelnetClient.connect(tsd.port)
    await client.send(line.encode() + b"\n")
    assert await client.sync() == ([] if reply is None else [reply.encode()])
    await client.close()


async def test_histograms_not_configured(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd()
    status, body = await post(tsd, {"metric": "h.m"})
    assert status == 503
    assert body["error"]["message"].startswith("Histogram storage has not been enabled.")
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"histogram\n")
    assert await client.sync() == [
        b"histogram: illegal argument: Histogram storage has not been enabled. Check the "
        b"'tsd.core.histograms.config' configuration."
    ]
    await client.close()


async def test_percentiles_over_stored_histograms(make_tsd: MakeTsd) -> None:
    tsd = await histo_tsd(make_tsd)
    points = [
        {"metric": "h.q", "timestamp": HOUR + 10, "tags": {"host": "a"},
         "buckets": {"0,1": 1, "1,3": 1, "3,5": 2}},
        {"metric": "h.q", "timestamp": HOUR + 10, "tags": {"host": "b"},
         "buckets": {"0,1": 4}},
        {"metric": "h.q", "timestamp": HOUR + 70, "tags": {"host": "a"},
         "buckets": {"10,20": 3}},
    ]  # fmt: skip
    assert await post(tsd, points) == (204, None)
    answer = await query_hour(tsd, "sum:percentiles[50,90]:h.q")
    by_metric = {r["metric"]: r["dps"] for r in answer}
    # at +10 the group's sum: 0-1: 5, 1-3: 1, 3-5: 2 (8 in all): 50% in 0-1, 90% in 3-5
    assert by_metric == {
        "h.q_pct_50.0": {str(HOUR + 10): 0.5, str(HOUR + 70): 15.0},
        "h.q_pct_90.0": {str(HOUR + 10): 4.0, str(HOUR + 70): 15.0},
    }


async def test_histogram_buckets_as_series(make_tsd: MakeTsd) -> None:
    tsd = await histo_tsd(make_tsd)
    points = [
        {"metric": "h.b", "timestamp": HOUR + 10, "tags": {"host": "a"},
         "buckets": {"0,1": 1, "1,3": 2}, "overflow": 4},
        {"metric": "h.b", "timestamp": HOUR + 20, "tags": {"host": "a"},
         "buckets": {"1,3": 5, "3,5": 6}},
    ]  # fmt: skip
    assert await post(tsd, points) == (204, None)
    answer = await query_hour(tsd, "sum:show-histogram-buckets:h.b")
    # the buckets of the first histogram, underflow first, overflow last; integer counts
    t1, t2 = str(HOUR + 10), str(HOUR + 20)
    assert [(r["metric"], r["dps"]) for r in answer] == [
        ("h.b_UNDERFLOW", {t1: 0, t2: 0}),
        ("h.b_0.0_1.0", {t1: 1, t2: 0}),
        ("h.b_1.0_3.0", {t1: 2, t2: 5}),
        ("h.b_OVERFLOW", {t1: 4, t2: 0}),
    ]


async def query_hour(daemon: Daemon, m: str) -> Any:
    """The /api/query answer (200) for ``m`` over the test hour."""
    url = f"http://127.0.0.1:{daemon.port}/api/query"
    params = {"start": str(HOUR), "end": str(HOUR + 3599), "m": m}
    async with aiohttp.ClientSession() as http, http.get(url, params=params) as reply:
        assert reply.status == 200
        return orjson.loads(await reply.read())
