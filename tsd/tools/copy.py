"""``tsdb copy --from CONFIG --to CONFIG``: every table of one store into another.

Moves OpenTSDB's tables cell for cell (UIDs with their MAXID counters, data points with
annotations and appends, the tree table, TSMeta and UIDMeta) between any two stores the
configurations describe: the embedded store to HBase when a deployment grows, HBase back to
the embedded store, or one directory to another. Tables are matched by role, so the two
sides may use different table names (``tsd.storage.hbase.*_table``). Rollup and
pre-aggregate tables are copied too when ``--rollups FILE`` names the rollup configuration
(``tsd.rollups.config``'s JSON), under the same names on both sides.

- Resumable: after each batch is durable on the target, the key of the last row copied per
  table goes into a checkpoint file (``--checkpoint``, replaced atomically). A copy that is
  stopped (``--limit-rows``, Ctrl-C, a kill, a lost connection) and started again with the
  same checkpoint goes on after that row; rows copied twice are written with the same bytes.
- Progress on stderr (at most one line a second per table, and each table's total); the
  summary on stdout.
- Verification: at the end both sides are read again, table by table, and their row and cell
  counts and a SHA-256 over every (row, family, qualifier, value) compared. A difference is
  exit status 1. Writes that reach the source during the copy show up as differences: stop
  the writers (or the daemon) first for an exact copy. The source is opened read-only, so an
  embedded source may be copied beside a running daemon.
- A target that already holds rows is refused unless a checkpoint says this copy put them
  there (or ``--force``), so a copy never mixes into another store by accident.

Exit status (:mod:`tsd.tools.status`): 0 copied and verified; 1 a verification difference;
2 bad usage or configuration (the checkpoint belongs to another copy, source and target are
the same store); 3 a storage failure; 5 stopped by ``--limit-rows`` before the end (run
again to go on).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsd.config import Config, StorageConfig, load_config
from tsd.errors import ConfigError
from tsd.log import configure_logging
from tsd.protocol.rollup_config import RollupConfig, parse_rollup_config
from tsd.storage.base import FamilySpec, Put, Row, ScanSpec, Storage
from tsd.storage.factory import open_storage
from tsd.storage_setup import rollup_families, storage_settings
from tsd.tools import status
from tsd.tools.common import run_async
from tsd.tools.create_tables import table_specs

#: table roles in copy order: UIDs first, so a half-done copy never has data without names
ROLES = ("uid", "data", "tree", "meta")
DEFAULT_CHECKPOINT = "tsdb-copy.checkpoint.json"
PROGRESS_EVERY_S = 1.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        metavar="CONFIG",
        required=True,
        help="opentsdb.conf of the store to read",
    )
    parser.add_argument(
        "--to",
        dest="target",
        metavar="CONFIG",
        required=True,
        help="opentsdb.conf of the store to write",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="FILE",
        default=DEFAULT_CHECKPOINT,
        help=f"where progress is kept (default: ./{DEFAULT_CHECKPOINT})",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="ignore an existing checkpoint and copy from the first row",
    )
    parser.add_argument(
        "--force", action="store_true", help="copy even when the target already holds rows"
    )
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=1000,
        metavar="N",
        help="rows read and written per batch (default: 1000)",
    )
    parser.add_argument(
        "--limit-rows",
        type=int,
        metavar="N",
        help="stop after copying N rows in this run (exit status 5)",
    )
    parser.add_argument(
        "--rows-per-second",
        type=float,
        metavar="R",
        help="copy at most R rows a second (spare a production cluster)",
    )
    parser.add_argument(
        "--rollups",
        metavar="FILE",
        help="the rollup configuration (tsd.rollups.config's JSON): copy its tables too",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the final comparison of both stores"
    )


def table_names(cfg: StorageConfig) -> dict[str, str]:
    """Role -> configured table name."""
    return {
        "uid": cfg.uid_table,
        "data": cfg.data_table,
        "tree": cfg.tree_table,
        "meta": cfg.meta_table,
    }


#: role -> (source table, target table, the target table's families)
Plan = dict[str, tuple[str, str, list[FamilySpec]]]


def copy_plan(src: StorageConfig, dst: StorageConfig, rollups: RollupConfig | None) -> Plan:
    """Every table to copy, in order: OpenTSDB's four by role, then the rollup tables."""
    specs = table_specs(dst)
    source, target = table_names(src), table_names(dst)
    plan = {role: (source[role], target[role], specs[target[role]]) for role in ROLES}
    for interval in rollups.intervals if rollups is not None else ():
        for table in (interval.table, interval.pre_aggregation_table):
            plan[f"rollup:{table}"] = (table, table, rollup_families())
    return plan


def store_identity(cfg: StorageConfig) -> dict[str, Any]:
    """What names a store in a checkpoint: its backend and where it lives."""
    if cfg.backend == "embedded":
        return {"backend": "embedded", "data_dir": str(Path(cfg.data_dir).resolve())}
    return {"backend": cfg.backend, "host": cfg.thrift_host, "port": cfg.thrift_port}


