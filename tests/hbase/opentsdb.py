"""The real OpenTSDB 2.4.1 for interoperability tests, on the test HBase.

Its jars come from Maven Central through hbase/opentsdb/pom.xml (opentsdb,
asynchbase 1.8.2, the ZooKeeper 3.4.6 client; no GWT). ``net.opentsdb.tools.
TSDMain`` runs on JDK 17 as is, reaches HBase 2.6 through ZooKeeper, and refuses
to start until its four tables exist: create them first (``create_tables``).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.hbase_harness import ROOT, HBaseServer
from tsd.config import StorageConfig

POM = ROOT / "hbase" / "opentsdb" / "pom.xml"
LOGBACK = ROOT / "hbase" / "opentsdb" / "logback.xml"
CLASSPATH_FILE = ROOT / "hbase" / "target" / "opentsdb-classpath.txt"
START_TIMEOUT_S = 120


def opentsdb_classpath() -> str:
    """OpenTSDB's runtime classpath (resolved with Maven once, then cached)."""
    if not CLASSPATH_FILE.exists() or POM.stat().st_mtime > CLASSPATH_FILE.stat().st_mtime:
        CLASSPATH_FILE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CLASSPATH_FILE.with_suffix(".tmp")
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(POM), "dependency:build-classpath"]
            + [f"-Dmdep.outputFile={tmp}"],
            check=True,
            capture_output=True,
        )
        tmp.replace(CLASSPATH_FILE)
    return CLASSPATH_FILE.read_text().strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class OpenTSDB:
    """A running OpenTSDB: its HTTP/telnet port and where it logs."""

    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def opentsdb_conf(server: HBaseServer, cfg: StorageConfig, workdir: Path, port: int) -> Path:
    """An opentsdb.conf naming ``cfg``'s tables, on ``server``'s ZooKeeper."""
    path = workdir / "opentsdb.conf"
    path.write_text(
        f"tsd.network.port = {port}\n"
        "tsd.network.bind = 127.0.0.1\n"
        f"tsd.http.staticroot = {workdir / 'static'}\n"
        f"tsd.http.cachedir = {workdir / 'cache'}\n"
        f"tsd.storage.hbase.zk_quorum = 127.0.0.1:{server.zk_port}\n"
        f"tsd.storage.hbase.data_table = {cfg.data_table}\n"
        f"tsd.storage.hbase.uid_table = {cfg.uid_table}\n"
        f"tsd.storage.hbase.tree_table = {cfg.tree_table}\n"
        f"tsd.storage.hbase.meta_table = {cfg.meta_table}\n"
        "tsd.core.auto_create_metrics = true\n"
    )
    return path


@contextlib.asynccontextmanager
async def running_opentsdb(
    server: HBaseServer, cfg: StorageConfig, workdir: Path
) -> AsyncIterator[OpenTSDB]:
    """Start OpenTSDB on a free port with ``cfg``'s tables; stop it (by pid) afterwards."""
    if shutil.which("java") is None:
        raise RuntimeError("java not found")
    classpath = await asyncio.to_thread(opentsdb_classpath)
    for sub in ("static", "cache"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    port = _free_port()
    conf = opentsdb_conf(server, cfg, workdir, port)
    log = workdir / "opentsdb.log"
    process = await asyncio.to_thread(_launch, classpath, conf, log)
    try:
        await _wait_ready(process, port, log)
        yield OpenTSDB(port, log)
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 30)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)


def _launch(classpath: str, conf: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["java", "-Xmx512m", f"-Dlogback.configurationFile={LOGBACK}", "-cp", classpath]
            + ["net.opentsdb.tools.TSDMain", f"--config={conf}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def _wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(START_TIMEOUT_S * 4):
            if process.poll() is not None:
                output = await asyncio.to_thread(log.read_text)
                raise RuntimeError(f"OpenTSDB exited ({process.returncode}):\n{output}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{port}/api/version") as reply:
                    if reply.status == 200:
                        return
            await asyncio.sleep(0.25)
    output = await asyncio.to_thread(log.read_text)
    raise RuntimeError(f"OpenTSDB did not answer within {START_TIMEOUT_S}s:\n{output}")
