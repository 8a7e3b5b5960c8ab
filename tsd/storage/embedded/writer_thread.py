"""The single writer thread: serialises LMDB write transactions and group-commits them.

LMDB allows one write transaction at a time and a synced commit costs two
fsyncs, so every write goes through one thread. Operations that are queued
while it commits are applied together in the next transaction, in arrival
order, and committed once: concurrent ``mutate`` calls share the fsync. Each
operation still sees the effects of the ones before it, which is what makes
increment and check-and-put atomic without locks.

If any operation of a group fails, the group's transaction is aborted (nothing
of it is written) and its operations are retried one transaction each, so a bad
operation fails alone and no operation is ever half applied. An operation whose
caller was cancelled still runs: cancellation does not undo a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

import lmdb

#: flush a group at this many cells even if more operations are waiting, to bound the
#: dirty pages (memory) of one transaction
MAX_GROUP_CELLS = 100_000
MAX_GROUP_OPS = 1024

WriteFn = Callable[["lmdb.Transaction[bytes]"], Any]


class _Op:
    __slots__ = ("fn", "future", "loop", "cells", "solo")

    def __init__(
        self,
        fn: WriteFn,
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        cells: int,
        solo: bool,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.cells = cells
        self.solo = solo


class WriterThread:
    """Runs write functions ``fn(txn)`` on one thread; ``submit`` returns their future."""

    def __init__(
        self, env: lmdb.Environment, map_error: Callable[[BaseException], BaseException]
    ) -> None:
        self._env = env
        self._map_error = map_error
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tsd-lmdb-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: WriteFn, cells: int = 1, solo: bool = False) -> asyncio.Future[Any]:
        """Queue ``fn``; ``solo`` operations get a transaction of their own."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Op(fn, future, loop, cells, solo))
        return future

    def stop(self) -> None:
        """Finish the queued operations, then end the thread (blocking)."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        carry: _Op | None = None
        while True:
            op = carry if carry is not None else self._queue.get()
            carry = None
            if op is None:
                return
            group = [op]
            cells = op.cells
            stop = False
            while not op.solo and cells < MAX_GROUP_CELLS and len(group) < MAX_GROUP_OPS:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                if more.solo:
                    carry = more
                    break
                group.append(more)
                cells += more.cells
            self._commit(group)
            if stop:
                return

    def _commit(self, group: list[_Op]) -> None:
        try:
            with self._env.begin(write=True) as txn:
                results = [op.fn(txn) for op in group]
        except BaseException as exc:  # delivered to the caller
            if len(group) == 1:
                self._deliver(group[0], None, self._map_error(exc))
                return
            for op in group:
                self._commit([op])
            return
        for op, result in zip(group, results, strict=True):
            self._deliver(op, result, None)

    @staticmethod
    def _deliver(op: _Op, result: Any, error: BaseException | None) -> None:
        def settle() -> None:
            if op.future.done():
                return
            if error is not None:
                op.future.set_exception(error)
            else:
                op.future.set_result(result)

        # The caller's loop may have closed meanwhile; nobody is waiting then.
        with contextlib.suppress(RuntimeError):
            op.loop.call_soon_threadsafe(settle)
