"""A real HBase for the test run: started once, on first use, with ``scripts/hbase``.

Loaded as a pytest plugin (``pytest_plugins`` in tests/conftest.py). Tests get it
through the ``hbase`` parameter of the ``storage`` fixture (``hbase_store``) or
the ``hbase_server`` fixture; both are marked ``hbase``.

- Nothing starts unless an HBase test runs (``-m "not hbase"`` never starts it).
- The first test that needs HBase starts it (about 12 s), in a fresh directory
  under pytest's basetemp, on free loopback ports; it runs until the session
  ends, and ``scripts/hbase`` stops it by itself if this process dies.
- ``TSD_HBASE_THRIFT=host:port`` uses an HBase that is already running instead
  (``scripts/hbase start`` once, then fast test runs; ``TSD_HBASE_ZK_PORT`` if its
  ZooKeeper is not on 2181); the test tables made there are dropped at the end.
- Without java or mvn the HBase tests skip, saying what to install. With
  ``TSD_REQUIRE_HBASE=1`` (set by ``.ci/run``) any failure to start is an error.
- Isolation: each test sees a fresh store under a table-name prefix; prefixes are
  recycled with their tables emptied (tests/hbase/recycling.py), since creating
  a table takes about 0.5 s. An external HBase gets its test tables dropped at
  the end; the harness's own is thrown away whole.

PYTEST_DONT_REWRITE: tests/conftest.py imports this module before pytest loads
it as a plugin; it has no asserts to rewrite, and this marker keeps pytest from
warning that it cannot rewrite them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tsd.config import StorageConfig
from tsd.storage_setup import hbase_settings

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "hbase"
#: The gateway's idle-connection timeout in the test instance: shorter than HBase's 60 s so
#: that the pool's reconnecting is exercised (tests/hbase/test_pool.py waits this out once).
THRIFT_READ_TIMEOUT_MS = 3000
#: the flags of every JVM the tests start (HBase's, the cluster's, OpenTSDB's): the serial
#: collector and the C1 compiler only. The tests' JVMs live minutes on a machine of few
#: cores, where G1's threads and C2's compilations cost more CPU than they save: the
#: cluster's tests took 100 s of machine CPU instead of 171 (159 s of wall clock instead
#: of 185) on two cores
JVM_OPTS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def script_env(var_dir: Path, zk_port: int) -> dict[str, str]:
    """The environment of a test's ``scripts/hbase`` (standalone or cluster): its own
    directory and ZooKeeper port, the tests' gateway timeout and JVM flags, and this
    process's pid (HBase stops when it dies)."""
    return {
        **os.environ,
        "TSD_HBASE_VAR": str(var_dir),
        "TSD_HBASE_ZK_PORT": str(zk_port),
        "TSD_HBASE_THRIFT_READ_TIMEOUT_MS": str(THRIFT_READ_TIMEOUT_MS),
        "TSD_HBASE_JVM_OPTS": " ".join(JVM_OPTS),
        "TSD_HBASE_WATCH_PID": str(os.getpid()),
    }


INSTALL_HINT = (
    "the HBase tests need a JDK 17 and Maven (Debian: apt-get install openjdk-17-jdk-headless "
    "maven), and Maven Central reachable once to fetch HBase's jars"
)


