"""One pathological query must not starve ingest or other clients (issue 5, item 8)."""

from __future__ import annotations

import asyncio

import aiohttp

from tsd.daemon import Daemon

BAD_VALUE = "a" * 60 + "-"


async def test_catastrophic_regexp_query_neither_blocks_others_nor_hangs(tsd: Daemon) -> None:
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
        # While the bad query is matching, ingest and other requests are served.
        await asyncio.sleep(0.2)
        assert not bad.done()
        reader, writer = await asyncio.open_connection("127.0.0.1", tsd.port)
        writer.write(b"put fair.other 1700000100 7 host=x\nversion\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"tsd ")
        async with http.get(f"{base}/api/suggest?type=metrics&q=fair") as resp:
            assert resp.status == 200
            assert "fair.m" in await resp.json()
        assert not bad.done(), "the other requests waited for the bad query"
        writer.close()

        status, answer = await bad
        assert status == 400
        assert "regexp filter took longer" in str(answer)
