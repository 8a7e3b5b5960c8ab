"""Abuse cases of issue 13 against a real daemon process: does one client hurt the others?

A tsd daemon (``python -m tsd tsd``, the protective defaults, ``tsd.network.header_timeout``
lowered to 3 s so the silent-connection case is quick) serves an embedded store holding
``--series`` series (default 200,000) of ``bench.cpu{host=...}`` over one hour at 60 s
(written straight into the store before the daemon starts). A probe client measures, all
along, the round trip of a telnet ``version`` and of a one-point ``/api/put`` (every 20 ms).
For each case the table gives the daemon's answer, the time, the daemon's RSS growth
(peak during the case and what is left after it), the probe's p99 during the case, and for
the disconnect case the daemon's CPU seconds in the 3 s after the client went away.
``ver max`` is the longest ``version`` round trip: the longest stall of the daemon's loop.
The baseline row is the probe with nothing else running (same run).

Cases beside the query ones: a 64 MiB /api/put body (958,697 points); what a page from
another origin can send (diediedie, a text/plain put, a UID assign, annotation deletes);
the GETs that used to answer 500 with a traceback; and a full disk (a second daemon on a
64 MiB tmpfs filled under it; needs ``mount``, skipped otherwise: ``?sync&summary``,
``?sync&details``, telnet's error lines, recovery when space returns).

Issue 25's held-out cases: names too long for the store beside 1,000 good points
(``bad_names``: one /api/put?details&sync body, one telnet connection and a victim on
another), ``expression_bombs`` (/api/query/exp with 50,000 nested parentheses and 300,000
terms, /api/query/gexp with 2,000 nested calls), a regexp filter of 100,000 alternatives,
four clients' catastrophic ``regexp((a|a)+$)`` queries with a dashboard query timed
meanwhile, and twenty distinct 4 MB queries against the completed-query list.
More of them (empty telnet lines, bodies over the limit, ``Expect`` with
10 GiB, a cut ClientHello, the bulk UID and annotation endpoints): bench/abuse_held_out.py.

Run: ``python -m bench.abuse [--series N] [--only CASE ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import io
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import orjson

from bench.abuse_held_out import HELD_OUT_CASES
from tsd.codec import KeyLayout, compact_row, encode_point, make_series_key
from tsd.config import Config
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.uid.service import UidService

BASE = 1356998400  # 2013-01-01 00:00:00 UTC
METRIC = "bench.cpu"
STEP = 60
SLOW_VALUE = "a" * 60 + "-"


# -- the data ---------------------------------------------------------------------------------


async def load(data_dir: Path, n_series: int) -> None:
    """``n_series`` series, one compacted row each (an hour at ``STEP`` seconds)."""
    cfg = Config()
    storage = EmbeddedStorage(data_dir)
    try:
        await ensure_tables(storage, cfg.storage)
        uids = UidService(storage, cfg)
        layout = KeyLayout.from_storage_config(cfg.storage)
        metric_uid = await uids.metrics.assign(METRIC)
        host_uid = await uids.tagk.get_or_create_id("host")
        rng = np.random.default_rng(5)
        offsets = list(range(0, 3600, STEP))
        for start in range(0, n_series, 2000):
            names = [f"h{s:06d}" for s in range(start, min(start + 2000, n_series))]
            tagvs = await asyncio.gather(*(uids.tagv.get_or_create_id(n) for n in names))
            values = np.round(rng.normal(50, 10, size=(len(names), len(offsets))), 2).tolist()
            puts = []
            for tagv, row in zip(tagvs, values, strict=True):
                series = make_series_key(layout, metric_uid, [(host_uid, tagv)])
                cells = [encode_point(BASE + o, v)[1:] for o, v in zip(offsets, row, strict=True)]
                cell = compact_row(cells)
                assert cell is not None
                puts.append(Put(series.row_key(BASE), "t", cell[0], cell[1]))
            await storage.put(cfg.storage.data_table, puts)
    finally:
        await storage.close()


# -- the daemon process -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the probe --------------------------------------------------------------------------------


@dataclass
class Probe:
    """Another client: telnet ``version`` and a one-point /api/put, every 20 ms."""

    port: int
    version_ms: list[float] = field(default_factory=list)
    put_ms: list[float] = field(default_factory=list)

    def mark(self) -> tuple[int, int]:
        return len(self.version_ms), len(self.put_ms)

    def p99_since(self, mark: tuple[int, int]) -> tuple[float, float]:
        def p99(xs: list[float]) -> float:
            return float(np.percentile(xs, 99)) if xs else float("nan")

        return p99(self.version_ms[mark[0] :]), p99(self.put_ms[mark[1] :])

    def max_since(self, mark: tuple[int, int]) -> float:
        """The longest ``version`` round trip: the longest stall of the daemon's loop."""
        return max(self.version_ms[mark[0] :], default=float("nan"))

    async def run(self, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        url = f"http://127.0.0.1:{self.port}/api/put"
        i = 0
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                t0 = time.perf_counter()
                writer.write(b"version\n")
                await reader.readline()
                await reader.readline()
                self.version_ms.append((time.perf_counter() - t0) * 1000)
                point = {"metric": "probe.m", "timestamp": BASE + i, "value": i, "tags": {"a": "b"}}
                t0 = time.perf_counter()
                async with http.post(url, json=point) as resp:
                    await resp.read()
                self.put_ms.append((time.perf_counter() - t0) * 1000)
                i += 1
                await asyncio.sleep(0.02)
        writer.close()


# -- the cases --------------------------------------------------------------------------------


@dataclass
class Row:
    case: str
    answer: str = ""
    seconds: float = 0.0
    rss_peak: float = 0.0
    rss_after: float = 0.0
    version_p99: float = 0.0
    put_p99: float = 0.0
    cpu_after: str = ""
    version_max: float = float("nan")


async def http_status(session: aiohttp.ClientSession, url: str, **kw: object) -> str:
    method = "POST" if "json" in kw else "GET"
    async with session.request(method, url, **kw) as resp:  # type: ignore[arg-type]
        body = await resp.read()
    text = body[:90].decode("utf-8", "replace")
    if resp.status == 200:
        return f"200 ({len(body) / 1e6:.1f} MB)"
    return f"{resp.status} {text}"


CaseFn = Callable[[int, int], Awaitable[tuple[str, str]]]


async def case_bucket_bomb(port: int, pid: int, start: str) -> tuple[str, str]:
    url = f"http://127.0.0.1:{port}/api/query?start={start}&m=sum:1ms-avg-zero:{METRIC}"
    async with aiohttp.ClientSession() as http:
        return await http_status(http, url), ""


async def case_group_by(port: int, pid: int) -> tuple[str, str]:
    url = (
        f"http://127.0.0.1:{port}/api/query?start={BASE}&end={BASE + 3600}&m=sum:{METRIC}{{host=*}}"
    )
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        return await http_status(http, url), ""


async def case_many_subqueries(port: int, pid: int) -> tuple[str, str]:
    queries = [
        {"aggregator": "sum", "metric": METRIC, "downsample": f"{i + 1}m-avg"} for i in range(1000)
    ]
    body = {"start": BASE, "end": BASE + 3600, "queries": queries}
    async with aiohttp.ClientSession() as http:
        return await http_status(http, f"http://127.0.0.1:{port}/api/query", json=body), ""


async def case_disconnect(port: int, pid: int) -> tuple[str, str]:
    """The heaviest allowed query; the client gives up after 1 s."""
    url = (
        f"http://127.0.0.1:{port}/api/query?start={BASE}&end={BASE + 3600}&m=sum:{METRIC}{{host=*}}"
    )
    answer = "client gave up after 1 s"
    with contextlib.suppress(TimeoutError):
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http,
            http.get(url) as resp,
        ):
            answer = f"{resp.status} before 1 s"
    cpu0 = cpu_s(pid)
    await asyncio.sleep(3)
    return answer, f"{cpu_s(pid) - cpu0:.2f} of 3 s"


