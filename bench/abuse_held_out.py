"""Issue 25's held-out abuse cases (second round) for :mod:`bench.abuse`: the transport and
bulk-endpoint ones. Each is a case function of the same shape (``(port, pid)`` -> the
answer and the daemon's CPU seconds after), run against the bench's daemon while its probe
measures the other clients' round trips.

* ``empty_lines_1m``: 1,000,000 empty telnet lines; every reply read.
* ``gzip_bomb_413``: a gzip body of 1 GiB of zeros (about 1 MB sent), then the same bytes
  again for 3 s: the 413, whether the connection is closed, what the client could still
  send, the daemon's CPU in those 3 s.
* ``chunked_endless_413``: the same with an endless chunked gzip body.
* ``expect_10gib``: ``Content-Length: 10 GiB`` with ``Expect: 100-continue``: the first line.
* ``tls_partial_hello``: a second daemon with TLS and a 3 s header timeout; half a
  ClientHello, then nothing: seconds until it is closed.
* ``uid_assign_20k``: 20,000 new names through /api/uid/assign, then 100,000 + 100,000.
* ``annotation_bulk_20k``: 20,000 annotations through /api/annotation/bulk.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

BASE = 1356998400
CaseFn = Callable[[int, int], Awaitable[tuple[str, str]]]


async def case_empty_lines(port: int, pid: int) -> tuple[str, str]:
    count = 1_000_000
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    writer.write(b"\n" * count + b"version\n")
    received = 0
    first = b""
    while True:
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        first = first or chunk[:40]
        received += len(chunk)
        if b"Built on" in chunk:
            break
    seconds = time.perf_counter() - t0
    writer.close()
    return (
        f"1,000,000 empty lines: {received / 1e6:.1f} MB of replies ({first[:33]!r}...) "
        f"in {seconds:.1f} s"
    ), ""


# -- bodies over tsd.http.request.max_body ----------------------------------------------------


@functools.cache
def _gzip_zeros(inflated: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join(
        [*(compressor.compress(block) for _ in range(inflated >> 20)), compressor.flush()]
    )


@functools.cache
def _gzip_endless() -> tuple[bytes, bytes]:
    """The start of a gzip stream (1 MiB of zeros, sync-flushed) and its next MiB: sent
    again and again, the second keeps the body inflating forever."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return first, compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_SYNC_FLUSH)


async def _over_the_limit(port: int, pid: int, head: bytes, pieces: list[bytes]) -> tuple[str, str]:
    """Send ``head``, then ``pieces`` round and round: the answer, then for 3 s what the
    client could still send and the daemon's CPU. Blocking sockets in two threads: a
    reply that arrives while the client is sending is read even if a reset follows it
    (asyncio's transport drops what it has not read when a write fails)."""
    from bench.abuse import cpu_s

    sock = socket.create_connection(("127.0.0.1", port))
    answered = threading.Event()
    sent_after = 0

    def send() -> None:
        nonlocal sent_after
        with contextlib.suppress(OSError):
            sock.sendall(head)
            while True:
                for piece in pieces:
                    sock.sendall(piece)
                    if answered.is_set():
                        sent_after += len(piece)

    def receive() -> tuple[bytes, float, str, float]:
        t0 = time.perf_counter()
        data = b""
        sock.settimeout(60)
        with contextlib.suppress(OSError):
            while b"\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
        seconds = time.perf_counter() - t0
        answered.set()
        cpu0 = cpu_s(pid)
        t1 = time.perf_counter()
        sock.settimeout(3)
        try:
            while sock.recv(65536):
                pass
            closed = f"closed (EOF) after {time.perf_counter() - t1:.2f} s"
        except TimeoutError:
            closed = "open after 3 s"
        except OSError:
            closed = f"closed (reset) after {time.perf_counter() - t1:.2f} s"
        time.sleep(max(0.0, 3 - (time.perf_counter() - t1)))
        cpu = cpu_s(pid) - cpu0
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # ends the sender if it is still blocked
        return data.split(b"\r\n", 1)[0], seconds, closed, cpu

    sending = asyncio.create_task(asyncio.to_thread(send))
    status, seconds, closed, cpu = await asyncio.to_thread(receive)
    await sending
    sock.close()
    return (
        f"{status.decode('latin-1') or 'no reply'} in {seconds:.2f} s, {closed}; "
        f"{sent_after / 1e6:.1f} MB sent after it",
        f"{cpu:.2f} of 3 s",
    )


