"""Stopping a background task: one rule for every service that runs one (the head's
write-out, the HBase spool's drain, rollup and meta tracking, the writer's compaction)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended, so nothing of it runs after the caller's
    close goes on (its own CancelledError is expected and swallowed). None: nothing runs."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