async def case_sigterm_during_query(port: int, pid: int) -> tuple[str, str]:
    return "", ""  # measured separately (stops the daemon): see main()


async def case_telnet_non_reader(port: int, pid: int) -> tuple[str, str]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    _, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"stats\n" * 400_000)
    await asyncio.sleep(5)  # the daemon is still being sent lines it need not read
    writer.transport.abort()
    return "400,000 stats lines, replies never read", ""


async def case_static_names(port: int, pid: int) -> tuple[str, str]:
    async with aiohttp.ClientSession() as http:
        for start in range(0, 50_000, 500):
            batch = []
            for i in range(start, start + 500):
                batch.append(http.get(f"http://127.0.0.1:{port}/s/name{i}.js"))
            for request in batch:
                async with request as resp:
                    await resp.read()
        status = await http_status(http, f"http://127.0.0.1:{port}/s/" + "x" * 300)
    leak = "traceback" if "Traceback" in status or "/" in status.split(" ", 1)[1] else "no path"
    return f"50,000 names; /s/<300 B>: {status[:40]} ({leak})", ""


def slow_points() -> list[dict[str, object]]:
    """40 series of ``slow.m`` whose host values make ``(a|aa)+$`` backtrack exponentially."""
    return [
        {"metric": "slow.m", "timestamp": BASE, "value": i, "tags": {"host": f"{SLOW_VALUE}{i}"}}
        for i in range(40)
    ]