async def case_gzip_bomb(port: int, pid: int) -> tuple[str, str]:
    bomb = await asyncio.to_thread(_gzip_zeros, 1 << 30)
    head = (
        b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
    )
    pieces = [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)]
    return await _over_the_limit(port, pid, head, pieces)


async def case_chunked_endless(port: int, pid: int) -> tuple[str, str]:
    first, again = _gzip_endless()
    head = (
        b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n" % (len(first), first)
    )
    return await _over_the_limit(port, pid, head, [b"%x\r\n%s\r\n" % (len(again), again)])


async def case_expect_10gib(port: int, pid: int) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10737418240\r\nExpect: 100-continue\r\n\r\n"
    )
    first = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return f"first line: {first.decode('latin-1').strip()}", ""


# -- TLS --------------------------------------------------------------------------------------


async def case_tls_partial_hello(port: int, pid: int) -> tuple[str, str]:
    """A second daemon (TLS on, tsd.network.header_timeout=3) on its own data directory."""
    from bench.abuse import free_port, start_daemon

    with tempfile.TemporaryDirectory(prefix="tsd-abuse-tls-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        openssl = await asyncio.create_subprocess_exec(
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if await openssl.wait() != 0:
            return "openssl failed: no certificate", ""
        tls_port = free_port()
        process = await start_daemon(
            Path(tmp) / "data",
            tls_port,
            "--set",
            f"tsd.network.tls.cert={cert}",
            "--set",
            f"tsd.network.tls.key={key}",
        )
        try:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            client = ssl.create_default_context(cafile=str(cert))
            tls = client.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.do_handshake()
            hello = outgoing.read()
            reader, writer = await asyncio.open_connection("127.0.0.1", tls_port)
            writer.write(hello[: len(hello) // 2])
            t0 = time.perf_counter()
            answer = "still open after 90 s"
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(reader.read(), 90)
                answer = f"closed after {time.perf_counter() - t0:.1f} s (header timeout 3 s)"
            writer.close()
        finally:
            process.terminate()
            await process.wait()
    return f"half a ClientHello: {answer}", ""


# -- bulk endpoints ---------------------------------------------------------------------------


async def _post(port: int, path: str, document: object) -> tuple[int, bytes, float]:
    timeout = aiohttp.ClientTimeout(total=600)
    body = orjson.dumps(document)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=timeout) as http:
        t0 = time.perf_counter()
        async with http.post(f"http://127.0.0.1:{port}{path}", data=body, headers=headers) as r:
            reply = await r.read()
        return r.status, reply, time.perf_counter() - t0


async def case_uid_assign(port: int, pid: int) -> tuple[str, str]:
    names = [f"abuse.assign.{i:06d}" for i in range(20_000)]
    status, _, seconds = await _post(port, "/api/uid/assign", {"metric": names})
    big = {
        "metric": [f"abuse.big.{i:06d}" for i in range(100_000)],
        "tagv": [f"abuse.big.{i:06d}" for i in range(100_000)],
    }
    big_status, reply, big_seconds = await _post(port, "/api/uid/assign", big)
    message = orjson.loads(reply).get("error", {}).get("message", "") if big_status != 200 else ""
    return (
        f"20,000 names: {status} in {seconds:.1f} s; 100,000 + 100,000: {big_status} "
        f"{message} in {big_seconds:.1f} s"
    ), ""


async def case_annotation_bulk(port: int, pid: int) -> tuple[str, str]:
    notes = [
        {"tsuid": f"0000010000010{i % 100:05X}", "startTime": BASE + i, "description": f"n{i}"}
        for i in range(20_000)
    ]
    status, reply, seconds = await _post(port, "/api/annotation/bulk", notes)
    saved = len(orjson.loads(reply)) if status == 200 else 0
    return f"20,000 notes: {status} ({saved} saved) in {seconds:.1f} s", ""


HELD_OUT_CASES: dict[str, CaseFn] = {
    "empty_lines_1m": case_empty_lines,
    "gzip_bomb_413": case_gzip_bomb,
    "chunked_endless_413": case_chunked_endless,
    "expect_10gib": case_expect_10gib,
    "tls_partial_hello": case_tls_partial_hello,
    "uid_assign_20k": case_uid_assign,
    "annotation_bulk_20k": case_annotation_bulk,
}
