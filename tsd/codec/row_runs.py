"""Runs of a row's cells: ``(row key, cell count, qualifiers joined, values joined)``, the
form the write-ahead log's records and the head's rows share (no object per cell), and
their joining when a row comes more than once.

:func:`python_join_repeated_rows` is the specification of the head's compiled
``join_repeated_rows`` (``tsd/head/_runs.c``) and of remote write's ``sample_runs``
(``tsd/wal/_record.c``), which makes a writer batch's runs straight from its samples."""

from __future__ import annotations

from collections.abc import Sequence

#: a row key, its cell count, its qualifiers joined and its values joined
RowRun = tuple[bytes, int, bytes, bytes]


def python_join_repeated_rows(runs: Sequence[RowRun]) -> list[RowRun]:
    """One run per row: the runs of a row that comes more than once joined in order
    (cells summed, qualifiers and values each concatenated), in the order rows first
    come. Adding the joined run gives the row the same bytes and numbers as adding its
    runs one after the other: qualifiers go before the values, and a row stays in order
    when each run is in order and each starts after the one before it ends."""
    by_row: dict[bytes, list[RowRun]] = {}
    for run in runs:
        group = by_row.get(run[0])
        if group is None:
            by_row[run[0]] = [run]
        else:
            group.append(run)
    return [
        group[0]
        if len(group) == 1
        else (
            key,
            sum(run[1] for run in group),
            b"".join(run[2] for run in group),
            b"".join(run[3] for run in group),
        )
        for key, group in by_row.items()
    ]
