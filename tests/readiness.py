"""Waiting for a process the tests started (tsd, OpenTSDB, Prometheus) to answer HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

LOG_TAIL_CHARS = 3000


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL_CHARS:]


async def wait_http_ready(
    name: str,
    url: str,
    exit_code: Callable[[], int | None],
    log: Path,
    timeout_s: float,
    every_s: float = 0.1,
) -> None:
    """Poll ``url`` until it answers 200, ``timeout_s`` at most.

    ``exit_code`` tells whether the process has already exited (``Popen.poll`` or an
    asyncio process's ``returncode``): a process that died is reported at once with the
    tail of its ``log`` rather than waited for; so is one that never answered.
    """
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            code = exit_code()
            if code is not None:
                output = await asyncio.to_thread(_tail, log)
                raise RuntimeError(f"{name} exited ({code}):\n{output}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as reply:
                    if reply.status == 200:
                        return
            await asyncio.sleep(every_s)
    output = await asyncio.to_thread(_tail, log)
    raise RuntimeError(f"{name} did not answer {url} within {timeout_s}s:\n{output}")
