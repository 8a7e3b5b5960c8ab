"""``tsdb query``, ``tsdb scan``, ``tsdb version`` and ``tsdb search lookup`` beside OpenTSDB
2.4.1's own CLI (CliQuery, DumpSeries, BuildData, Search) on the same HBase tables: the same
words, the same lines; except that OpenTSDB's lookup prints nothing (README, departures).

The data goes in with ``tsdb import`` on tables tsd created; OpenTSDB's tools run on the
JVM in UTC (its dates are the JVM's default time zone, tsd prints UTC).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.hbase.opentsdb import (
    fresh_tables,
    opentsdb_classpath,
    opentsdb_conf,
    tool_logback,
    tsd_hbase_keys,
)
from tests.hbase_harness import JVM_OPTS, HBaseServer
from tsd.config import StorageConfig

pytestmark = pytest.mark.hbase

HOUR = 1_356_998_400  # 2013-01-01T00:00:00Z
POINTS = [
    f"sys.cpu.user {HOUR} 42 host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 10} 45 host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 20} 1.5 host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 3600} -7 host=web01 cpu=0",
    f"sys.cpu.user {(HOUR + 30) * 1000 + 250} 50 host=web01 cpu=0",
    f"sys.cpu.user {HOUR} 0.1 host=web02 cpu=0",
    f"sys.cpu.user {HOUR + 60} 3 host=web02 cpu=1",
    f"sys.cpu.user {HOUR + 70} 9 host=web02 cpu=1",
    f"sys.mem.free {HOUR + 5} 100 host=web01",
]

#: query words, each run by both CLIs
QUERIES = [
    ["2013/01/01-00:00", "2013/01/01-03:00", "sum", "sys.cpu.user", "host=web01"],
    [str(HOUR), str(HOUR + 7200), "sum", "sys.cpu.user", "host=*"],
    [str(HOUR), str(HOUR + 7200), "max", "sys.cpu.user", "cpu=1", "sum", "sys.mem.free"],
    [str(HOUR), str(HOUR + 7200), "sum", "rate", "sys.cpu.user", "host=web02"],
    [str(HOUR), str(HOUR + 7200), "avg", "downsample", "60000", "max", "sys.cpu.user"],
]

#: how long OpenTSDB's lookup that finds a series may take after the other steps
LOOKUP_GRACE_S = 5

LOGBACK = tool_logback()


@pytest.fixture
async def tables(hbase_server: HBaseServer) -> AsyncIterator[StorageConfig]:
    async with fresh_tables(hbase_server) as cfg:
        yield cfg


class Clis:
    """Both command lines on the same tables."""

    def __init__(self, server: HBaseServer, cfg: StorageConfig, workdir: Path) -> None:
        self.workdir = workdir
        self.tsd_conf = workdir / "tsd.conf"
        keys = {"tsd.logging.level": "warning", **tsd_hbase_keys(cfg, workdir / "tsd-data")}
        self.tsd_conf.write_text("".join(f"{key} = {value}\n" for key, value in keys.items()))
        java_dir = workdir / "java"
        java_dir.mkdir()
        self.opentsdb_conf = opentsdb_conf(server, cfg, java_dir, 0)
        self.logback = workdir / "logback.xml"
        self.logback.write_text(LOGBACK)

    async def _stdout(self, argv: list[str]) -> str:
        """Run ``argv`` in the work directory; its output, once it exited 0."""
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=self.workdir, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def tsd(self, *args: str, config: bool = True) -> str:
        conf = ["--config", str(self.tsd_conf)] if config else []
        return await self._stdout([sys.executable, "-m", "tsd", *args, *conf])

    async def opentsdb(self, tool: str, *args: str) -> str:
        done = await self.run_opentsdb(tool, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def opentsdb_argv(self, tool: str, *args: str, logback: Path | None = None) -> list[str]:
        """The command line of OpenTSDB's ``net.opentsdb.tools.TOOL``."""
        classpath = await asyncio.to_thread(opentsdb_classpath)
        return [
            "java",
            "-Xmx256m",
            *JVM_OPTS,
            "-Duser.timezone=UTC",
            f"-Dlogback.configurationFile={logback or self.logback}",
            *["-cp", classpath, f"net.opentsdb.tools.{tool}", f"--config={self.opentsdb_conf}"],
            *args,
        ]

    async def run_opentsdb(
        self, tool: str, *args: str, logback: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """OpenTSDB's ``net.opentsdb.tools.TOOL`` on the JVM, in UTC, with its log set up
        by ``logback`` (default: warnings, message only, on stderr)."""
        return await asyncio.to_thread(
            subprocess.run,
            await self.opentsdb_argv(tool, *args, logback=logback),
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=180,
        )


@pytest.fixture
async def clis(hbase_server: HBaseServer, tables: StorageConfig, tmp_path: Path) -> Clis:
    clis = Clis(hbase_server, tables, tmp_path)
    (tmp_path / "points.txt").write_text("\n".join(POINTS) + "\n")
    await clis.tsd("import", "--auto-metric", "points.txt")
    return clis


async def test_query_scan_and_version_print_what_opentsdb_prints(clis: Clis) -> None:
    found = await asyncio.create_subprocess_exec(
        *await clis.opentsdb_argv("Search", "lookup", "sys.cpu.user", "host=web01"),
        cwd=clis.workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    for words in QUERIES:
        ours = await clis.tsd("query", *words)
        theirs = await clis.opentsdb("CliQuery", *words)
        assert ours == theirs, words
        assert ours  # every query finds points
    for flags in (["--import"], []):
        words = [*flags, str(HOUR - 3600), str(HOUR + 7200), "sum", "sys.cpu.user"]
        ours = await clis.tsd("scan", *words)
        theirs = await clis.opentsdb("DumpSeries", *words)
        assert ours == theirs, words
        assert "sys.cpu.user" in ours
    ours_version = (await clis.tsd("version", config=False)).splitlines()
    theirs_version = (await clis.opentsdb("BuildData")).splitlines()
    shape = [
        r"\S+ \S+ built at revision \S+ \((MINT|MODIFIED|UNKNOWN)\)",
        r"Built on .+ by .+@.+:.*",
    ]
    for lines in (ours_version, theirs_version):
        assert len(lines) == 2
        assert all(re.fullmatch(p, line) for p, line in zip(shape, lines, strict=True)), lines
    # tsd's lookup prints the series found. OpenTSDB's TimeSeriesLookup builds each line and
    # clears it, printing nothing; when it finds a series it waits, on the scanner's callback,
    # for the names of its UIDs, and in this harness it never exits (README, departures).
    # It runs beside the steps above, is given until they are done and a few seconds more,
    # then stopped (by its pid).
    words = ["lookup", "sys.cpu.user", "host=web01"]
    ours_lookup = await clis.tsd("search", *words)
    [line] = ours_lookup.splitlines()
    tsuid, metric, *tags = line.split()
    assert (metric, sorted(tags)) == ("sys.cpu.user", ["cpu=0", "host=web01"])
    assert len(tsuid) == 6 * 5  # metric and two tag pairs, 3-byte UIDs in hex
    try:
        found_out, _ = await asyncio.wait_for(found.communicate(), LOOKUP_GRACE_S)
    except TimeoutError:
        found.kill()
        found_out, _ = await found.communicate()
    assert found_out == b""
    # A lookup that matches no series: both print nothing, and OpenTSDB exits.
    words = ["lookup", "sys.mem.free", "cpu=0"]
    assert await clis.tsd("search", *words) == await clis.opentsdb("Search", *words) == ""
