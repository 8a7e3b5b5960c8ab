"""A year-long panel from tsd's own rollups, beside the same query on the raw data.

``--series`` series (default 100) x ``--days`` days (default 365) at 60 s (100 x 365:
52.6 M points) of a two-decimal random walk are generated straight into a new embedded
store as the head writes rows out (one compacted cell per row-hour, built with numpy:
loading 52.6 M points through the wire would take most of an hour here), then rolled up by
``tsdb rollup-backfill``'s code (the write-out's computation: the same cells), timed. A
real daemon (``python -m tsd tsd``, every setting at its default but the port and the
query limits, which the raw side needs) is started on the store and asked over HTTP
``sum:1h-avg`` over the whole range, ``--rounds`` times each way, rounds alternating
(which goes first alternates too):

* ``rollups``: no ``rollupUsage``: tsd reads its own rollups (``tsd.rollups.compute`` is
  on by default on the embedded store);
* ``raw``: ``rollupUsage=ROLLUP_RAW``: the same answer from the 52.6 M points.

Every answer of both is checked equal to the first raw one (the daemon has no result
cache); p50 and the ratio are printed, and the daemon's CPU time per query (from
/proc/<pid>/stat, 10 ms ticks), which other work on the machine does not inflate as it
does the wall time. The target (issue 12): rollups' p50 <= 200 ms.

Run: ``python -m bench.rollup_query [--series N] [--days D] [--rounds N] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson

from tsd.codec import KeyLayout, make_series_key
from tsd.codec.const import FAMILY, FLAG_FLOAT
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.query.rollup_compute import ComputedRollups
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables, rollup_setup
from tsd.tools.common import ToolStore
from tsd.tools.rollup_backfill import backfill
from tsd.uid.service import UidService

T0 = 1356998400  # 2013-01-01 00:00:00 UTC
STEP = 60
METRIC = "bench.rollup"
SEED = 20261125
#: hours generated per storage write
HOURS_PER_WRITE = 24


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def generate(data_dir: Path, n_series: int, days: int) -> tuple[int, float, float]:
    """Raw rows (one compacted cell per series-hour), then their rollups; (points, seconds
    to write the rows, seconds to roll them up)."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True), storage=StorageConfig(data_dir=str(data_dir))
    )
    setup = rollup_setup(cfg)
    assert setup.effective is not None
    assert setup.computes
    storage = EmbeddedStorage(data_dir)
    try:
        await ensure_tables(storage, cfg.storage, setup.tables())
        uids = UidService(storage, cfg)
        layout = KeyLayout.from_storage_config(cfg.storage)
        metric = await uids.metrics.assign(METRIC)
        host = await uids.tagk.assign("host")
        keys = [
            make_series_key(layout, metric, [(host, await uids.tagv.assign(f"h{s:03d}"))])
            for s in range(n_series)
        ]
        per_hour = 3600 // STEP
        offsets = np.arange(per_hour, dtype=np.int64) * STEP
        # 8-byte doubles: flags FLAG_FLOAT | 7 (the compacted cell ends with its meta byte 0)
        qualifier = ((offsets << 4) | FLAG_FLOAT | 0x7).astype(">u2").tobytes()
        rng = np.random.default_rng(SEED)
        level = np.round(rng.uniform(0, 1000, size=(n_series, 1)), 2)
        hours = days * 24
        t0 = time.perf_counter()
        for first in range(0, hours, HOURS_PER_WRITE):
            count = min(HOURS_PER_WRITE, hours - first)
            steps = np.round(rng.normal(0, 1, size=(n_series, count * per_hour)), 2)
            walk = np.round(level + np.cumsum(steps, axis=1), 2)
            level = walk[:, -1:]
            values = walk.reshape(n_series, count, per_hour).astype(">f8")
            puts = []
            for h in range(count):
                base = T0 + (first + h) * 3600
                for s, key in enumerate(keys):
                    cell = values[s, h].tobytes() + b"\x00"
                    puts.append(Put(key.row_key(base), FAMILY, qualifier, cell))
            await storage.put(cfg.storage.data_table, puts)
        written = time.perf_counter() - t0
        effective = setup.effective
        computed = ComputedRollups.from_config(effective, effective.intervals, layout)
        t1 = time.perf_counter()
        await backfill(ToolStore(cfg, storage, uids), computed, T0, T0 + hours * 3600, sys.stdout)
        rolled = time.perf_counter() - t1
    finally:
        await storage.close()
    return n_series * hours * per_hour, written, rolled