@dataclasses.dataclass(frozen=True)
class HBaseServer:
    """Where the test HBase listens."""

    thrift_host: str
    thrift_port: int
    zk_port: int  # ZooKeeper's client port (external: TSD_HBASE_ZK_PORT, else 2181)
    var_dir: Path | None  # None when external
    owned: bool  # started by this harness (and stopped at the end)
    start_s: float  # how long starting took; 0 when external

    def storage_config(self, **overrides: Any) -> StorageConfig:
        """A StorageConfig for the HBase backend pointing at this server."""
        values: dict[str, Any] = {
            "backend": "hbase",
            "thrift_host": self.thrift_host,
            "thrift_port": self.thrift_port,
        }
        values.update(overrides)
        return StorageConfig(**values)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HBaseHarness:
    """Starts HBase at most once per process; remembers a failure to start."""

    def __init__(self) -> None:
        #: prefixes whose tables are empty, with those tables' families (hbase_store)
        self.recycled: list[tuple[str, dict[str, Any]]] = []
        #: every prefix handed out (dropped at the end in an external HBase)
        self.prefixes: set[str] = set()
        self._server: HBaseServer | None = None
        self._failure: BaseException | None = None
        self._env: dict[str, str] = {}
        self.basetemp: Path | None = None

    @property
    def required(self) -> bool:
        return os.environ.get("TSD_REQUIRE_HBASE", "") == "1"

    def server(self) -> HBaseServer:
        if self._server is not None:
            return self._server
        if self._failure is not None:
            raise self._failure
        try:
            self._server = self._start()
        except BaseException as exc:  # Skipped/Failed too: every later test sees the same
            self._failure = exc
            raise
        return self._server

    def _start(self) -> HBaseServer:
        external = os.environ.get("TSD_HBASE_THRIFT", "")
        if external:
            host, _, port = external.rpartition(":")
            zk_port = int(os.environ.get("TSD_HBASE_ZK_PORT", "2181"))
            return HBaseServer(host or "127.0.0.1", int(port), zk_port, None, False, 0.0)
        missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
        if missing:
            message = f"{' and '.join(missing)} not found: {INSTALL_HINT}"
            if self.required:
                pytest.fail(f"TSD_REQUIRE_HBASE=1 but {message}", pytrace=False)
            pytest.skip(message)
        base = self.basetemp or Path(os.environ.get("TMPDIR", "/tmp"))
        var_dir = base / f"hbase-{uuid.uuid4().hex[:8]}"
        self._env = {
            **script_env(var_dir, _free_port()),
            "TSD_HBASE_THRIFT_PORT": str(_free_port()),
        }
        began = time.monotonic()
        done = subprocess.run(
            [str(SCRIPT), "start"], env=self._env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            self._stop()
            message = f"scripts/hbase start failed ({done.returncode}):\n{done.stderr[-4000:]}"
            if self.required:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        return HBaseServer(
            "127.0.0.1",
            int(self._env["TSD_HBASE_THRIFT_PORT"]),
            int(self._env["TSD_HBASE_ZK_PORT"]),
            var_dir,
            True,
            time.monotonic() - began,
        )

    def _stop(self) -> None:
        if self._env:
            subprocess.run([str(SCRIPT), "stop"], env=self._env, capture_output=True, check=False)
            self._env = {}

    def shutdown(self) -> None:
        if self._server is not None and not self._server.owned:
            for prefix in self.prefixes:
                asyncio.run(drop_tables(self._server, prefix))
        if self._server is not None and self._server.owned:
            self._stop()
            if self._server.var_dir is not None:
                shutil.rmtree(self._server.var_dir, ignore_errors=True)
        self._server = None


HARNESS = HBaseHarness()


def pytest_sessionstart(session: pytest.Session) -> None:
    HARNESS.basetemp = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    HARNESS.shutdown()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    server = HARNESS._server
    if server is not None and server.owned:
        terminalreporter.write_line(f"HBase: started in {server.start_s:.1f} s for this run")


@pytest.fixture(scope="session")
def hbase_server() -> HBaseServer:
    """The running test HBase (started on first use)."""
    return HARNESS.server()


def unique_prefix() -> str:
    """A table-name prefix no other test (or run) uses."""
    return f"t{uuid.uuid4().hex[:10]}_"


@asynccontextmanager
async def hbase_store(tmp_path: Path) -> AsyncIterator[Any]:
    """The ``hbase`` entry of tests/conftest.py's STORAGE_BACKENDS.

    The store's prefix is one an earlier test used, its tables emptied and hidden
    until created again (tests/hbase/recycling.py): a fresh store without paying
    for ``createTable`` in every test.
    """
    from tests.conftest import StoreUnderTest
    from tests.hbase.recycling import RecyclingHBaseStorage, empty_tables

    server = await asyncio.to_thread(HARNESS.server)  # the first call waits for start-up
    prefix, leftovers = HARNESS.recycled.pop() if HARNESS.recycled else (unique_prefix(), {})
    HARNESS.prefixes.add(prefix)
    cfg = server.storage_config()
    storage = RecyclingHBaseStorage(cfg, prefix, leftovers)
    try:
        yield StoreUnderTest(storage, prefix)
    finally:
        await storage.close()
        # A prefix whose tables could not be emptied is not used again.
        HARNESS.recycled.append((prefix, await empty_tables(cfg, prefix)))


async def drop_tables(server: HBaseServer, prefix: str) -> None:
    """Drop every table whose name starts with ``prefix`` (an external HBase's cleanup)."""
    from tsd.storage.hbase import HBaseStorage

    admin = HBaseStorage(hbase_settings(server.storage_config()))
    try:
        for table in await admin.list_tables():
            if table.startswith(prefix):
                await admin.drop_table(table)
    finally:
        await admin.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the HBase tests last, so a failing start does not delay the fast feedback; and
    mark them ``slow`` as well (an HBase start alone is 30-60 s), so that
    ``-m "not slow"`` is the fast loop without naming HBase. (Under pytest-xdist each
    worker would start an HBase of its own: the full suite runs in one process.) The tests
    marked ``serial`` go after them all: their session fixture, the Docker image, is built
    in a thread from the run's start (tests/server/conftest.py), which the tests before
    them leave time for."""
    for item in items:
        if item.get_closest_marker("hbase") is not None:
            item.add_marker(pytest.mark.slow)
    items.sort(
        key=lambda item: (
            item.get_closest_marker("serial") is not None,
            item.get_closest_marker("hbase") is not None,
        )
    )