def regexp_query(metric: str, pattern: str, start: int, end: int) -> dict[str, object]:
    """A /api/query body of one sub-query with a regexp filter on ``host``."""
    sub = {
        "aggregator": "sum",
        "metric": metric,
        "filters": [{"type": "regexp", "tagk": "host", "filter": pattern}],
    }
    return {"start": start, "end": end, "queries": [sub]}


async def case_regexp(port: int, pid: int) -> tuple[str, str]:
    points = slow_points()
    body = regexp_query("slow.m", "(a|aa)+$", BASE - 100, BASE + 100)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/api/put?sync", json=points) as resp:
            assert resp.status == 204
        return await http_status(http, f"http://127.0.0.1:{port}/api/query", json=body), ""


async def case_silent_connections(port: int, pid: int) -> tuple[str, str]:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2000)]
    await asyncio.sleep(4)  # past tsd.network.header_timeout (3 s here)
    still_open = 0
    for reader, _ in conns:
        with contextlib.suppress(TimeoutError):
            if await asyncio.wait_for(reader.read(1), 0.001) == b"":
                continue
        still_open += 1
    for _, writer in conns:
        writer.close()
    return f"2,000 silent: {still_open} still open after 4 s", ""


PUT_POINTS = 958_697  # the 64 MiB body


@functools.cache
def big_put_body() -> bytes:
    """``PUT_POINTS`` points of 1,000 new series, the metric name padded so that the body
    is just under ``tsd.http.request.max_body`` (64 MiB). Built before the probe starts:
    building it stalls this process's loop, which the probe would count as the daemon's."""

    def body(metric: str) -> bytes:
        return orjson.dumps(
            [
                {
                    "metric": metric,
                    "timestamp": BASE + i // 1000,
                    "value": i % 1000,
                    "tags": {"h": f"{i % 1000:03d}"},
                }
                for i in range(PUT_POINTS)
            ]
        )

    pad = (64 * 1024 * 1024 - len(body("p"))) // PUT_POINTS
    return body("p" + "x" * max(0, pad - 1))


async def case_put_64mib(port: int, pid: int) -> tuple[str, str]:
    body = big_put_body()
    timeout = aiohttp.ClientTimeout(total=600)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.post(f"http://127.0.0.1:{port}/api/put?summary", data=body) as resp,
    ):
        reply = (await resp.read())[:60].decode("utf-8", "replace")
    return f"{len(body) / 2**20:.1f} MiB, {PUT_POINTS:,} points: {resp.status} {reply}", ""


FOREIGN = {"Origin": "http://evil.example", "Content-Type": "text/plain"}


async def case_foreign_origin(port: int, pid: int) -> tuple[str, str]:
    """What a page from another origin can send: diediedie, a text/plain put, a UID assign,
    an annotation delete. Each answer's status, then: still alive, nothing changed."""
    base = f"http://127.0.0.1:{port}"
    note = {"startTime": BASE, "description": "kept"}
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/api/annotation", json=note) as resp:
            assert resp.status == 200, await resp.text()
        attempts = [
            ("GET", "/diediedie", None),
            ("POST", "/api/put?sync", f'{{"metric":"evil.m","timestamp":{BASE},"value":1,'
             '"tags":{"a":"b"}}'),
            ("POST", "/api/uid/assign", '{"metric":["evil.uid"]}'),
            ("GET", f"/api/annotation?start_time={BASE}&method_override=delete", None),
            ("DELETE", f"/api/annotation?start_time={BASE}", None),
        ]  # fmt: skip
        statuses = []
        for method, path, data in attempts:
            async with http.request(method, base + path, data=data, headers=FOREIGN) as resp:
                await resp.read()
                statuses.append(str(resp.status))
        changed = []
        for name in ("evil.m", "evil.uid"):
            async with http.get(f"{base}/api/suggest?type=metrics&q={name}") as resp:
                if name in await resp.json():
                    changed.append(name)
        async with http.get(f"{base}/api/annotation?start_time={BASE}") as resp:
            if resp.status != 200:
                changed.append("annotation")
    alive = _alive(pid)
    return (
        f"diediedie/put/assign/override-delete/DELETE: {'/'.join(statuses)}; "
        f"alive: {alive}; changed: {', '.join(changed) or 'nothing'}"
    ), ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


