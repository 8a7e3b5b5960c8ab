"""The query engine's compute slots: numpy work in worker threads, a few at a time.

Everything numeric of a query runs in worker threads, at most ``compute_slots`` at once,
so one big query neither blocks the event loop (ingest keeps flowing) nor takes every
core; small work (``INLINE_WORK``) stays on the event loop, where a thread hop would cost
more than the work. Within a slot, one big read's compiled kernels (they run without the
GIL) may be spread over the machine's cores (:func:`spread`): a fresh ``sum:1m-avg`` over
1,000 series reads 8.64 M points of the head, where VictoriaMetrics uses every core.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["INLINE_WORK", "ComputeSlots", "spread", "spread_parts", "work_clock"]

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


#: the machine's cores: :func:`spread`'s helper threads are one less
_CORES = os.cpu_count() or 1
#: a part of :func:`spread` at least this many points: below, a hand-over costs more
#: than the part's work (a compiled pass is a few ns a point)
SPREAD_POINTS = 250_000
#: parts per core at most: a core another process holds finishes fewer of them
SPREAD_SHARE = 3

_helpers: ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()


def spread_parts(points: int) -> int:
    """How many parts work over ``points`` points is cut into for :func:`spread` (1: no
    spreading, a single core or too little work)."""
    if _CORES < 2:
        return 1
    return max(1, min(_CORES * SPREAD_SHARE, points // SPREAD_POINTS))


def spread(work: Sequence[Callable[[], T]]) -> list[T]:
    """Each of ``work`` called, their results in order: by the calling thread and up to
    one less than the machine's cores helper threads (shared by every query), each
    taking the next part left until none is. Worth it for compiled work that releases the
    GIL; the first failure is raised once every part has stopped."""
    if len(work) <= 1 or _CORES < 2:
        return [fn() for fn in work]
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = []
    taken = itertools.count()  # next() of a count is atomic under the GIL

    def drain() -> None:
        while (i := next(taken)) < len(work) and not errors:
            try:
                results[i] = work[i]()
            except BaseException as exc:  # re-raised by the caller, below
                errors.append(exc)

    pool = _helper_pool()
    helping: list[Future[None]] = [
        pool.submit(drain) for _ in range(min(_CORES - 1, len(work) - 1))
    ]
    drain()
    for f in helping:
        if not f.cancel():  # started: it may be on a part yet (not started: none left)
            f.result()
    if errors:
        raise errors[0]
    return results


def _helper_pool() -> ThreadPoolExecutor:
    global _helpers
    with _helpers_lock:
        if _helpers is None:
            _helpers = ThreadPoolExecutor(max(1, _CORES - 1), thread_name_prefix="tsd-spread")
        return _helpers
