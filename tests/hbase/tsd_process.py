"""A ``python -m tsd tsd`` subprocess on the test HBase's tables, as a deployment runs it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from tests.hbase.opentsdb import tsd_hbase_keys
from tests.readiness import wait_http_ready
from tsd.config import StorageConfig

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tsd_argv(
    cfg: StorageConfig, port: int, data_dir: Path, extra: Mapping[str, str] | None = None
) -> list[str]:
    """``python -m tsd tsd`` on ``cfg``'s tables, its write-ahead log under ``data_dir``;
    ``extra``: more keys (they win)."""
    keys = {**tsd_hbase_keys(cfg, data_dir), **(extra or {})}
    settings = [arg for key, value in keys.items() for arg in ("--set", f"{key}={value}")]
    return [
        *[sys.executable, "-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", str(port)],
        *["--auto-metric", *settings],
    ]


@contextlib.asynccontextmanager
async def tsd_process(
    cfg: StorageConfig, log: Path, extra: Mapping[str, str] | None = None
) -> AsyncIterator[int]:
    """``python -m tsd tsd`` on ``cfg``'s tables (its data directory named after ``log``);
    yields its port once it answers HTTP, and stops it with SIGTERM (which drains what it
    accepted) afterwards. ``extra``: more keys (they win)."""
    process, port = await launch(cfg, log, extra)
    try:
        await wait_ready(process, port, log)
        yield port
    finally:
        if process.returncode is None:
            process.terminate()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await process.wait()
        except TimeoutError:
            process.send_signal(signal.SIGQUIT)  # the daemon logs where every task waits
            await asyncio.sleep(1.0)
            process.kill()
            await process.wait()
            output = await asyncio.to_thread(log.read_text, errors="replace")
            raise AssertionError(
                f"tsd did not stop in {STOP_TIMEOUT_S} s:\n{output[-20000:]}"
            ) from None


async def launch(
    cfg: StorageConfig, log: Path, extra: Mapping[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``python -m tsd tsd`` on ``cfg``'s tables (output to ``log``, its data directory
    named after it): the process and its port (it answers once :func:`wait_ready`)."""
    port = free_port()
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *tsd_argv(cfg, port, log.with_suffix(""), extra),
            cwd=log.parent,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    return process, port


async def wait_ready(process: asyncio.subprocess.Process, port: int, log: Path) -> None:
    url = f"http://127.0.0.1:{port}/api/version"
    await wait_http_ready("tsd", url, lambda: process.returncode, log, START_TIMEOUT_S)
