"""Filter bombs (issue 25, held-out abuse): a huge or exploding regexp filter is refused
with a 400 before it is compiled, and catastrophic regexps that do get to match hold
threads of their own, not the compute slot a dashboard's query needs."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import longest_stall
from tsd.daemon import Daemon
from tsd.protocol import m_syntax

BASE = 1700000000
BAD_VALUE = "a" * 60 + "-"  # (a|a)+$ backtracks exponentially on it


def _query(metric: str, pattern: str | None = None) -> bytes:
    sub: dict[str, object] = {"aggregator": "sum", "metric": metric}
    if pattern is not None:
        sub["filters"] = [{"type": "regexp", "tagk": "host", "filter": pattern}]
    return orjson.dumps({"start": BASE - 10, "end": BASE + 3600, "queries": [sub]})


async def _post(http: aiohttp.ClientSession, port: int, body: bytes) -> tuple[int, bytes]:
    async with http.post(f"http://127.0.0.1:{port}/api/query", data=body) as resp:
        return resp.status, await resp.read()


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            "|".join(f"host{i:05d}" for i in range(100_000)),
            "The regexp filter is too long: 999999 characters, at most 4096",
        ),
        ("(?:a{3000}){3000}", "The regexp filter is too large: its counted repeats expand"),
        ("(" * 1000 + "a" + ")" * 1000, "The regexp filter nests too deeply"),
    ],
    ids=["100k_alternatives", "repeat_bomb", "1000_nested_groups"],
)
async def test_regexp_bombs_are_refused_without_stalling_others(
    tsd: Daemon, pattern: str, message: str
) -> None:
    async with aiohttp.ClientSession() as http:
        bombs = [_post(http, tsd.port, _query("x.m", pattern)) for _ in range(4)]
        answers, longest = await longest_stall(tsd.port, bombs)
    for status, raw in answers:
        assert status == 400
        assert orjson.loads(raw)["error"]["message"].startswith(message)
    # Before: 2.4 s (re) then 15 s (regex) of compiling 100,000 alternatives, the first on
    # the event loop; 39 s for the repeat bomb. Generous bound: a loaded machine.
    assert longest < 1.0


@pytest.mark.slow  # the four bombs run to their regexp budget, one after the other
async def test_catastrophic_regexps_do_not_starve_a_dashboard(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd(
        **{"tsd.query.compute_slots": "1", "tsd.query.filter.regexp_budget": "2000"}
    )
    bad = [
        {"metric": "bomb.m", "timestamp": BASE, "value": i, "tags": {"host": f"{BAD_VALUE}{i}"}}
        for i in range(3)
    ]
    # big enough (12,000 points) to need the compute slot rather than run on the loop
    dashboard = [
        {"metric": "dash.m", "timestamp": BASE + t, "value": t, "tags": {"host": f"h{h}"}}
        for h in range(20)
        for t in range(0, 3600, 6)
    ]
    port = tsd.port
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/api/put?sync", json=bad + dashboard) as r:
            assert r.status == 204, await r.text()
        status, _ = await _post(http, port, _query("dash.m"))
        assert status == 200
        bombs = [
            asyncio.create_task(_post(http, port, _query("bomb.m", "(a|a)+$"))) for _ in range(4)
        ]
        await asyncio.sleep(0.5)  # the bombs are matching (each for up to 2 s)
        t0 = time.perf_counter()
        status, raw = await _post(http, port, _query("dash.m"))
        # and grouped by host (host=*: a wildcard filter, as Grafana's group-by sends)
        grouped = f"http://127.0.0.1:{port}/api/query?start={BASE}&m=sum:dash.m{{host=*}}"
        async with http.get(grouped) as resp:
            grouped_status, grouped_raw = resp.status, await resp.read()
        waited = time.perf_counter() - t0
        pending = sum(not bomb.done() for bomb in bombs)
        answers = await asyncio.gather(*bombs)
    assert status == 200
    assert len(orjson.loads(raw)[0]["dps"]) == 600
    assert grouped_status == 200
    assert len(orjson.loads(grouped_raw)) == 20
    assert pending >= 1  # answered while the bombs were still matching
    for bomb_status, bomb_raw in answers:
        assert bomb_status == 400, bomb_raw
        assert b"regexp" in bomb_raw
    # Before: the dashboard queued behind the four bombs for the one compute slot (4-10 s).
    assert waited < 2.0, waited


async def test_regexp_filters_are_checked_off_the_event_loop(
    tsd: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checking a pattern compiles it (up to about 20 ms at the length limit): the query is
    # read in a worker thread when it carries one, GET or POST, whatever the type's case.
    threads: list[threading.Thread] = []
    real_check = m_syntax.check_regexp

    def check(expression: str) -> None:
        threads.append(threading.current_thread())
        real_check(expression)

    monkeypatch.setattr(m_syntax, "check_regexp", check)
    base = f"http://127.0.0.1:{tsd.port}/api/query"
    async with aiohttp.ClientSession() as http:
        status, _ = await _post(http, tsd.port, _query("x.m", "web0[1-4]"))
        assert status == 400  # no such metric: read and checked first
        async with http.get(f"{base}?start={BASE}&m=sum:x.m{{host=RegExp(web.*)}}") as resp:
            assert resp.status == 400
    assert len(threads) == 2
    assert all(thread is not threading.main_thread() for thread in threads)
