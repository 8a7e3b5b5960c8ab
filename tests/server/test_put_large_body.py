"""A large /api/put body is parsed off the event loop (issue 13 item 4): other clients are
served while it is parsed, and every point of it is stored."""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, stored
from tsd.protocol import put_json
from tsd.server.http import put as put_handler
from tsd.write.ingest import IngestSession

T = 1_356_998_400


def large_body(points: int) -> bytes:
    body = orjson.dumps(
        [
            {
                "metric": "big.body",
                "timestamp": T + i // 100,
                "value": i,
                "tags": {"host": f"web{i % 100:03d}", "dc": "lga"},
            }
            for i in range(points)
        ]
    )
    assert len(body) > put_handler.OFFLOAD_BODY_BYTES
    return body


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_large_body_is_parsed_in_a_worker_while_the_loop_serves_telnet(
    make_tsd: MakeTsd, monkeypatch: pytest.MonkeyPatch
) -> None:
    tsd = await make_tsd()
    loop_thread = threading.get_ident()
    parsing = threading.Event()
    answered = threading.Event()
    seen: dict[str, Any] = {}
    parse = put_json.parse_put_body_pieces

    def parse_and_wait(*args: Any) -> Any:
        """The real parser, held until another client got its telnet answer: on the loop
        this would wait for an answer the loop could never give."""
        seen["thread"] = threading.get_ident()
        parsing.set()
        seen["answered"] = answered.wait(timeout=30)
        return parse(*args)

    monkeypatch.setattr(put_handler, "parse_put_body_pieces", parse_and_wait)
    body = large_body(20_000)
    telnet = await TelnetClient.connect(tsd.port)
    async with aiohttp.ClientSession() as http:
        put = asyncio.ensure_future(
            http.post(f"http://127.0.0.1:{tsd.port}/api/put?summary", data=io.BytesIO(body))
        )
        await asyncio.to_thread(parsing.wait, 30)
        assert await telnet.sync() == []  # answered while the body is being parsed
        answered.set()
        async with await put as response:
            assert response.status == 200
            assert orjson.loads(await response.read()) == {"success": 20_000, "failed": 0}
    await telnet.close()
    assert seen["answered"]
    assert seen["thread"] != loop_thread
    points = await stored(tsd)
    assert len(points) == 20_000
    assert sorted(p.value for p in points) == list(range(20_000))


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_large_body_answers_errors_by_body_index(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd()
    points: list[dict[str, Any]] = [
        {"metric": "big.body", "timestamp": T + i, "value": i, "tags": {"host": "a"}}
        for i in range(30_000)
    ]
    points[5]["tags"] = {}  # "Missing tags"
    points[29_990]["value"] = "x"  # "Unable to parse value to a number"
    body = orjson.dumps(points)
    assert len(body) > put_handler.OFFLOAD_BODY_BYTES
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{tsd.port}/api/put?details", data=io.BytesIO(body)
        ) as response,
    ):
        reply = orjson.loads(await response.read())
    assert response.status == 400
    assert (reply["success"], reply["failed"]) == (29_998, 2)
    assert [(e["error"], e["datapoint"]["timestamp"]) for e in reply["errors"]] == [
        ("Missing tags", T + 5),
        ("Unable to parse value to a number", T + 29_990),
    ]
    assert len(await stored(tsd)) == 29_998


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_appending_a_large_body_of_new_series_gives_the_loop_turns(
    make_tsd: MakeTsd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Points of series the parser did not know are appended one by one; once their series
    are resolved those appends never suspend, so the handler gives the loop a turn every
    ``YIELD_EVERY`` of them (a 64 MiB body of new series held the loop for seconds)."""
    monkeypatch.setattr(put_handler, "YIELD_EVERY", 100)
    tsd = await make_tsd()
    resolved = asyncio.Event()
    seen: list[bool] = []
    telnet_answered = asyncio.Event()
    put = IngestSession.put

    def watched(self: IngestSession[Any], point: Any, tag: Any = None, aliases: Any = ()) -> Any:
        if tag == 10_000:  # every series (100 of them) is resolved by now
            resolved.set()
        if tag == 19_999:
            seen.append(telnet_answered.is_set())
        return put(self, point, tag, aliases)

    monkeypatch.setattr(IngestSession, "put", watched)
    telnet = await TelnetClient.connect(tsd.port)

    async def version_once_resolved() -> None:
        await resolved.wait()  # runs only if the handler gives the loop a turn
        assert await telnet.sync() == []
        telnet_answered.set()

    prober = asyncio.create_task(version_once_resolved())
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{tsd.port}/api/put?summary", data=io.BytesIO(large_body(20_000))
        ) as response,
    ):
        assert response.status == 200
    await prober
    await telnet.close()
    assert seen == [True]  # the telnet client was answered before the last point's append
    assert len(await stored(tsd)) == 20_000
