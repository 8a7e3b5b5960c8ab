"""Prometheus' remote write and remote read against a real Prometheus (issue 30, item 4),
on the embedded store.

One Prometheus (Debian's package) scrapes itself and the daemon's /metrics every second
and remote writes to the daemon; a second one, with nothing but remote_read to the daemon,
then answers the same PromQL over the window: both give exactly the same raw samples (NaN
ones, which tsd does not store, aside), and so does the daemon's /api/query under the
mapped names. ``TSD_PROM_SECONDS`` sets the window (30 s by default; the issue's minute
with 60).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prometheus import (
    ROUND_TRIP_SECONDS,
    as_opentsdb,
    check_round_trip,
    finite,
    prometheus_binary,
    query_api_samples,
    remote_round_trip,
    window_ms,
)
from tests.server.conftest import MakeTsd

SECONDS = ROUND_TRIP_SECONDS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(SECONDS + 150, method="thread"),
    pytest.mark.skipif(prometheus_binary() is None, reason="prometheus is not installed"),
]


async def test_remote_write_then_remote_read_gives_the_same_samples(
    make_tsd: MakeTsd, tmp_path: Path
) -> None:
    daemon = await make_tsd(**{"tsd.storage.max_tags": "16"})
    trip = await remote_round_trip(daemon.port, tmp_path, SECONDS)
    start_ms, end_ms = window_ms(trip)
    url = f"http://127.0.0.1:{daemon.port}"
    queried = await query_api_samples(url, as_opentsdb(finite(trip.local)), start_ms, end_ms)
    check_round_trip(trip, queried)
    registry = daemon.registry
    assert registry.counter("ingest.errors", protocol="prometheus").value == 0
    assert registry.counter("ingest.points", protocol="prometheus").value > 0