async def case_error_500(port: int, pid: int) -> tuple[str, str]:
    """The GETs that answered 500 with a traceback and install paths."""
    answers = []
    async with aiohttp.ClientSession() as http:
        for path in ("/s/" + "x" * 300, f"/api/query?start=100y-ago&m=sum:1ms-avg-zero:{METRIC}"):
            async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                body = (await resp.read()).decode("utf-8", "replace")
            leaks = "Traceback" in body or "/tsd/" in body or ".py" in body
            error_id = "errorId" in body
            answers.append(
                f"{resp.status} ({'LEAKS' if leaks else 'no traceback/path'}"
                f"{', errorId' if error_id else ''})"
            )
    return "/s/<300 B>: " + answers[0] + "; 100y bomb: " + answers[1], ""


# -- issue 25's held-out cases: names, expressions, filters, the completed-query list --------

LONG_NAME = "n" * 600  # past the embedded store's 511-byte keys


async def case_bad_names(port: int, pid: int) -> tuple[str, str]:
    """1,000 points and 10 names too long for the store: in one /api/put?details&sync
    body, then on one telnet connection while another connection writes 1,000 points."""
    base = f"http://127.0.0.1:{port}"

    def point(metric: str, i: int) -> dict[str, object]:
        return {"metric": metric, "timestamp": BASE + i, "value": i, "tags": {"host": "a"}}

    body = [point("abuse.names.http", i) for i in range(1000)]
    body += [point(f"{LONG_NAME}{i}", 0) for i in range(10)]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/api/put?details&sync", json=body) as resp:
            reply = await resp.json()
            http_answer = f"{resp.status} success={reply['success']} failed={reply['failed']}"
        mixed = "".join(
            f"put abuse.names.telnet {BASE + i} {i} host=a\n"
            + (f"put {LONG_NAME}{i} {BASE} 1 host=a\n" if i % 100 == 0 else "")
            for i in range(1000)
        )
        victim = "".join(f"put abuse.names.victim {BASE + i} {i} host=b\n" for i in range(1000))
        (bad_r, bad_w), (vic_r, vic_w) = [
            await asyncio.open_connection("127.0.0.1", port) for _ in range(2)
        ]
        bad_w.write(mixed.encode() + b"version\n")
        vic_w.write(victim.encode() + b"version\n")
        errors = 0
        while not (await bad_r.readline()).startswith(b"tsd "):
            errors += 1
        while not (await vic_r.readline()).startswith(b"tsd "):
            pass
        for writer in (bad_w, vic_w):
            writer.close()
        stored = []
        for metric in ("abuse.names.http", "abuse.names.telnet", "abuse.names.victim"):
            url = f"{base}/api/query?start={BASE}&end={BASE + 1000}&m=sum:{metric}"
            count = 0
            for _ in range(50):  # telnet's points are written within a few seconds
                async with http.get(url) as resp:
                    answer = await resp.json() if resp.status == 200 else []
                count = sum(len(s["dps"]) for s in answer)
                if count == 1000:
                    break
                await asyncio.sleep(0.1)
            stored.append(str(count))
    return (
        f"put: {http_answer}; telnet: {errors} error lines; stored http/telnet/victim: "
        + "/".join(stored)
        + " of 1000"
    ), ""


