"""Write-path parsing speed: telnet put lines/s and /api/put JSON points/s, with baselines.

Telnet: a realistic stream (collectd-, tcollector- and Telegraf-style lines with 2-4 tags)
fed in 64 KiB chunks through ``LineBuffer`` + ``parse_command`` (framing, typing, name
checks, DataPoint), against a bare ``splitlines`` + ``split`` + ``int``/``float`` over the
same bytes (what a parser that checks nothing would cost).

JSON: a 1,000-point body through ``parse_put_body``, against a bare ``orjson.loads`` of the
same body. Also the same body with one bad point, which sends it down the exact path (the
stdlib decoder keeping numbers as text) to build the error echo.

Run: ``python -m bench.parse [--lines N] [--points N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from tsd.protocol.put_json import parse_put_body
from tsd.protocol.put_reply import PutError
from tsd.protocol.telnet import LineBuffer, PutCommand, parse_command

CHUNK = 64 * 1024


def make_stream(count: int) -> bytes:
    templates = [
        "put memory.used.memory {ts} {i} fqdn=cd-test-host  env=test\r\n",
        "put load.load.shortterm {ts} 0.{i} fqdn=cd-test-host  env=test\r\n",
        "put test.ms {ts}123 {i} dev=sda env=test host=vm\n",
        "put cpu_usage_idle {ts} 99.{i:06d} cpu=cpu-total host=vm dc=lga region=us\n",
    ]
    return "".join(
        templates[i % len(templates)].format(ts=1795236716 + i // 100, i=i) for i in range(count)
    ).encode()


def make_body(count: int, bad_at: int | None = None) -> bytes:
    points = [
        {
            "metric": f"sys.cpu.{i % 20}",
            "timestamp": 1795236716 + i,
            "value": i if i % 2 else i + 0.5,
            "tags": {"host": f"web{i % 50:02d}", "cpu": str(i % 8), "dc": "lga"},
        }
        for i in range(count)
    ]
    if bad_at is not None:
        points[bad_at]["value"] = "x"
    return orjson.dumps(points)


def tsd_telnet(stream: bytes) -> int:
    buffer = LineBuffer(1024 * 1024)
    done = 0
    for start in range(0, len(stream), CHUNK):
        buffer.feed(stream[start : start + CHUNK])
        while (line := buffer.maybe_next_line()) is not None:
            command = parse_command(line)
            assert isinstance(command, PutCommand)
            done += 1
    return done


def bare_telnet(stream: bytes) -> int:
    done = 0
    for line in stream.splitlines():
        words = line.split()
        int(words[2])
        value = words[3]
        _ = float(value) if b"." in value or b"e" in value else int(value)
        done += 1
    return done


def tsd_json(body: bytes) -> int:
    return len(parse_put_body(body))


def bare_json(body: bytes) -> int:
    return len(orjson.loads(body))


def best_rate(work: Callable[[], int], repeat: int) -> float:
    """Items per second, best of ``repeat`` runs."""
    best = float("inf")
    items = 0
    for _ in range(repeat):
        start = time.perf_counter()
        items = work()
        best = min(best, time.perf_counter() - start)
    return items / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--points", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    stream = make_stream(args.lines)
    tsd_rate = best_rate(lambda: tsd_telnet(stream), args.repeat)
    bare_rate = best_rate(lambda: bare_telnet(stream), args.repeat)
    print(f"telnet put, {args.lines} lines ({len(stream) / args.lines:.0f} B/line):")
    print(f"  tsd LineBuffer+parse_command  {tsd_rate:12,.0f} lines/s")
    print(f"  bare split + int/float        {bare_rate:12,.0f} lines/s")
    print(f"  ratio tsd/bare                {tsd_rate / bare_rate:12.2f}")

    body = make_body(args.points)
    bad_body = make_body(args.points, bad_at=args.points // 2)
    assert sum(isinstance(r, PutError) for r in parse_put_body(bad_body)) == 1
    inner = max(1, 20_000 // args.points)  # several bodies per timing, for resolution

    def many(fn: Callable[[bytes], int], data: bytes) -> Callable[[], int]:
        return lambda: sum(fn(data) for _ in range(inner))

    json_rate = best_rate(many(tsd_json, body), args.repeat)
    bad_rate = best_rate(many(tsd_json, bad_body), args.repeat)
    loads_rate = best_rate(many(bare_json, body), args.repeat)
    print(f"/api/put JSON, {args.points}-point body ({len(body) / 1024:.0f} KiB):")
    print(f"  tsd parse_put_body            {json_rate:12,.0f} points/s")
    print(f"  tsd, one bad point (exact)    {bad_rate:12,.0f} points/s")
    print(f"  bare orjson.loads             {loads_rate:12,.0f} points/s")
    print(f"  ratio tsd/orjson              {json_rate / loads_rate:12.3f}")
    print(f"  ratio exact path/orjson       {bad_rate / loads_rate:12.3f}")


if __name__ == "__main__":
    main()
