"""Helpers for the tool tests: the real command line in its own process, and the store it used.

``target`` (a fixture, over the embedded store and the test HBase) writes an opentsdb.conf
that points the tools at a fresh store; tests run ``python -m tsd ... --config FILE`` and
read the results back through the same configuration, with ``open_target``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hbase_harness import HARNESS, drop_tables, unique_prefix
from tsd.config import Config, load_config
from tsd.tools.common import ToolStore, open_store


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


async def tsdb(cwd: Path, *args: str, stdin: bytes | None = None) -> Result:
    """Run ``python -m tsd ARGS`` in ``cwd`` (so no stray ./opentsdb.conf is read)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tsd",
        *args,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@dataclass(frozen=True)
class Target:
    """A store for the tools: its config file and the directory to run them in."""

    cwd: Path
    config: Path
    backend: str

    async def run(self, *args: str, stdin: bytes | None = None) -> Result:
        """``tsdb ARGS --config FILE``."""
        return await tsdb(self.cwd, *args, "--config", str(self.config), stdin=stdin)

    def cfg(self) -> Config:
        return load_config(str(self.config))

    def write_config(self, extra: str) -> None:
        """Append ``key = value`` lines to the config file."""
        with self.config.open("a") as out:
            out.write(extra)


@asynccontextmanager
async def open_target(target: Target) -> AsyncIterator[ToolStore]:
    """The target's store and UIDs, opened as the tools open them (after they exited)."""
    async with open_store(target.cfg()) as store:
        yield store


#: restricts a test using ``target`` to the embedded store (each HBase test creates four
#: tables, about 2 s: the HBase runs keep to one test per behaviour)
embedded_only = pytest.mark.parametrize("target", ["embedded"], indirect=True)

TARGET_PARAMS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("hbase", id="hbase", marks=pytest.mark.hbase),
]


def make_target(backend: str, tmp_path: Path) -> Iterator[Target]:
    """A Target on a fresh embedded store, or on fresh tables of the test HBase."""
    config = tmp_path / "opentsdb.conf"
    # Storage events (an HBase table created...) are logged at info on stderr, where the
    # tests compare the tools' own messages.
    quiet = "tsd.logging.level = warning\n"
    if backend == "embedded":
        config.write_text(f"{quiet}tsd.storage.data_dir = {tmp_path / 'data'}\n")
        yield Target(tmp_path, config, backend)
        return
    server = HARNESS.server()
    prefix = unique_prefix()
    config.write_text(
        f"{quiet}tsd.storage.backend = hbase\n"
        f"tsd.storage.hbase.thrift.host = {server.thrift_host}\n"
        f"tsd.storage.hbase.thrift.port = {server.thrift_port}\n"
        f"tsd.storage.hbase.data_table = {prefix}tsdb\n"
        f"tsd.storage.hbase.uid_table = {prefix}tsdb-uid\n"
        f"tsd.storage.hbase.tree_table = {prefix}tsdb-tree\n"
        f"tsd.storage.hbase.meta_table = {prefix}tsdb-meta\n"
    )
    yield Target(tmp_path, config, backend)
    if not server.owned:
        asyncio.run(drop_tables(server, prefix))