async def case_expression_bombs(port: int, pid: int) -> tuple[str, str]:
    """/api/query/exp with 50,000 nested parentheses and with 300,000 terms, /api/query/
    gexp with 2,000 nested calls (short enough to pass the length limit)."""
    base = f"http://127.0.0.1:{port}"
    answers = []
    async with aiohttp.ClientSession() as http:
        for expr in ("(" * 50_000 + "a" + ")" * 50_000, "+".join(["a"] * 300_000)):
            body = {
                "time": {"start": str(BASE), "end": str(BASE + 60), "aggregator": "sum"},
                "metrics": [{"id": "a", "metric": METRIC}],
                "expressions": [{"id": "e", "expr": expr}],
                "outputs": [{"id": "e"}],
            }
            answers.append(await http_status(http, f"{base}/api/query/exp", json=body))
        exp = "f(" * 2000 + f"sum:{METRIC}" + ")" * 2000
        answers.append(await http_status(http, f"{base}/api/query/gexp?start={BASE}&exp={exp}"))
    return " | ".join(answer[:60] for answer in answers), ""


async def case_regexp_alternatives(port: int, pid: int) -> tuple[str, str]:
    """A regexp filter of 100,000 alternatives (about 1 MB)."""
    pattern = "|".join(f"h{i:06d}" for i in range(100_000))
    body = regexp_query(METRIC, pattern, BASE, BASE + 3600)
    async with aiohttp.ClientSession() as http:
        return (await http_status(http, f"http://127.0.0.1:{port}/api/query", json=body))[:80], ""


async def case_catastrophic_regexps(port: int, pid: int) -> tuple[str, str]:
    """Four clients send ``regexp((a|a)+$)`` queries (values that backtrack exponentially);
    meanwhile a dashboard query (300 series, 18,000 points: it needs a compute slot) is
    timed."""
    base = f"http://127.0.0.1:{port}"
    points = slow_points()
    bomb = regexp_query("slow.m", "(a|a)+$", BASE - 100, BASE + 100)
    hosts = "|".join(f"h{i:06d}" for i in range(300))
    dashboard = f"{base}/api/query?start={BASE}&end={BASE + 3600}&m=sum:{METRIC}{{host={hosts}}}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/api/put?sync", json=points) as resp:
            assert resp.status == 204
        bombs = [
            asyncio.create_task(http_status(http, f"{base}/api/query", json=bomb)) for _ in range(4)
        ]
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        dash = await http_status(http, dashboard)
        waited = time.perf_counter() - t0
        answers = await asyncio.gather(*bombs)
    codes = "/".join(answer.split(" ", 1)[0] for answer in answers)
    return f"bombs: {codes}; dashboard {dash[:12]} in {waited:.2f} s", ""


async def case_completed_query_list(port: int, pid: int) -> tuple[str, str]:
    """Twenty distinct 4 MB queries, then the size of /api/stats/query (RSS columns: what
    the completed-query list keeps)."""
    base = f"http://127.0.0.1:{port}"
    body = b""
    async with aiohttp.ClientSession() as http:
        for i in range(20):
            literals = "|".join(f"q{i}v{v:07d}" for v in range(350_000))
            sub = {
                "aggregator": "sum",
                "metric": METRIC,
                "filters": [{"type": "literal_or", "tagk": "host", "filter": literals}],
            }
            body = orjson.dumps({"start": BASE, "end": BASE + 60, "queries": [sub]})
            async with http.post(f"{base}/api/query", data=io.BytesIO(body)) as resp:
                await resp.read()
        async with http.get(f"{base}/api/stats/query") as resp:
            size = len(await resp.read())
    return f"20 x {len(body) / 2**20:.1f} MiB queries; /api/stats/query {size / 1e6:.2f} MB", ""


CASES: dict[str, Callable[[int, int], Awaitable[tuple[str, str]]]] = {
    "bucket_bomb_1d": lambda p, pid: case_bucket_bomb(p, pid, "1d-ago"),
    "bucket_bomb_100y": lambda p, pid: case_bucket_bomb(p, pid, "100y-ago"),
    "group_by_host_1h": case_group_by,
    "1000_subqueries": case_many_subqueries,
    "disconnect": case_disconnect,
    "telnet_non_reader": case_telnet_non_reader,
    "static_50k_names": case_static_names,
    "regexp_40_values": case_regexp,
    "silent_conns": case_silent_connections,
    "put_64mib_body": case_put_64mib,
    "foreign_origin": case_foreign_origin,
    "error_500": case_error_500,
    "bad_names": case_bad_names,
    "expression_bombs": case_expression_bombs,
    "regexp_100k_alternatives": case_regexp_alternatives,
    "catastrophic_regexps": case_catastrophic_regexps,
    "completed_query_list": case_completed_query_list,
}
CASES.update(HELD_OUT_CASES)  # issue 25's (bench/abuse_held_out.py)


