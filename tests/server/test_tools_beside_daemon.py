"""Read-only tools beside a running daemon on the same embedded store: ``tsdb query`` and
``tsdb scan`` open it read-only, so they answer while the daemon holds it for writing."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.server.conftest import MakeTsd
from tests.tools.toolkit import tsdb

pytestmark = pytest.mark.slow  # the CLI in subprocesses

HOUR = 1_356_998_400


async def test_query_and_scan_beside_a_running_daemon(make_tsd: MakeTsd, tmp_path: Path) -> None:
    """Both open the embedded store read-only: they answer while the daemon holds it."""
    daemon = await make_tsd()
    body = [
        {"metric": "live.m", "timestamp": HOUR + i, "value": i, "tags": {"h": "a"}}
        for i in range(3)
    ]
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=body) as response,
    ):
        assert response.status == 204
    data_dir = daemon.config.storage.data_dir
    query = await tsdb(
        tmp_path, "query", "--data-dir", data_dir, f"{HOUR}", f"{HOUR + 60}", "sum", "live.m"
    )
    assert query.code == 0, query.err
    assert query.out.splitlines() == [f"live.m {(HOUR + i) * 1000} {i} {{h=a}}" for i in range(3)]
    scan = await tsdb(
        tmp_path, "scan", "--import", "--data-dir", data_dir, f"{HOUR}", "sum", "live.m"
    )
    assert scan.code == 0, scan.err
    assert scan.out.splitlines() == [f"live.m {HOUR + i} {i} h=a" for i in range(3)]
