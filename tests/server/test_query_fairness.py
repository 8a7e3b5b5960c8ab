"""One pathological query must not starve ingest or other clients (issue 5, item 8)."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest

from tsd.daemon import Daemon
from tsd.query import filters
from tsd.query.limits import QueryControl
from tsd.query_spec import Filter

pytestmark = pytest.mark.slow  # a catastrophic regexp runs to its timeout

BAD_VALUE = "a" * 60 + "-"


async def test_catastrophic_regexp_query_neither_blocks_others_nor_hangs(
    tsd: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The regexp matcher is the real one, held at its first value until the other
    # requests have been answered: "while the bad query is matching" is then a fact, not
    # a guess about timing.
    matching, release = threading.Event(), threading.Event()
    real_compile = filters.compile_value_matcher

    def held_compile(f: Filter, control: QueryControl | None = None) -> filters.Matcher:
        match = real_compile(f, control)
        if f.type != "regexp":
            return match

        def held(value: str) -> bool:
            matching.set()
            release.wait(60)
            return match(value)

        return held

    monkeypatch.setattr(filters, "compile_value_matcher", held_compile)
    base = f"http://127.0.0.1:{tsd.port}"
    async with aiohttp.ClientSession() as http:
        points = [
            {"metric": "fair.m", "timestamp": 1700000000 + i, "value": i, "tags": {"host": h}}
            for i, h in enumerate(["aaaa", BAD_VALUE])
        ]
        async with http.post(f"{base}/api/put?sync", json=points) as resp:
            assert resp.status == 204

        async def bad_query() -> tuple[int, dict[str, object]]:
            body = {
                "start": 1699999000,
                "end": 1700001000,
                "queries": [
                    {
                        "aggregator": "sum",
                        "metric": "fair.m",
                        "filters": [{"type": "regexp", "tagk": "host", "filter": "(a|aa)+$"}],
                    }
                ],
            }
            async with http.post(f"{base}/api/query", json=body) as resp:
                return resp.status, await resp.json()

        bad = asyncio.create_task(bad_query())
        assert await asyncio.to_thread(matching.wait, 60), "the query never reached its filter"
        # While the bad query is matching, ingest and other requests are served.
        try:
            async with asyncio.timeout(30):  # fails by name if they wait for the query
                reader, writer = await asyncio.open_connection("127.0.0.1", tsd.port)
                writer.write(b"put fair.other 1700000100 7 host=x\nversion\n")
                await writer.drain()
                assert (await reader.readline()).startswith(b"tsd ")
                async with http.get(f"{base}/api/suggest?type=metrics&q=fair") as resp:
                    assert resp.status == 200
                    assert "fair.m" in await resp.json()
            assert not bad.done()
        finally:
            release.set()
        writer.close()

        status, answer = await bad
        assert status == 400
        assert "regexp filter took longer" in str(answer)
