"""The clock that times a read's decoding (``decodeTime``): the thread's CPU where the
work runs in a worker thread, the wall clock on the event loop's thread (small work runs
there inline, alone), sparing a system call per read."""

from __future__ import annotations

import asyncio
import time

from tsd.query.compute import ComputeSlots, work_clock


async def test_the_loop_thread_times_by_the_wall_clock_a_worker_by_its_cpu() -> None:
    slots = ComputeSlots(1)
    inline = await slots.sized(1, work_clock)
    off_loop = await slots.sized(None, work_clock)
    assert inline is time.perf_counter
    assert off_loop is time.thread_time
    assert await asyncio.to_thread(work_clock) is time.thread_time
