"""``tsdb copy --from FILE --to FILE``: move every table from one store to another.

Each configuration names a store (the embedded one in its ``tsd.storage.data_dir``, or
HBase tables through a Thrift gateway) and its four tables (``tsd.storage.hbase.*_table``).
Every cell of the UID, data, meta and tree tables is copied, byte for byte, to the table
of the same role in the destination (created when missing), in key order, a batch of rows
at a time. Both stores must have the same row-key layout (UID widths, salting): the bytes
are not rewritten.

Resumable: after each batch the last row copied is recorded in a state file (``--state``,
by default ``tsdb-copy.state`` in the current directory); run the same command again after
an interruption and it carries on after that row (rows are copied whole, and copying a row
twice writes the same cells). ``--max-rows N`` stops after N rows, to copy in steps.
Once every table is copied, the rows and cells of each source and destination table are
counted and compared (exit 1 when they differ; the destination had other rows, or
the source changed during the copy). The source store is opened read-only when embedded,
so it may be copied while a daemon runs on it (rows written meanwhile may be missed:
stop the writers first for an exact copy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tsd.config import Config, StorageConfig, load_config
from tsd.errors import ConfigError
from tsd.log import configure_logging
from tsd.schema import ensure_tables
from tsd.storage.base import Put, ScanSpec, Storage
from tsd.tools.common import open_store, run_async

#: the tables, by role, in copy order (UIDs first: data rows name them)
ROLES = ("uid", "data", "meta", "tree")
#: rows per batch (one storage write each)
BATCH_ROWS = 500
#: the key layout both stores must share
LAYOUT_FIELDS = ("metric_width", "tagk_width", "tagv_width", "salt_width", "salt_buckets")


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--from", dest="source", required=True, metavar="FILE", help="the store to copy")
    add("--to", dest="target", required=True, metavar="FILE", help="the store to copy into")
    add("--state", metavar="FILE", default="tsdb-copy.state", help="where progress is kept")
    add("--max-rows", type=int, metavar="N", help="stop after N rows (run again to continue)")
    add("--batch-rows", type=int, default=BATCH_ROWS, metavar="N", help="rows per write")


def table_of(cfg: StorageConfig, role: str) -> str:
    name: str = getattr(cfg, f"{role}_table")
    return name


def check_layouts(source: StorageConfig, target: StorageConfig) -> None:
    for name in LAYOUT_FIELDS:
        if getattr(source, name) != getattr(target, name):
            raise ConfigError(
                name,
                f"the stores differ ({getattr(source, name)} and {getattr(target, name)}): "
                "row keys would have to be rewritten, which tsdb copy does not do",
            )


@dataclass
class Progress:
    """The state file: per role, the last row copied (hex) or True once done."""

    path: Path
    tables: dict[str, str | bool]

    @classmethod
    def load(cls, path: Path) -> Progress:
        if not path.exists():
            return cls(path, {})
        return cls(path, dict(json.loads(path.read_text())["tables"]))

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"tables": self.tables}, indent=1) + "\n")
        tmp.replace(self.path)  # never a half-written state

    def resume_key(self, role: str) -> bytes:
        last = self.tables.get(role)
        return bytes.fromhex(last) + b"\x00" if isinstance(last, str) else b""


@dataclass(frozen=True, slots=True)
class Count:
    rows: int
    cells: int


async def count(storage: Storage, table: str) -> Count:
    rows = cells = 0
    async with contextlib.aclosing(storage.scan(table, ScanSpec(batch_rows=2048))) as scan:
        async for row in scan:
            rows += 1
            cells += len(row.cells)
    return Count(rows, cells)


@contextlib.asynccontextmanager
async def _stores(source: Config, target: Config) -> AsyncIterator[tuple[Storage, Storage]]:
    async with (
        open_store(source, read_only=True) as src,
        open_store(target) as dst,
    ):
        await ensure_tables(dst.storage, target.storage)
        yield src.storage, dst.storage


async def copy_table(
    src: Storage,
    dst: Storage,
    source: str,
    target: str,
    role: str,
    progress: Progress,
    budget: int | None,
    batch_rows: int,
    out: TextIO,
) -> int:
    """Copy one table from where the state says; the rows copied now."""
    copied = cells = 0
    batch: list[Put] = []
    last = b""
    started = time.monotonic()

    async def flush() -> None:
        nonlocal batch
        if batch:
            await dst.put(target, batch)
            batch = []
            progress.tables[role] = last.hex()
            progress.save()
            rate = copied / max(time.monotonic() - started, 1e-6)
            out.write(
                f"{role}: {source} -> {target}: {copied} rows, {cells} cells ({rate:.0f} rows/s)\n"
            )
            out.flush()

    spec = ScanSpec(start=progress.resume_key(role), batch_rows=batch_rows)
    async with contextlib.aclosing(src.scan(source, spec)) as rows:
        async for row in rows:
            if budget is not None and copied >= budget:
                await flush()
                return copied
            batch.extend(Put(row.key, c.family, c.qualifier, c.value) for c in row.cells)
            copied += 1
            cells += len(row.cells)
            last = row.key
            if copied % batch_rows == 0:
                await flush()
    await flush()
    progress.tables[role] = True
    progress.save()
    return copied


async def copy(
    source: Config,
    target: Config,
    progress: Progress,
    *,
    max_rows: int | None,
    batch_rows: int,
    out: TextIO,
) -> int:
    """The exit status: 0 copied (and verified, or stopped at ``max_rows``), 1 mismatch."""
    check_layouts(source.storage, target.storage)
    async with _stores(source, target) as (src, dst):
        budget = max_rows
        for role in ROLES:
            if progress.tables.get(role) is True:
                continue
            done = await copy_table(
                src,
                dst,
                table_of(source.storage, role),
                table_of(target.storage, role),
                role,
                progress,
                budget,
                batch_rows,
                out,
            )
            if budget is not None:
                budget -= done
                if progress.tables.get(role) is not True:
                    out.write(f"stopped after {max_rows} rows; run again to continue\n")
                    return 0
        status = 0
        for role in ROLES:
            theirs = table_of(source.storage, role)
            ours = table_of(target.storage, role)
            a, b = await count(src, theirs), await count(dst, ours)
            verdict = "equal" if a == b else "DIFFERENT"
            out.write(
                f"verify {role}: {theirs} {a.rows} rows {a.cells} cells, "
                f"{ours} {b.rows} rows {b.cells} cells: {verdict}\n"
            )
            if a != b:
                status = 1
    return status


def run(args: argparse.Namespace) -> int:
    if args.batch_rows < 1 or (args.max_rows is not None and args.max_rows < 1):
        raise ConfigError("--batch-rows/--max-rows", "must be at least 1")
    source, target = load_config(args.source), load_config(args.target)
    configure_logging(source.log.format, source.log.level)
    progress = Progress.load(Path(args.state))
    return run_async(
        copy(
            source,
            target,
            progress,
            max_rows=args.max_rows,
            batch_rows=args.batch_rows,
            out=sys.stdout,
        )
    )
