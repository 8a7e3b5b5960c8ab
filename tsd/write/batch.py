"""The batching policy of the write path. Pure: no loop, no clock of its own.

A :class:`Batch` collects encoded cells grouped per row. It is *full* once it holds
``max_cells`` cells and *due* ``interval_s`` after its first cell arrived
(``tsd.storage.flush_interval``, which OpenTSDB 2.4.1 defines but never reads; its HBase
client flushes its own buffer every second, ``hbase.rpcs.buffered_flush_interval``). The
writer asks ``is_full`` / ``is_due(now)`` and takes the batch's cells, sorted by row key
then qualifier, so that storage receives sorted batches (an LSM or B-tree store inserts
sorted keys fastest, and HBase groups them by region).

A second cell for the same (row, qualifier) replaces the first, as a second HBase put of
the same cell does: the point sent last wins.

Points arrive in bulk on the ingest hot path (:meth:`Batch.add_points`: every point of
one /api/put body): one loop encodes them straight into the rows, with no per-point call
into the writer. Points a telnet connection encoded (in the daemon or in a worker process)
arrive already as a part of a log record (:meth:`Batch.add_part`: its payload and its
rows as runs, a few Python steps per call, none per point); the batch keeps such parts
in arrival order with its own rows, and the log record and the head's runs are the parts
joined (:meth:`Batch.payload_and_runs`). A store that takes cells (HBase, or the
embedded store without the head) gets them folded back into rows (:meth:`Batch.fold`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tsd.codec import SeriesKey
from tsd.codec.compaction import split_cell
from tsd.codec.qualifier import encode_points_into
from tsd.wal.record import EncodedPart, RowRun, SampleBlock, encode_payload_and_runs, sample_runs

#: Cells in one storage write. Large enough that a flush costs little per cell, small
#: enough that one write does not hold the storage (or one HBase RPC) for long.
DEFAULT_MAX_CELLS = 50_000


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """When a batch must go: at ``max_cells`` cells, or ``interval_s`` after its first cell."""

    max_cells: int = DEFAULT_MAX_CELLS
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_cells < 1:
            raise ValueError(f"max_cells must be positive, got {self.max_cells}")
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")


@dataclass(slots=True)
class Batch:
    """Cells waiting for storage: row key -> qualifier -> value."""

    policy: BatchPolicy
    rows: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)
    cells: int = 0
    #: ``now`` when the first cell was added (None while empty)
    started_at: float | None = None
    #: parts encoded elsewhere (a log record's payload and its runs, or the samples they are
    #: made of), in arrival order; ``rows`` holds what arrived after the last of them
    parts: list[tuple[bytes, list[RowRun] | SampleBlock]] = field(default_factory=list)
    #: the records holding the parts the write-ahead log already holds (:meth:`add_logged`:
    #: parts without a payload), and their cells: the batch's own record leaves them out
    logged: list[int] = field(default_factory=list)
    logged_cells: int = 0

    def add_cell(
        self, row: bytes, qualifier: bytes, value: bytes, now: float | None = None
    ) -> None:
        """Buffer one cell. The batch's age starts at ``now``, or at :meth:`start` (callers
        on a hot path call ``start(clock())`` only when :attr:`started_at` is None)."""
        if self.started_at is None and now is not None:
            self.started_at = now
        cells = self.rows.get(row)
        if cells is None:
            cells = self.rows[row] = {}
        elif qualifier in cells:
            cells[qualifier] = value
            return
        cells[qualifier] = value
        self.cells += 1

    def add_points(self, points: Iterable[tuple[SeriesKey, int, int | float]]) -> None:
        """Encode and buffer ``(series, timestamp, value)`` points, in order (a later point
        for the same cell wins). Values and timestamps must be valid (as the parsers type
        them): a CodecError leaves the points before it buffered."""
        self.cells += encode_points_into(self.rows, points)

    def add_part(self, part: EncodedPart) -> None:
        """Buffer points encoded ahead: a :data:`~tsd.wal.record.CELLS` payload and the
        same points as runs (a telnet connection's). The rows buffered so far
        become a part first, so that the order of arrival is the order of the parts (a
        later point of a cell wins when the head or a fold reads them)."""
        self._close_open_rows()
        self.parts.append((part.payload, part.runs))
        self.cells += part.points

    def add_logged(self, runs: list[RowRun] | SampleBlock, cells: int, seq: int) -> None:
        """Buffer ``cells`` cells the write-ahead log already holds as record ``seq``, as
        runs or the samples they are made of (a part without a payload: the batch's own
        record leaves them out), after what the batch holds so far."""
        self._close_open_rows()
        self.parts.append((b"", runs))
        self.cells += cells
        self.logged_cells += cells
        self.logged.append(seq)

    def _close_open_rows(self) -> None:
        """:attr:`rows` become a part (so that the order of arrival stays the parts')."""
        if self.rows:
            self.parts.append(encode_payload_and_runs(self.rows.items()))
            self.rows = {}

    def payload_and_runs(self) -> tuple[bytes, list[RowRun]]:
        """The batch as one log record's payload, and its rows as runs (in arrival order;
        a row may come more than once, a later run after an earlier one)."""
        payload, runs = encode_payload_and_runs(self.rows)
        if not self.parts:
            return payload, runs
        all_runs: list[RowRun] = []
        blocks: list[SampleBlock] = []  # consecutive ones: their runs made at once
        for _, part_runs in self.parts:
            if isinstance(part_runs, SampleBlock):
                blocks.append(part_runs)
                continue
            if blocks:
                all_runs += sample_runs(blocks)
                blocks = []
            all_runs += part_runs
        if blocks:
            all_runs += sample_runs(blocks)
        all_runs += runs
        return b"".join([*(part for part, _ in self.parts), payload]), all_runs

    def fold(self) -> None:
        """Turn the parts back into :attr:`rows` (cells), in order: for a store written
        cell by cell (HBase, the embedded store without the head). :attr:`cells` stays
        as counted (the writer's accounting of the batch)."""
        if not self.parts:
            return
        later, self.rows = self.rows, {}
        rows = self.rows
        for _, part_runs in self.parts:
            runs = sample_runs([part_runs]) if isinstance(part_runs, SampleBlock) else part_runs
            for row, count, qualifiers, values in runs:
                cells = rows.get(row)
                if cells is None:
                    cells = rows[row] = {}
                if count == 1:
                    cells[qualifiers] = values
                    continue
                for _, qualifier, value in split_cell(qualifiers, values + b"\x00"):
                    cells[qualifier] = value
        self.parts = []
        for row, cells in later.items():
            rows.setdefault(row, {}).update(cells)

    def start(self, now: float) -> None:
        """Start the batch's age (the time of its first cell)."""
        if self.started_at is None:
            self.started_at = now

    def __len__(self) -> int:
        return self.cells

    def is_empty(self) -> bool:
        return self.cells == 0

    def is_full(self) -> bool:
        return self.cells >= self.policy.max_cells

    def is_due(self, now: float) -> bool:
        return self.started_at is not None and now - self.started_at >= self.policy.interval_s

    def due_in(self, now: float) -> float | None:
        """Seconds until the batch is due (0 when it is), None when empty."""
        if self.started_at is None:
            return None
        return max(0.0, self.started_at + self.policy.interval_s - now)

    def sorted_cells(self) -> Iterator[tuple[bytes, bytes, bytes]]:
        """``(row, qualifier, value)`` in row-key order, then qualifier order."""
        rows = self.rows
        for row in sorted(rows):
            cells = rows[row]
            for qualifier in sorted(cells):
                yield row, qualifier, cells[qualifier]

    def sorted_rows(self) -> Iterator[tuple[bytes, list[tuple[bytes, bytes]]]]:
        """``(row, [(qualifier, value), ...])`` in row-key order, cells in qualifier order."""
        rows = self.rows
        for row in sorted(rows):
            yield row, sorted(rows[row].items())