@contextlib.asynccontextmanager
async def daemon(data_dir: Path) -> AsyncIterator[tuple[str, int]]:
    """``python -m tsd tsd`` on the store; yields its base URL and process id."""
    port = _free_port()
    conf = data_dir.parent / "bench.conf"
    conf.write_text(
        f"tsd.network.port = {port}\n"
        f"tsd.storage.data_dir = {data_dir}\n"
        "tsd.query.timeout = 600000\n"
        "tsd.query.limits.memory = 17179869184\n"
        "tsd.query.memory_budget = 17179869184\n"
        "tsd.query.limits.buckets = 1000000000\n"
        "tsd.logging.level = warning\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tsd", "tsd", "--config", str(conf),
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{base}/api/version") as reply:
                        if reply.status == 200:
                            break
                if proc.returncode is not None:
                    raise RuntimeError(f"the daemon exited with {proc.returncode}")
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("the daemon did not answer")
        yield base, proc.pid
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 120)


def cpu_s(pid: int) -> float:
    """The process's user and system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(days: int, raw: bool) -> bytes:
    sub: dict[str, Any] = {"aggregator": "sum", "metric": METRIC, "downsample": "1h-avg"}
    if raw:
        sub["rollupUsage"] = "ROLLUP_RAW"
    return orjson.dumps({"start": T0, "end": T0 + days * 86400 - 1, "queries": [sub]})


async def ask(session: aiohttp.ClientSession, base: str, payload: bytes) -> tuple[float, Any]:
    t = time.perf_counter()
    async with session.post(f"{base}/api/query", data=payload) as reply:
        text = await reply.read()
        elapsed = time.perf_counter() - t
        if reply.status != 200:
            raise RuntimeError(f"query failed: {reply.status} {text[:300]!r}")
    return elapsed, orjson.loads(text)


async def main(args: argparse.Namespace) -> None:
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsd-rollup-bench-"))
    data_dir = tmp / "data"
    try:
        if not (data_dir / "data.mdb").exists() and not any(data_dir.glob("*")):
            data_dir.mkdir(parents=True, exist_ok=True)
            points, written, rolled = await generate(data_dir, args.series, args.days)
            print(
                f"generated {points / 1e6:.1f} M points ({args.series} series x {args.days} "
                f"days at {STEP} s): rows written in {written:.1f} s, rolled up in "
                f"{rolled:.1f} s ({points / rolled / 1e6:.2f} M points/s)"
            )
        async with daemon(data_dir) as (base, pid), aiohttp.ClientSession() as session:
            _, reference = await ask(session, base, body(args.days, raw=True))
            points_out = sum(len(s["dps"]) for s in reference)
            times: dict[str, list[float]] = {"rollups": [], "raw": []}
            cpu: dict[str, list[float]] = {"rollups": [], "raw": []}
            for r in range(args.rounds):
                order = ["rollups", "raw"] if r % 2 == 0 else ["raw", "rollups"]
                for name in order:
                    before = cpu_s(pid)
                    elapsed, answer = await ask(session, base, body(args.days, name == "raw"))
                    cpu[name].append(cpu_s(pid) - before)
                    if answer != reference:
                        raise SystemExit(f"{name} answer differs from the raw reference")
                    times[name].append(elapsed)
            roll, raw = statistics.median(times["rollups"]), statistics.median(times["raw"])
            print(
                f"sum:1h-avg over {args.days} days of {args.series} series "
                f"({points_out} output points), {args.rounds} rounds alternating, answers equal:"
            )
            for name, p50 in (("rollups", roll), ("raw", raw)):
                print(
                    f"  {name:<7} p50 {p50 * 1000:8.1f} ms  (all: {_ms(times[name])}); daemon "
                    f"CPU p50 {statistics.median(cpu[name]) * 1000:.0f} ms"
                )
            print(f"  raw / rollups: {raw / roll:.1f}x; target rollups p50 <= 200 ms: "
                  f"{'met' if roll <= 0.2 else 'NOT met'}")  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1000:.0f}" for v in values)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep", metavar="DIR", help="keep (and reuse) the store in DIR")
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