async def run_case(name: str, fn: CaseFn, port: int, pid: int, probe: Probe) -> Row:
    rss0 = rss_mb(pid)
    peak = rss0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    mark = probe.mark()
    t0 = time.perf_counter()
    answer, cpu_after = await fn(port, pid)
    seconds = time.perf_counter() - t0
    done.set()
    await sampler
    await asyncio.sleep(0.5)
    v99, p99 = probe.p99_since(mark)
    after = rss_mb(pid) - rss0
    return Row(
        name, answer, seconds, peak - rss0, after, v99, p99, cpu_after, probe.max_since(mark)
    )


async def start_daemon(data_dir: Path, port: int, *extra: str) -> asyncio.subprocess.Process:
    """The bench's daemon; ``extra``: more command-line arguments."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tsd",
        "tsd",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--data-dir",
        str(data_dir),
        "--auto-metric",
        "--set",
        "tsd.network.header_timeout=3",
        "--set",
        "tsd.logging.level=error",
        "--set",
        "tsd.http.query.allow_delete=true",  # the foreign-origin case tries a delete
        *extra,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    for _ in range(400):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return process
        await asyncio.sleep(0.05)
    raise RuntimeError("the daemon did not start")


async def stop_daemon(
    stop: asyncio.Event, prober: asyncio.Task[None], process: asyncio.subprocess.Process
) -> None:
    """Stop the probe, then the daemon."""
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(prober, 10)
    process.terminate()
    await process.wait()


async def sigterm_during_query(data_dir: Path) -> Row:
    """SIGTERM while the heaviest allowed query runs: seconds until the process exits."""
    port = free_port()
    process = await start_daemon(data_dir, port)
    url = (
        f"http://127.0.0.1:{port}/api/query?start={BASE}&end={BASE + 3600}&m=sum:{METRIC}{{host=*}}"
    )
    async with aiohttp.ClientSession() as http:

        async def query() -> str:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as resp:
                    return str(resp.status)
            return "connection closed"

        running = asyncio.create_task(query())
        await asyncio.sleep(1.0)
        t0 = time.perf_counter()
        process.terminate()
        await process.wait()
        seconds = time.perf_counter() - t0
        answer = await running
    return Row("sigterm_during_query", f"query answered {answer}; exit {process.returncode}",
               seconds)  # fmt: skip


async def disk_full(tmp: Path) -> Row:
    """A daemon on a 64 MiB tmpfs, filled under it: what ``?sync&summary``,
    ``?sync&details``, a put without sync and 50,000 telnet puts get, and whether puts are
    stored again once space returns (no restart). Needs ``mount`` (root); the row says
    so otherwise."""
    disk = tmp / "disk"
    disk.mkdir()
    refused = mount_tmpfs(disk, "64m")
    if refused:
        return Row("disk_full_tmpfs", f"not measured: cannot mount a tmpfs ({refused})")
    try:
        return await _disk_full(disk)
    finally:
        umount(disk)


def mount_tmpfs(where: Path, size: str) -> str:
    """Mount a tmpfs of ``size`` at ``where``: "" when mounted, else why not."""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    return "" if mounted.returncode == 0 else mounted.stderr.strip()


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False)


def _points(start: int, count: int) -> bytes:
    return orjson.dumps(
        [
            {"metric": "disk.m", "timestamp": BASE + i, "value": i, "tags": {"h": "a"}}
            for i in range(start, start + count)
        ]
    )


async def _disk_full(disk: Path) -> Row:
    port = free_port()
    process = await start_daemon(disk / "data", port)
    pid = process.pid
    probe = Probe(port)
    stop = asyncio.Event()
    prober = asyncio.create_task(probe.run(stop))
    base = f"http://127.0.0.1:{port}/api/put"
    notes: list[str] = []
    try:
        async with aiohttp.ClientSession() as http:

            async def put(query: str, start: int, count: int) -> tuple[int, bytes]:
                async with http.post(base + query, data=_points(start, count)) as resp:
                    return resp.status, await resp.read()

            assert (await put("?sync", 0, 1000))[0] == 204
            await asyncio.sleep(0.5)
            rss0, mark, t0 = rss_mb(pid), probe.mark(), time.perf_counter()
            filler = disk / "filler"
            free = os.statvfs(disk)
            with filler.open("wb") as out:
                os.posix_fallocate(out.fileno(), 0, free.f_bavail * free.f_frsize)
            start, stored, status, body = 1000, 0, 0, b""
            for _ in range(100):  # LMDB's file may have free pages for the first batches
                status, body = await put("?sync&summary", start, 5000)
                start += 5000
                if status not in (200, 204):
                    break
                stored += 5000
            notes.append(f"?sync&summary {status} {body[:40].decode()} (after {stored} stored)")
            status, body = await put("?sync&details", start, 5000)
            start += 5000
            failed = orjson.loads(body).get("failed") if body else None
            notes.append(f"?sync&details {status} failed={failed}")
            status, _ = await put("", start, 5000)
            start += 5000
            notes.append(f"no sync {status}")
            lines, lost = await _telnet_on_full_disk(port, start)
            start += 50_000
            notes.append(f"telnet 50,000 puts: {len(lines)} lines naming {lost} lost")
            if lines:
                notes.append(f"e.g. {lines[0][:120]!r}")
            filler.unlink()
            status, _ = await put("?sync", start, 1000)
            notes.append(f"space back: ?sync {status} (no restart)")
            seconds = time.perf_counter() - t0
            peak = rss_mb(pid)
            v99, p99 = probe.p99_since(mark)
            vmax = probe.max_since(mark)
    finally:
        await stop_daemon(stop, prober, process)
    growth = peak - rss0
    return Row("disk_full_tmpfs", "; ".join(notes), seconds, growth, growth, v99, p99, "", vmax)


async def _telnet_on_full_disk(port: int, start: int) -> tuple[list[str], int]:
    """50,000 telnet puts on the full disk: the error lines, and the points they name."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"".join(b"put disk.m %d %d h=a\n" % (BASE + i, i) for i in range(start, start + 50_000))
    )
    lines: list[str] = []
    lost = 0
    with contextlib.suppress(TimeoutError):  # every batch answered: nothing for 5 s
        while line := (await asyncio.wait_for(reader.readline(), 5)).decode().rstrip("\n"):
            lines.append(line)
            found = re.search(r": (\d+) data points? not stored$", line)
            lost += int(found[1]) if found else 1
    writer.close()
    return lines, lost


