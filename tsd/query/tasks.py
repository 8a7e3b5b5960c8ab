"""Running a query's concurrent steps: all succeed, or the first failure stops the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

__all__ = ["all_or_none"]

T = TypeVar("T")


async def all_or_none(coros: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Run concurrently; the results in order, or the first failure with the others
    cancelled (a failed bucket scan must not leave its siblings reading)."""
    if not coros:
        return []
    if len(coros) == 1:
        return [await coros[0]]
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        if pending:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)
        # Every failure is retrieved (asyncio logs "Task exception was never retrieved"
        # for the others otherwise); the first in order is raised.
        errors = [t.exception() for t in tasks if t.done() and not t.cancelled()]
        for error in errors:
            if error is not None:
                raise error
        return [task.result() for task in tasks]
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise
