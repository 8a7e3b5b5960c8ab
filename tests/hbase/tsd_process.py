"""A ``python -m tsd tsd`` subprocess on the test HBase, as a deployment runs it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp

from tests.hbase_harness import ROOT
from tsd.config import StorageConfig

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def hbase_keys(cfg: StorageConfig) -> dict[str, str]:
    """The keys of a tsd on ``cfg``'s HBase tables, compaction off."""
    return {
        "tsd.storage.backend": "hbase",
        "tsd.storage.hbase.thrift.host": cfg.thrift_host,
        "tsd.storage.hbase.thrift.port": str(cfg.thrift_port),
        "tsd.storage.hbase.data_table": cfg.data_table,
        "tsd.storage.hbase.uid_table": cfg.uid_table,
        "tsd.storage.hbase.tree_table": cfg.tree_table,
        "tsd.storage.hbase.meta_table": cfg.meta_table,
        "tsd.storage.enable_compaction": "false",
    }


@contextlib.asynccontextmanager
async def tsd_process(
    cfg: StorageConfig, log: Path, extra: Mapping[str, str] | None = None
) -> AsyncIterator[int]:
    """``python -m tsd tsd`` on ``cfg``'s tables (its data directory, for the log, next to
    ``log``); yields its port once it answers HTTP, and stops it with SIGTERM (which
    drains what it accepted) afterwards. ``extra``: more ``--set`` keys (they win)."""
    port = free_port()
    keys = {
        **hbase_keys(cfg),
        "tsd.storage.data_dir": str(log.with_suffix(".data")),
        **(extra or {}),
    }
    settings = [arg for key, value in keys.items() for arg in ("--set", f"{key}={value}")]
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", str(port)],
            *["--auto-metric", *settings],
            cwd=ROOT,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
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
            process.kill()
            await process.wait()
            raise


async def wait_ready(process: asyncio.subprocess.Process, port: int, log: Path) -> None:
    async with asyncio.timeout(START_TIMEOUT_S), aiohttp.ClientSession() as http:
        while True:
            if process.returncode is not None:
                output = await asyncio.to_thread(log.read_text)
                raise RuntimeError(f"tsd exited ({process.returncode}):\n{output}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{port}/api/version") as reply:
                    if reply.status == 200:
                        return
            await asyncio.sleep(0.1)
