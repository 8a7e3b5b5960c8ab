"""A pseudo-distributed HBase for the cluster tests: ``scripts/hbase cluster-start``.

ZooKeeper, a master, two region servers, two Thrift1 gateways and a Thrift2 gateway, each
its own JVM on free loopback ports under pytest's basetemp (about a minute to start on two
cores; 256 MB heaps). Started by the first cluster test, stopped at the end of the session
(and by the script's own watcher if pytest dies). Every cluster test is ``slow`` and
``cluster``; without java or mvn they skip, unless ``TSD_REQUIRE_HBASE=1`` (CI).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hbase_harness import (
    INSTALL_HINT,
    SCRIPT,
    HBaseServer,
    _free_port,
    script_env,
)
from tsd.config import StorageConfig


@dataclasses.dataclass
class HBaseCluster:
    """Where the cluster listens, and its processes by name (``rs0``, ``thrift1``...)."""

    env: dict[str, str]
    var_dir: Path
    zk_port: int
    region_server_ports: list[int]
    thrift_ports: list[int]
    thrift2_port: int

    def storage_config(self, gateway: int = 0, **overrides: Any) -> StorageConfig:
        """A StorageConfig on fresh tables (a unique prefix) behind one Thrift1 gateway."""
        prefix = f"c{uuid.uuid4().hex[:8]}"
        values: dict[str, Any] = {
            "backend": "hbase",
            "thrift_host": "127.0.0.1",
            "thrift_port": self.thrift_ports[gateway],
            "data_table": f"{prefix}_tsdb",
            "uid_table": f"{prefix}_tsdb-uid",
            "tree_table": f"{prefix}_tsdb-tree",
            "meta_table": f"{prefix}_tsdb-meta",
        }
        values.update(overrides)
        return StorageConfig(**values)

    def as_server(self) -> HBaseServer:
        """The cluster as the standalone harness names a server (its first Thrift1 gateway
        and its ZooKeeper), for the helpers of tests/hbase (OpenTSDB, the fsck tools)."""
        return HBaseServer(
            thrift_host="127.0.0.1",
            thrift_port=self.thrift_ports[0],
            zk_port=self.zk_port,
            var_dir=self.var_dir,
            owned=True,
            start_s=0.0,
        )

    def split(self, table: str) -> str:
        """Split every region of ``table`` in two (``scripts/hbase split``); returns once the
        new regions are open, with the script's line saying how long it took."""
        done = subprocess.run(
            [str(SCRIPT), "split", table], env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout.strip()

    def region_server_of(self, port: int) -> str:
        """The process name of the region server listening on ``port``."""
        return f"rs{self.region_server_ports.index(port)}"

    def kill(self, name: str) -> None:
        """kill -9 one process of the cluster."""
        self._script("kill", name)

    def revive(self, name: str) -> None:
        """Start a killed process again."""
        self._script("revive", name)

    def running(self) -> dict[str, bool]:
        done = subprocess.run(
            [str(SCRIPT), "cluster-status"], env=self.env, capture_output=True, text=True
        )
        return {line.split()[0]: line.split()[1] != "down" for line in done.stdout.splitlines()}

    def _script(self, *args: str) -> None:
        subprocess.run([str(SCRIPT), *args], env=self.env, check=True, capture_output=True)


@pytest.fixture(scope="session")
def hbase_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HBaseCluster]:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        message = f"{' and '.join(missing)} not found: {INSTALL_HINT}"
        if os.environ.get("TSD_REQUIRE_HBASE", "") == "1":
            pytest.fail(f"TSD_REQUIRE_HBASE=1 but {message}", pytrace=False)
        pytest.skip(message)
    var_dir = tmp_path_factory.mktemp("hbase-cluster")
    cluster = HBaseCluster(
        env={},
        var_dir=var_dir,
        zk_port=_free_port(),
        region_server_ports=[_free_port(), _free_port()],
        thrift_ports=[_free_port(), _free_port()],
        thrift2_port=_free_port(),
    )
    cluster.env = {
        **script_env(var_dir, cluster.zk_port),
        "TSD_HBASE_MASTER_PORT": str(_free_port()),
        "TSD_HBASE_RS_PORTS": ",".join(map(str, cluster.region_server_ports)),
        "TSD_HBASE_THRIFT_PORTS": ",".join(map(str, cluster.thrift_ports)),
        "TSD_HBASE_THRIFT2_PORT": str(cluster.thrift2_port),
    }
    done = subprocess.run(
        [str(SCRIPT), "cluster-start"], env=cluster.env, capture_output=True, text=True
    )
    if done.returncode != 0:
        subprocess.run([str(SCRIPT), "cluster-stop"], env=cluster.env, capture_output=True)
        pytest.fail(f"scripts/hbase cluster-start failed:\n{done.stderr[-4000:]}", pytrace=False)
    try:
        yield cluster
    finally:
        # Its data is thrown away: kill -9 every process at once (a clean stop takes half
        # a minute, one process after the other).
        for pid_file in var_dir.glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        subprocess.run([str(SCRIPT), "cluster-stop"], env=cluster.env, capture_output=True)
        shutil.rmtree(var_dir, ignore_errors=True)
