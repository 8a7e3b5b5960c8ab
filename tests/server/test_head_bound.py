"""``tsd.storage.head.max_bytes`` is a bound that holds, seen from outside: a daemon process
fed a burst of new series over four telnet connections, its head.bytes sampled on
/api/stats the whole time.

The shape of the run that passed the bound (a million new series with two points each over
four telnet connections: head.bytes about 355 MB against the default 256 MiB), scaled down
to run in seconds: an 8 MiB bound and 100,000 series, whose rows take about 3.5 times the
bound. The head must stay within its bound (slack: none; see HeadSink.room) and every point
must be readable afterwards (rows written out early take their second point as a merge)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.daemon_process import daemon_process, free_port, http, stat_value

BOUND = 8 << 20
SERIES = 100_000
CONNECTIONS = 4
T0 = 1356998400  # an hour boundary
STEP_S = 10


async def send(port: int, lines: list[bytes]) -> None:
    """Write ``lines`` over one telnet connection, then wait for the daemon's answer to
    ``version`` (the lines before it are taken by then)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for start in range(0, len(lines), 1000):
        writer.write(b"".join(lines[start : start + 1000]))
        await writer.drain()
    writer.write(b"version\n")
    await writer.drain()
    assert b"built at revision" in await asyncio.wait_for(reader.readline(), 120)
    writer.close()
    await writer.wait_closed()


def puts(step: int, part: int) -> list[bytes]:
    """One connection's share of the series' ``step``-th points (value: the series' number
    plus the step)."""
    stamp = T0 + step * STEP_S
    return [
        b"put hb.m %d %d host=h%d\n" % (stamp, n + step, n)
        for n in range(part, SERIES, CONNECTIONS)
    ]


@pytest.mark.slow  # a daemon in a subprocess and 200,000 points
def test_a_burst_of_new_series_keeps_head_bytes_within_the_bound(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "opentsdb.conf"
    conf.write_text(
        "\n".join(
            [
                "tsd.network.bind = 127.0.0.1",
                f"tsd.network.port = {port}",
                f"tsd.storage.data_dir = {tmp_path / 'data'}",
                "tsd.core.auto_create_metrics = true",
                f"tsd.storage.head.max_bytes = {BOUND}",
            ]
        )
        + "\n"
    )
    argv = [sys.executable, "-m", "tsd", "tsd", "--config", str(conf)]
    with daemon_process(argv, port=port, cwd=tmp_path, log=tmp_path / "tsd.log"):
        samples: list[int] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(stat_value(port, "tsd.head.bytes"))
                done.wait(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for step in range(2):
                lines = [puts(step, part) for part in range(CONNECTIONS)]

                async def burst(lines: list[list[bytes]] = lines) -> None:
                    await asyncio.gather(*(send(port, share) for share in lines))

                asyncio.run(burst())
        finally:
            done.set()
            sampler.join()
        assert len(samples) >= 20, samples
        assert max(samples) > BOUND // 2, samples
        assert max(samples) <= BOUND, (max(samples), BOUND)
        # the shape: the rows passed the bound several times over, and were sampled
        status, body = http(port, "/api/stats")
        (flushed,) = [
            int(r["value"])
            for r in json.loads(body)
            if r["metric"] == "tsd.head.flushed" and r["tags"].get("type") == "rows"
        ]
        assert flushed >= SERIES, flushed  # rows written out meanwhile
        # every point, read back (the last batches are in the head within a flush interval)
        expected = {str(T0 + s * STEP_S): (SERIES, sum(range(s, SERIES + s))) for s in range(2)}
        deadline = time.monotonic() + 30
        while (got := read_back(port)) != expected and time.monotonic() < deadline:
            time.sleep(0.5)
        assert got == expected


def read_back(port: int) -> dict[str, tuple[int, int]]:
    """Per timestamp, how many series had a point then, and the sum of their values."""
    got: dict[str, tuple[int, int]] = {}
    for aggregator in ("count", "sum"):
        path = f"/api/query?start={T0}&end={T0 + 60}&m={aggregator}:hb.m"
        status, body = http(port, path, timeout=60)
        assert status == 200, body[:500]
        (result,) = json.loads(body)
        for stamp, value in result["dps"].items():
            count, total = got.get(stamp, (0, 0))
            got[stamp] = (int(value), total) if aggregator == "count" else (count, int(value))
    return got
