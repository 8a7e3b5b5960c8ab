"""What the store-using tools share: their options, the config, storage and UIDs, the loop.

A tool runs against the embedded store, stopped or held by a running daemon, or the
configured HBase, shared with running daemons as OpenTSDB's tools share it. Beside a
daemon, the tool opens the embedded store as a second writer (not exclusive: the daemon
keeps its lock, which only stops a second daemon); LMDB serialises the two processes'
write transactions, so UID assignment (increment + check-and-put) stays atomic across
them. As with several OpenTSDB TSDs on one HBase, a running daemon keeps the names it has
cached: after ``uid rename`` or ``uid delete``, its answers change once its caches are
dropped (``/api/dropcaches``) or it restarts. Tools that only read open the store
read-only.

Beside a running daemon, a tool first asks it (its control socket, :mod:`tsd.write.control`)
to write out every point it acknowledged: the daemon's in-memory head would otherwise hold
points the tool does not see (and a ``scan --delete`` could not remove). A daemon that
holds the store but does not answer within ``tsd.storage.head.flush_timeout`` stops the
tool (exit 3) before it does anything; a socket left by a daemon that is gone is ignored.

Like the daemon, a tool creates the tables that are missing when
``tsd.storage.create_tables`` is on, so ``tsdb mkmetric`` works on a fresh data
directory; OpenTSDB's tools instead refuse to start without them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import uvloop

from tsd.codec import KeyLayout
from tsd.config import Config, StorageConfig, load_config
from tsd.errors import UsageError
from tsd.log import configure_logging
from tsd.protocol.names import NameRules
from tsd.query.rollup_compute import ComputedRollups
from tsd.storage.base import Storage
from tsd.storage.embedded.maintenance import held_by_daemon
from tsd.storage.factory import open_storage
from tsd.storage_setup import ensure_tables, rollup_setup, storage_settings
from tsd.uid.service import UidService
from tsd.write.control import request_write_out

T = TypeVar("T")


def add_store_options(parser: argparse.ArgumentParser, *, auto_metric: bool = False) -> None:
    """``--config FILE`` and ``--data-dir DIR`` (and ``--auto-metric`` when asked)."""
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")
    parser.add_argument(
        "--data-dir", metavar="DIR", help="the embedded store (default: tsd.storage.data_dir)"
    )
    if auto_metric:
        parser.add_argument(
            "--auto-metric",
            action="store_true",
            help="create the UIDs of new metrics (tsd.core.auto_create_metrics = true)",
        )


def tool_config(args: argparse.Namespace, extra: dict[str, str] | None = None) -> Config:
    """The configuration a tool runs with: the file, then its flags, then ``extra``."""
    overrides: dict[str, str] = {}
    if getattr(args, "data_dir", None) is not None:
        overrides["tsd.storage.data_dir"] = args.data_dir
    if getattr(args, "auto_metric", False):
        overrides["tsd.core.auto_create_metrics"] = "true"
    overrides.update(extra or {})
    cfg = load_config(args.config, overrides)
    configure_logging(cfg.log.format, cfg.log.level)  # log lines to stderr; stdout is the report
    return cfg


def name_rules(cfg: Config) -> NameRules:
    """The name rules of ``cfg`` (``tsd.core.tag.allow_specialchars``, ``tsd.storage.max_tags``)."""
    return NameRules(cfg.core.tag_allow_specialchars, cfg.storage.max_tags)


@dataclass(frozen=True, slots=True)
class ToolStore:
    """An open store with its UIDs."""

    cfg: Config
    storage: Storage
    uids: UidService


def own_rollups(cfg: Config, *, computing_only: bool = True) -> ComputedRollups | None:
    """What tsd computes of the rollup configuration in force (docs/rollups.md): None
    without one, or (``computing_only``) when ``tsd.rollups.compute`` is off."""
    setup = rollup_setup(cfg)
    if setup.effective is None or (computing_only and not setup.computes):
        return None
    layout = KeyLayout.from_storage_config(cfg.storage)
    return ComputedRollups.from_config(setup.effective, setup.effective.intervals, layout)


@asynccontextmanager
async def open_store(cfg: Config, *, read_only: bool = False) -> AsyncIterator[ToolStore]:
    """Storage (tables created when missing, unless read-only) and a UidService over it;
    storage is closed on the way out. A daemon running on the embedded store has written
    out every point it acknowledged first."""
    await write_out_running_daemon(cfg.storage)
    storage = open_storage(storage_settings(cfg.storage, read_only=read_only, exclusive=False))
    try:
        if cfg.storage.create_tables and not read_only:
            await ensure_tables(storage, cfg.storage, rollup_setup(cfg).tables())
        yield ToolStore(cfg, storage, UidService(storage, cfg))
    finally:
        await storage.close()


async def write_out_running_daemon(cfg: StorageConfig) -> int | None:
    """Ask the daemon running on the embedded store ``cfg`` (if any) to write out every
    point it acknowledged; the rows it wrote, None when no daemon runs there (or on
    HBase, where a daemon's points are in HBase already). StorageUnavailable when a daemon
    holds the store but does not answer in time."""
    if cfg.backend != "embedded":
        return None
    data_dir = cfg.data_dir
    return await request_write_out(
        data_dir, float(cfg.head_flush_timeout_s), functools.partial(held_by_daemon, data_dir)
    )


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run a tool's coroutine on uvloop, as the daemon runs."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def embedded_data_dir(args: argparse.Namespace, command: str) -> str:
    """The embedded store a maintenance command works on: ``--data-dir`` or
    ``tsd.storage.data_dir`` of ``--config``; UsageError with another backend."""
    cfg = load_config(args.config)
    if cfg.storage.backend != "embedded":
        raise UsageError(f"{command} works on the embedded store (tsd.storage.backend)")
    return str(args.data_dir if args.data_dir is not None else cfg.storage.data_dir)