@dataclass
class TableProgress:
    """One table's state in the checkpoint."""

    source: str
    target: str
    last_row: bytes | None = None
    rows: int = 0
    cells: int = 0
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        last = None if self.last_row is None else self.last_row.hex()
        return {
            "source": self.source,
            "target": self.target,
            "last_row": last,
            "rows": self.rows,
            "cells": self.cells,
            "done": self.done,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableProgress:
        last = data.get("last_row")
        return cls(
            str(data["source"]),
            str(data["target"]),
            None if last is None else bytes.fromhex(last),
            int(data["rows"]),
            int(data["cells"]),
            bool(data["done"]),
        )


class Checkpoint:
    """The checkpoint file: the two stores and each table's progress."""

    def __init__(
        self,
        path: Path,
        source: dict[str, Any],
        target: dict[str, Any],
        tables: dict[str, TableProgress],
    ) -> None:
        self.path, self.source, self.target, self.tables = path, source, target, tables

    @classmethod
    def load_or_new(
        cls, path: Path, src: StorageConfig, dst: StorageConfig, plan: Plan, restart: bool
    ) -> tuple[Checkpoint, bool]:
        """The checkpoint of this copy (and whether it was read from the file)."""
        source, target = store_identity(src), store_identity(dst)
        fresh = {role: TableProgress(names[0], names[1]) for role, names in plan.items()}
        if restart or not path.exists():
            return cls(path, source, target, fresh), False
        try:
            data = json.loads(path.read_text())
            tables = {role: TableProgress.from_json(data["tables"][role]) for role in plan}
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                "--checkpoint", f"{path} is not a tsdb copy checkpoint: {exc}"
            ) from exc
        same_tables = set(data["tables"]) == set(plan) and all(
            (tables[r].source, tables[r].target) == (fresh[r].source, fresh[r].target) for r in plan
        )
        if data.get("from") != source or data.get("to") != target or not same_tables:
            raise ConfigError(
                "--checkpoint",
                f"{path} belongs to another copy (other stores or"
                " tables); use --restart or another --checkpoint",
            )
        return cls(path, source, target, tables), True

    def save(self) -> None:
        """Write the file whole and durable, then rename it over the old one."""
        body = json.dumps(
            {
                "from": self.source,
                "to": self.target,
                "tables": {r: p.to_json() for r, p in self.tables.items()},
            },
            indent=1,
        )
        temp = self.path.with_name(self.path.name + ".tmp")
        with temp.open("w") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)


class Progress:
    """Progress lines on stderr: a table's first batch, then at most one a second."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def report(self, role: str, p: TableProgress, *, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self.last.get(role, -PROGRESS_EVERY_S) >= PROGRESS_EVERY_S:
            self.last[role] = now
            state = "done" if final else "copying"
            print(
                f"tsdb copy: {p.source} -> {p.target}: {p.rows} rows, {p.cells} cells"
                f" ({state}, checkpoint saved)",
                file=sys.stderr,
                flush=True,
            )


def row_puts(table_row: Row) -> list[Put]:
    return [Put(table_row.key, c.family, c.qualifier, c.value) for c in table_row.cells]


async def batches(
    storage: Storage, table: str, start: bytes, size: int
) -> AsyncIterator[list[Row]]:
    """The table's rows from ``start`` on, ``size`` at a time."""
    batch: list[Row] = []
    async with aclosing(storage.scan(table, ScanSpec(start=start, batch_rows=size))) as rows:
        async for row in rows:
            batch.append(row)
            if len(batch) >= size:
                yield batch
                batch = []
    if batch:
        yield batch


class Pacer:
    """Keeps a copy under ``--rows-per-second``."""

    def __init__(self, rate: float | None) -> None:
        self.rate, self.start, self.rows = rate, time.monotonic(), 0

    async def after(self, rows: int) -> None:
        self.rows += rows
        if self.rate:
            ahead = self.rows / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                await asyncio.sleep(ahead)


async def copy_table(
    source: Storage,
    target: Storage,
    role: str,
    p: TableProgress,
    checkpoint: Checkpoint,
    args: argparse.Namespace,
    budget: list[int],
    pacer: Pacer,
    progress: Progress,
) -> bool:
    """Copy one table from its checkpoint on; False when the row budget ran out first."""
    start = b"" if p.last_row is None else p.last_row + b"\x00"  # the next key after it
    async for batch in batches(source, p.source, start, args.batch_rows):
        if budget and budget[0] <= 0:
            return False
        if budget:
            batch = batch[: budget[0]]
            budget[0] -= len(batch)
        await target.mutate(p.target, [put for row in batch for put in row_puts(row)])
        p.last_row = batch[-1].key
        p.rows += len(batch)
        p.cells += sum(len(row.cells) for row in batch)
        checkpoint.save()  # only after the batch is durable on the target
        progress.report(role, p)
        await pacer.after(len(batch))
    if budget and budget[0] <= 0:
        # The budget ended exactly here: done only if nothing follows.
        start = b"" if p.last_row is None else p.last_row + b"\x00"
        async with aclosing(source.scan(p.source, ScanSpec(start=start, limit=1))) as rest:
            async for _ in rest:
                return False
    p.done = True
    checkpoint.save()
    progress.report(role, p, final=True)
    return True


