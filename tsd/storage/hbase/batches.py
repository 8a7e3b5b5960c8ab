"""Planning ``Storage.mutate`` as Thrift1 calls that keep the caller's order. Pure.

Thrift1's ``mutateRows`` does not apply a batch in order: the gateway gathers
every put of the batch into one ``Table.put`` and every delete into one
``Table.delete`` and runs the puts first (``ThriftHBaseServiceHandler.
mutateRowsTs``). All cells and delete markers get the server's clock, and a
delete marker hides cells with the same or an older timestamp. So:

- put then delete of the same cell in one call: the delete wins, as it should;
- delete then put of a cell the delete covers, in one call: the put would be
  applied first and deleted. Such a put starts a new call (a new *step*).
- two writes of the same cell in one call carry the same timestamp and leave
  HBase to pick; only the last one is sent.
- a whole-row delete has no ``Mutation`` form (a family-less column means a
  family delete), so it is its own ``deleteAllRow`` step.

Across steps, the backend makes sure a put never lands in the millisecond of a
delete that covers it (``HBaseStorage._wait_after_delete``), since a marker
hides a later put with the same timestamp too.

Steps are also cut by size: the framed transport refuses frames over 2 MB by
default (``hbase.regionserver.thrift.framed.max_frame_size_in_mb``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from tsd.storage.base import Delete, Mutation, Put

#: bytes of row keys, columns and values per mutateRows call (under the 2 MB frame limit)
MAX_STEP_BYTES = 1 << 20
#: cells per mutateRows call: keeps one call's Thrift encoding and server work bounded
MAX_STEP_CELLS = 10_000


@dataclass(slots=True)
class MutateRows:
    """One ``mutateRows`` call.

    ``rows`` maps each row to its operations: column (``b"family:qualifier"``,
    or ``b"family"`` for a whole family) -> the value to put, or None to delete.
    """

    rows: dict[bytes, dict[bytes, bytes | None]] = field(default_factory=dict)
    has_deletes: bool = False
    size_bytes: int = 0
    cells: int = 0


@dataclass(frozen=True, slots=True)
class DeleteRow:
    """One ``deleteAllRow`` call."""

    row: bytes


Step = MutateRows | DeleteRow


def column_name(family: str, qualifier: bytes | None) -> bytes:
    """Thrift1's column spec: ``family:qualifier``, or ``family`` alone for the family."""
    name = family.encode("ascii")
    return name if qualifier is None else name + b":" + qualifier


class _Planner:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.current = MutateRows()
        # what the current step deletes: (row, family) and (row, family, qualifier)
        self.deleted_families: set[tuple[bytes, str]] = set()
        self.deleted_cells: set[tuple[bytes, str, bytes]] = set()

    def cut(self) -> None:
        if self.current.rows:
            self.steps.append(self.current)
        self.current = MutateRows()
        self.deleted_families.clear()
        self.deleted_cells.clear()

    def add(self, row: bytes, column: bytes, value: bytes | None) -> None:
        size = len(row) + len(column) + len(value or b"")
        step = self.current
        if step.cells and (step.size_bytes + size > MAX_STEP_BYTES or step.cells >= MAX_STEP_CELLS):
            self.cut()
            step = self.current
        step.rows.setdefault(row, {})[column] = value
        step.size_bytes += size
        step.cells += 1

    def put(self, put: Put) -> None:
        if (put.row, put.family) in self.deleted_families or (
            put.row,
            put.family,
            put.qualifier,
        ) in self.deleted_cells:
            self.cut()
        self.add(put.row, column_name(put.family, put.qualifier), put.value)

    def delete(self, delete: Delete) -> None:
        if delete.family is None:
            self.cut()
            self.steps.append(DeleteRow(delete.row))
            return
        column = column_name(delete.family, delete.qualifier)
        self.add(delete.row, column, None)
        self.current.has_deletes = True
        if delete.qualifier is None:
            self.deleted_families.add((delete.row, delete.family))
        else:
            self.deleted_cells.add((delete.row, delete.family, delete.qualifier))


def plan_mutations(mutations: Sequence[Mutation]) -> list[Step]:
    """The calls that apply ``mutations`` with the effect of applying them in order."""
    if not any(type(mutation) is not Put for mutation in mutations):
        return _plan_puts(cast("Sequence[Put]", mutations))
    return _plan_in_order(mutations)


def _plan_in_order(mutations: Sequence[Mutation]) -> list[Step]:
    """The general planner: puts and deletes, cut where order demands."""
    planner = _Planner()
    for mutation in mutations:
        if isinstance(mutation, Put):
            planner.put(mutation)
        else:
            planner.delete(mutation)
    planner.cut()
    return planner.steps


def _plan_puts(puts: Sequence[Put]) -> list[Step]:
    """:func:`plan_mutations` for puts alone (the write path's batches), in one tight loop:
    with no deletes, order only matters within a cell (the last write wins), and steps are
    cut by size alone. About twice as fast as the general planner per cell."""
    steps: list[Step] = []
    step = MutateRows()
    rows = step.rows
    size = cells = 0
    prefixes: dict[str, bytes] = {}
    for put in puts:
        prefix = prefixes.get(put.family)
        if prefix is None:
            prefix = prefixes[put.family] = column_name(put.family, b"")
        column = prefix + put.qualifier
        row = put.row
        added = len(row) + len(column) + len(put.value)
        if cells and (size + added > MAX_STEP_BYTES or cells >= MAX_STEP_CELLS):
            step.size_bytes, step.cells = size, cells
            steps.append(step)
            step = MutateRows()
            rows = step.rows
            size = cells = 0
        ops = rows.get(row)
        if ops is None:
            ops = rows[row] = {}
        ops[column] = put.value
        size += added
        cells += 1
    if rows:
        step.size_bytes, step.cells = size, cells
        steps.append(step)
    return steps
