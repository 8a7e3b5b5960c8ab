"""What authentication and TLS cost per HTTP request: the open daemon (origin guard only)
against the same daemon with basic auth, and with basic auth over TLS on the same port.

Three ``tsdb tsd`` processes on the embedded store, pinned to CPU 0 when there are two CPUs;
one keep-alive client sends ``--requests`` /api/put bodies of 50 points (steady series) and
as many GET /api/version, to each in turn, rounds alternating (``--repeat``, best kept).
Printed: requests/s (wall) and requests per CPU-second of the daemon, and each ratio
against the open daemon measured in the same run.

Run: ``python -m bench.security [--requests N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench.ingest import cpu_seconds, pin

BASE_TS = int(time.time()) - 7200
SECRET = secrets.token_hex(16)


async def start(data_dir: Path, *flags: str) -> tuple[asyncio.subprocess.Process, int]:
    process = await asyncio.create_subprocess_exec(
        *pin(0), sys.executable, "-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", "0",
        "--auto-metric", "--data-dir", str(data_dir), "--set", "tsd.logging.format=json",
        *flags, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    while line := await process.stderr.readline():
        event = orjson.loads(line)
        if event.get("event") == "daemon.started":
            asyncio.ensure_future(process.stderr.read())
            return process, int(event["port"])
    raise RuntimeError("tsd did not start")


def bodies(count: int) -> list[bytes]:
    return [
        orjson.dumps(
            [
                {"metric": "bench.sec", "timestamp": BASE_TS + n, "value": n,
                 "tags": {"host": f"h{i}"}}
                for i in range(50)
            ]
        )
        for n in range(count)
    ]  # fmt: skip


async def one_round(
    port: int, pid: int, scheme: str, headers: dict[str, str], tls: ssl.SSLContext | None,
    payloads: list[bytes],
) -> tuple[float, float]:  # fmt: skip
    """(requests/s, requests per daemon CPU-second) for the puts and as many version GETs."""
    base = f"{scheme}://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=1, ssl=tls if tls is not None else True)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        cpu_start, start = cpu_seconds(pid), time.perf_counter()
        for body in payloads:
            async with http.post(base + "/api/put", data=body) as reply:
                assert reply.status == 204, reply.status
            async with http.get(base + "/api/version") as reply:
                assert reply.status == 200
        wall = time.perf_counter() - start
        cpu = max(cpu_seconds(pid) - cpu_start, 1e-3)
    requests = 2 * len(payloads)
    return requests / wall, requests / cpu


def prepare(root: Path) -> tuple[Path, Path, Path]:
    """The credentials file and a self-signed certificate (the openssl command)."""
    users = root / "users"
    users.write_text(f"bench admin sha256:{hashlib.sha256(SECRET.encode()).hexdigest()}\n")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return users, cert, key


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        users, cert, key = await asyncio.to_thread(prepare, root)
        auth = ["--set", "tsd.core.authentication.enable=true",
                "--set", f"tsd.core.authentication.users_file={users}"]  # fmt: skip
        tls_flags = ["--set", f"tsd.network.tls.cert={cert}", "--set", f"tsd.network.tls.key={key}"]
        basic = {"Authorization": aiohttp.encode_basic_auth("bench", SECRET)}
        client_tls = ssl.create_default_context(cafile=str(cert))
        setups = {
            "open": ((), "http", {}, None),
            "basic auth": (auth, "http", basic, None),
            "basic auth + TLS": (auth + tls_flags, "https", basic, client_tls),
        }
        servers = {}
        for i, (name, (flags, *_)) in enumerate(setups.items()):
            servers[name] = await start(root / f"data{i}", *flags)
        payloads = bodies(args.requests)
        best: dict[str, tuple[float, float]] = {}
        try:
            for _ in range(args.repeat):
                for name, (_, scheme, headers, tls) in setups.items():
                    process, port = servers[name]
                    rate = await one_round(port, process.pid, scheme, headers, tls, payloads)
                    best[name] = max(best.get(name, (0.0, 0.0)), rate)
        finally:
            for process, _ in servers.values():
                process.terminate()
                await process.wait()
    open_wall, open_cpu = best["open"]
    print(f"{'setup':<18} {'req/s':>9} {'req/CPU-s':>10} {'ratio wall':>11} {'ratio CPU':>10}")
    for name, (wall, cpu) in best.items():
        print(f"{name:<18} {wall:9.0f} {cpu:10.0f} {wall / open_wall:11.2f} {cpu / open_cpu:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="puts per round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per setup, best kept")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
