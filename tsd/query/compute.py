"""The query engine's compute slots: numpy work in worker threads, a few at a time.

Everything numeric of a query runs in worker threads, at most ``compute_slots`` at once,
so one big query neither blocks the event loop (ingest keeps flowing) nor takes every
core; small work (``INLINE_WORK``) stays on the event loop, where a thread hop would cost
more than the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["INLINE_WORK", "ComputeSlots", "work_clock"]

T = TypeVar("T")

#: Work up to this many points (or series, or bytes/4 of cell values) runs on the event loop:
#: a worker-thread hop costs a thread wake-up and two GIL hand-overs, milliseconds on a busy
#: machine, against well under a millisecond of numpy work at this size.
INLINE_WORK = 10_000


#: the thread of the daemon's event loop (the main one)
_LOOP_THREAD = threading.main_thread().ident


def work_clock() -> Callable[[], float]:
    """The clock that times a piece of work's CPU (the reads' ``decodeTime``) where it
    runs: ``time.thread_time`` in a worker thread; on the event loop's thread, where small
    work runs inline (:meth:`ComputeSlots.sized`) and nothing else runs meanwhile, the
    wall clock. The thread's CPU clock is a system call (about 13 us a call measured on
    the project's VM, twice per small read) where ``perf_counter`` is not (0.25 us)."""
    return time.perf_counter if threading.get_ident() == _LOOP_THREAD else time.thread_time


class ComputeSlots:
    """At most ``count`` worker threads computing for queries at once."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._slots = asyncio.Semaphore(count)
        self.busy = 0

    async def sized(self, work: int | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` on the event loop when ``work`` is known and at most ``INLINE_WORK``,
        else in a worker thread (:meth:`off_loop`)."""
        if work is not None and work <= INLINE_WORK:
            return fn(*args, **kwargs)
        return await self.off_loop(fn, *args, **kwargs)

    async def off_loop(
        self,
        fn: Callable[..., T],
        *args: Any,
        slots: asyncio.Semaphore | None = None,
        **kwargs: Any,
    ) -> T:
        """Run numpy work in a worker thread, at most ``count`` at once (in ``slots``: the
        compute slots unless given).

        The slot is held until the thread is done, even when the caller is cancelled (the
        thread cannot be interrupted; its query's cancel flag stops it at the next chunk),
        so cancelled work never pushes the threads past ``count``."""
        async with slots or self._slots:
            self.busy += 1
            work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                with contextlib.suppress(BaseException):
                    await work
                raise
            finally:
                self.busy -= 1