@dataclass(frozen=True)
class Summary:
    rows: int
    cells: int
    digest: str


async def summarize(storage: Storage, table: str) -> Summary:
    """Rows, cells and a SHA-256 over every cell, in storage order."""
    sha = hashlib.sha256()
    rows = cells = 0
    async with aclosing(storage.scan(table, ScanSpec(batch_rows=1000))) as scan:
        async for row in scan:
            rows += 1
            for cell in row.cells:
                cells += 1
                for part in (row.key, cell.family.encode(), cell.qualifier, cell.value):
                    sha.update(len(part).to_bytes(4, "big"))
                    sha.update(part)
    return Summary(rows, cells, sha.hexdigest())


async def is_empty(storage: Storage, table: str) -> bool:
    async with aclosing(storage.scan(table, ScanSpec(limit=1))) as scan:
        async for _ in scan:
            return False
    return True


async def copy(
    src_cfg: Config, dst_cfg: Config, rollups: RollupConfig | None, args: argparse.Namespace
) -> int:
    src, dst = src_cfg.storage, dst_cfg.storage
    if store_identity(src) == store_identity(dst) and set(table_names(src).values()) & set(
        table_names(dst).values()
    ):
        raise ConfigError("--to", "the source and the target are the same store and tables")
    plan = copy_plan(src, dst, rollups)
    checkpoint, resumed = Checkpoint.load_or_new(
        Path(args.checkpoint), src, dst, plan, args.restart
    )
    source = open_storage(storage_settings(src, read_only=True))
    try:
        target = open_storage(storage_settings(dst))
        try:
            return await _copy(source, target, plan, checkpoint, resumed, args)
        finally:
            await target.close()
    finally:
        await source.close()


async def _copy(
    source: Storage,
    target: Storage,
    plan: Plan,
    checkpoint: Checkpoint,
    resumed: bool,
    args: argparse.Namespace,
) -> int:
    existing = set(await source.list_tables())
    missing = [source_table for source_table, _, _ in plan.values() if source_table not in existing]
    if missing:
        raise ConfigError("--from", f"the source has no table {', '.join(missing)}")
    for _, table, families in plan.values():
        await target.create_table(table, families)
    if not resumed and not args.force:
        full = [t for _, t, _ in plan.values() if not await is_empty(target, t)]
        if full:
            raise ConfigError(
                "--to",
                f"the target already holds rows in {', '.join(full)}"
                " (--force copies into it anyway)",
            )
    checkpoint.save()
    budget = [args.limit_rows] if args.limit_rows is not None else []
    pacer, progress = Pacer(args.rows_per_second), Progress()
    for role in plan:
        p = checkpoint.tables[role]
        if p.done:
            continue
        if not await copy_table(source, target, role, p, checkpoint, args, budget, pacer, progress):
            copied = sum(t.rows for t in checkpoint.tables.values())
            print(
                f"stopped after --limit-rows: {copied} rows copied so far; run again with"
                f" --checkpoint {checkpoint.path} to go on"
            )
            return status.STOPPED
    for role in plan:
        p = checkpoint.tables[role]
        print(f"copied {p.source} -> {p.target}: {p.rows} rows, {p.cells} cells")
    if args.no_verify:
        return 0
    differ = []
    for role in plan:
        p = checkpoint.tables[role]
        a, b = await summarize(source, p.source), await summarize(target, p.target)
        same = a == b
        print(
            f"verified {p.source} -> {p.target}: {a.rows} rows, {a.cells} cells -> "
            f"{b.rows} rows, {b.cells} cells: {'equal' if same else 'DIFFERENT'}"
        )
        if not same:
            differ.append(p.target)
    if differ:
        print(
            f"tsdb copy: the target differs from the source in {', '.join(differ)}", file=sys.stderr
        )
        return status.FAILED
    return status.OK


def run(args: argparse.Namespace) -> int:
    if args.batch_rows < 1:
        raise ConfigError("--batch-rows", "must be at least 1")
    src_cfg, dst_cfg = load_config(args.source), load_config(args.target)
    configure_logging(src_cfg.log.format, src_cfg.log.level)
    rollups = None
    if args.rollups is not None:
        try:
            rollups = parse_rollup_config(Path(args.rollups).read_bytes())
        except OSError as exc:
            raise ConfigError("--rollups", f"cannot read {args.rollups}: {exc}") from exc
    return run_async(copy(src_cfg, dst_cfg, rollups, args))
