"""Helpers for the server tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(condition: Callable[[], bool], attempts: int = 1000) -> None:
    """Wait (polling the loop) until ``condition()`` holds; fail after ``attempts`` tries.

    For state the server updates after the client side has already returned (a closed
    connection being noticed), not for timing.
    """
    for _ in range(attempts):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"condition never held: {condition}")
