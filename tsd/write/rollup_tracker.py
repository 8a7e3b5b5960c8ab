"""tsd's own rollups where points are stored as cells at once (HBase; the embedded store
with appends): dirty row-hours, rolled up from the stored rows once their hour is closed.

On the embedded store the head writes each row-hour out once, and its rollups are computed
then (tsd/write/head_flush.py). Where batches go to storage as single cells, nothing sees
a row whole, so the writer notes every row it stores (once per row and batch, as for
compaction) and :class:`RollupTracker` waits until the row's hour ended
``tsd.rollups.compute.grace`` seconds ago (:class:`~tsd.write.schedule.CompactionSchedule`'s
rule, without its spread), then reads the stored rows, 512 at a time, and writes their
rollup cells (the write-out's computation, :class:`~tsd.write.head_flush.RollupHook`). A
row written again later (a late point) is noted again and rolled up again from the whole
stored row. On close every noted row is rolled up, whatever its hour (a row of the open hour
gets rolled up again once more points arrive after the restart).

Cost on HBase: one read of each row-hour after it closes (the rows' cells, once), beside
OpenTSDB's compaction which reads them too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from tsd.codec.const import FAMILY, TIMESTAMP_BYTES
from tsd.errors import StorageError
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.storage.base import Storage
from tsd.tasks import cancel_and_wait
from tsd.write.head_flush import RollupHook, write_rollups
from tsd.write.schedule import CompactionSchedule

__all__ = ["RollupTracker"]

log = get_logger(WRITER)

#: rows read and rolled up per round
CHUNK_ROWS = 512


class RollupTracker:
    """Row-hours stored as cells, rolled up once closed."""

    def __init__(
        self,
        storage: Storage,
        table: str,
        hook: RollupHook,
        registry: StatsRegistry,
        *,
        time_at: int,
        fix_duplicates: bool,
        grace_s: float,
        wall_clock: Callable[[], float],
        tick_s: float = 5.0,
    ) -> None:
        self._storage = storage
        self._table = table
        self._hook = hook
        self._time_at = time_at
        self._fix_duplicates = fix_duplicates
        self._schedule = CompactionSchedule(grace_s=grace_s, spread_s=0)
        self._clock = wall_clock
        self._tick_s = tick_s
        self._task: asyncio.Task[None] | None = None
        self._rows = registry.counter("rollup.computed", type="rows")
        self._cells = registry.counter("rollup.computed", type="cells")
        registry.gauge("rollup.pending_rows", lambda: len(self._schedule))

    def note(self, rows: Iterable[bytes]) -> None:
        """Rows just stored (their rollups are due once their hour is closed)."""
        start, end = self._time_at, self._time_at + TIMESTAMP_BYTES
        now = self._clock()
        note = self._schedule.note
        for row in rows:
            note(row, int.from_bytes(row[start:end], "big"), now)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            try:
                await self.roll_due()
            except StorageError as exc:
                log.warning("rollup.failed", error=str(exc))
            except Exception:  # a bug must not end the rollups for the daemon's lifetime
                log.exception("rollup.crashed")

    async def roll_due(self, *, everything: bool = False) -> int:
        """Roll up the rows whose hour is closed (``everything``: every noted row); the
        rows rolled up. Rows storage fails to give are noted again for the next round."""
        now = float("inf") if everything else self._clock()
        rows = self._schedule.take_eligible(now)
        done = 0
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start : start + CHUNK_ROWS]
            try:
                block = await self._storage.get_blocks(self._table, chunk, (FAMILY,))
                cells = await write_rollups(
                    self._storage, self._hook, block, fix_duplicates=self._fix_duplicates
                )
            except StorageError:
                self.note(rows[start:])
                raise
            done += len(chunk)
            self._rows.inc(len(block))
            self._cells.inc(cells)
        return done

    async def close(self) -> None:
        """Stop the task and roll up every noted row."""
        await cancel_and_wait(self._task)
        self._task = None
        try:
            await self.roll_due(everything=True)
        except StorageError as exc:
            log.error("rollup.close_incomplete", rows=len(self._schedule), error=str(exc))