def print_table(rows: list[Row]) -> None:
    print(
        f"{'case':<22} {'secs':>6} {'RSS peak':>9} {'RSS after':>9} {'ver p99':>8} "
        f"{'ver max':>8} {'put p99':>8} {'CPU after':>10}  answer"
    )
    for r in rows:
        print(
            f"{r.case:<22} {r.seconds:6.2f} {r.rss_peak:7.0f}MB {r.rss_after:7.0f}MB "
            f"{r.version_p99:6.1f}ms {r.version_max:6.1f}ms {r.put_p99:6.1f}ms "
            f"{r.cpu_after:>10}  {r.answer}"
        )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tsd-abuse-") as tmp:
        data_dir = Path(tmp) / "data"
        t0 = time.perf_counter()
        await load(data_dir, args.series)
        if not args.only or "put_64mib_body" in args.only:
            big_put_body()
        print(f"loaded {args.series} series in {time.perf_counter() - t0:.0f} s", flush=True)
        port = free_port()
        process = await start_daemon(data_dir, port)
        pid = process.pid
        probe = Probe(port)
        stop = asyncio.Event()
        prober = asyncio.create_task(probe.run(stop))
        rows = []
        try:
            await asyncio.sleep(0.2)
            mark = probe.mark()
            await asyncio.sleep(3)
            v99, p99 = probe.p99_since(mark)
            vmax = probe.max_since(mark)
            rows.append(Row("baseline (idle)", "probe only", 3.0, 0, 0, v99, p99, "", vmax))
            for name, fn in CASES.items():
                if args.only and name not in args.only:
                    continue
                rows.append(await run_case(name, fn, port, pid, probe))
                print(f"  {name}: done", flush=True)
        finally:
            await stop_daemon(stop, prober, process)
        if not args.only or "sigterm" in args.only:
            rows.append(await sigterm_during_query(data_dir))
        if not args.only or "disk_full" in args.only:
            rows.append(await disk_full(Path(tmp)))
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--series", type=int, default=200_000)
    parser.add_argument("--only", nargs="*", default=[])
    asyncio.run(main(parser.parse_args()))
