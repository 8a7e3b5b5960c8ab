"""Which rows to compact, and when: OpenTSDB's compaction without its hourly storms. Pure.

OpenTSDB queues every row it writes and, every ``tsd.storage.compaction.flush_interval``
seconds, compacts queued rows whose hour ended more than a second ago: at the top of each
hour every series of the previous hour is rewritten at once (behaviour doc §4.4, §7 item 2).

Here the writer reports the rows it stored (once per row and flush, not per point) and
:class:`CompactionSchedule` hands them out gradually: an hour becomes *eligible*
``grace_s`` after it ends (late points from collectors that buffer still land before its
compaction), and its rows are released in proportion to the time elapsed since then, so
that they are all compacted ``spread_s`` later. The rate follows the number of rows, not
the clock's position in the hour. A row written again after its compaction is queued
again and compacted again (its new single cells merged into the compacted one).

An hour first seen after it became eligible (imported history) is spread from the moment
it was first seen, so an import does not cause a storm either. ``now`` is wall-clock Unix
seconds, passed in by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tsd.codec.const import MAX_TIMESPAN

#: Seconds after an hour ends before its rows are compacted: collectors that batch (tcollector
#: every few seconds, Telegraf every 10 s, collectd on flush) still deliver that hour's last
#: points first.
DEFAULT_GRACE_S = 60.0
#: Seconds over which an hour's rows are compacted once eligible.
DEFAULT_SPREAD_S = 600.0
#: Rows tracked at most; beyond it new rows are not queued (they stay uncompacted, which
#: readers accept) so that memory stays bounded with millions of series.
DEFAULT_MAX_ROWS = 2_000_000


@dataclass(slots=True)
class _Hour:
    eligible_at: float
    rows: set[bytes] = field(default_factory=set)  # queued, not yet sorted into ``order``
    order: list[bytes] = field(default_factory=list)  # sorted, handed out from ``position``
    position: int = 0
    released: int = 0  # rows handed out so far
    seen: int = 0  # rows queued so far (released + waiting)

    def waiting(self) -> int:
        return len(self.rows) + len(self.order) - self.position


@dataclass(slots=True)
class CompactionSchedule:
    """Rows waiting for compaction, per hour (base time in seconds)."""

    grace_s: float = DEFAULT_GRACE_S
    spread_s: float = DEFAULT_SPREAD_S
    max_rows: int = DEFAULT_MAX_ROWS
    _hours: dict[int, _Hour] = field(default_factory=dict)
    _rows: int = 0
    #: rows not queued because ``max_rows`` was reached
    dropped: int = 0

    def __len__(self) -> int:
        return self._rows

    def note(self, row_key: bytes, base_time_s: int, now: float) -> None:
        """Queue a row the writer just stored."""
        hour = self._hours.get(base_time_s)
        if hour is None:
            ends = base_time_s + MAX_TIMESPAN + self.grace_s
            hour = self._hours[base_time_s] = _Hour(eligible_at=max(ends, now))
        if row_key in hour.rows:
            return
        if self._rows >= self.max_rows:
            self.dropped += 1
            return
        hour.rows.add(row_key)
        hour.seen += 1
        self._rows += 1

    def take(self, now: float) -> list[bytes]:
        """The rows to compact now: each eligible hour's quota for the time elapsed."""
        taken: list[bytes] = []
        for base_time_s in sorted(self._hours):
            hour = self._hours[base_time_s]
            if now < hour.eligible_at:
                continue
            fraction = min(1.0, (now - hour.eligible_at) / self.spread_s) if self.spread_s else 1
            quota = math.ceil(hour.seen * fraction) - hour.released
            taken.extend(self._pop(base_time_s, hour, quota))
        return taken

    def take_eligible(self, now: float) -> list[bytes]:
        """Every row of every eligible hour (shutdown: nothing is left for later)."""
        taken: list[bytes] = []
        for base_time_s in sorted(self._hours):
            hour = self._hours[base_time_s]
            if now >= hour.eligible_at:
                taken.extend(self._pop(base_time_s, hour, hour.waiting()))
        return taken

    def next_due(self) -> float | None:
        """The earliest ``eligible_at`` of an hour with rows waiting, None if none."""
        due = [hour.eligible_at for hour in self._hours.values() if hour.waiting()]
        return min(due, default=None)

    def _pop(self, base_time_s: int, hour: _Hour, quota: int) -> list[bytes]:
        taken: list[bytes] = []
        while quota > 0:
            if hour.position >= len(hour.order):
                if not hour.rows:
                    break
                # Sort once per refill, not per tick: storage likes sorted batches.
                hour.order = sorted(hour.rows)
                hour.position = 0
                hour.rows.clear()
            chunk = hour.order[hour.position : hour.position + quota]
            hour.position += len(chunk)
            quota -= len(chunk)
            taken.extend(chunk)
        hour.released += len(taken)
        self._rows -= len(taken)
        if not hour.waiting():
            # Forget the hour: a late write starts a fresh entry, eligible at once.
            del self._hours[base_time_s]
        return taken
