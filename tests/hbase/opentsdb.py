"""The real OpenTSDB 2.4.1 for interoperability tests, on the test HBase.

Its jars come from Maven Central through hbase/opentsdb/pom.xml (opentsdb,
asynchbase 1.8.2, the ZooKeeper 3.4.6 client; no GWT). ``net.opentsdb.tools.
TSDMain`` runs on JDK 17 as is, reaches HBase 2.6 through ZooKeeper, and refuses
to start until its four tables exist: create them first (``create_tables``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.hbase_harness import JVM_OPTS, ROOT, HBaseServer, drop_tables, unique_prefix
from tests.readiness import wait_http_ready
from tsd.config import StorageConfig, build_config
from tsd.daemon import Daemon
from tsd.storage.base import ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings
from tsd.tools.create_tables import create_tables

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
    pid: int = 0  # the java process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def tool_logback(*info_loggers: str) -> str:
    """A logback.xml for OpenTSDB's command-line tools whose output a test compares: their
    messages only (``%msg``, on stderr), INFO for ``info_loggers`` (the tool's own lines),
    WARN elsewhere, and asynchbase's warnings off (its "Slow DNS lookup!" line on a busy
    machine is not the tool's output)."""
    loggers = "".join(f'  <logger name="{name}" level="INFO"/>\n' for name in info_loggers)
    return (
        "<configuration>\n"
        '  <appender name="ERR" class="ch.qos.logback.core.ConsoleAppender">\n'
        "    <target>System.err</target>\n"
        "    <encoder><pattern>%msg%n</pattern></encoder>\n"
        "  </appender>\n"
        f'{loggers}  <logger name="org.hbase.async" level="ERROR"/>\n'
        '  <root level="WARN"><appender-ref ref="ERR"/></root>\n'
        "</configuration>\n"
    )


def tsd_hbase_keys(cfg: StorageConfig, data_dir: Path | None) -> dict[str, str]:
    """The configuration keys of a tsd on ``cfg``'s HBase tables, read-time compaction off
    (OpenTSDB's default is on: it would rewrite rows under a test's feet). ``data_dir``: its
    own directory for the write-ahead log (the default, ./data, is a user's daemon's); None
    only where the command line sets it (the Docker image's --data-dir)."""
    return {
        "tsd.storage.backend": "hbase",
        **({"tsd.storage.data_dir": str(data_dir)} if data_dir is not None else {}),
        "tsd.storage.hbase.thrift.host": cfg.thrift_host,
        "tsd.storage.hbase.thrift.port": str(cfg.thrift_port),
        "tsd.storage.hbase.data_table": cfg.data_table,
        "tsd.storage.hbase.uid_table": cfg.uid_table,
        "tsd.storage.hbase.tree_table": cfg.tree_table,
        "tsd.storage.hbase.meta_table": cfg.meta_table,
        "tsd.storage.enable_compaction": "false",
    }


async def started_tsd(
    stack: contextlib.AsyncExitStack, cfg: StorageConfig, data_dir: Path, **keys: str
) -> Daemon:
    """An in-process tsd on ``cfg``'s HBase tables (127.0.0.1, an ephemeral port, metrics
    auto-created, ``keys`` besides), stopped when ``stack`` closes."""
    values = {
        "tsd.network.bind": "127.0.0.1",
        "tsd.network.port": "0",
        "tsd.core.auto_create_metrics": "true",
        **keys,
        **tsd_hbase_keys(cfg, data_dir),
    }
    daemon = Daemon(build_config(values))
    await daemon.start()
    stack.push_async_callback(daemon.stop)
    return daemon


def opentsdb_conf(
    server: HBaseServer,
    cfg: StorageConfig,
    workdir: Path,
    port: int,
    extra: Mapping[str, str] | None = None,
) -> Path:
    """An opentsdb.conf naming ``cfg``'s tables, on ``server``'s ZooKeeper; ``extra``: more
    ``key = value`` lines (they come last, so they win)."""
    path = workdir / "opentsdb.conf"
    more = "".join(f"{key} = {value}\n" for key, value in (extra or {}).items())
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
        "tsd.core.auto_create_metrics = true\n" + more
    )
    return path


@contextlib.asynccontextmanager
async def running_opentsdb(
    server: HBaseServer,
    cfg: StorageConfig,
    workdir: Path,
    extra: Mapping[str, str] | None = None,
) -> AsyncIterator[OpenTSDB]:
    """Start OpenTSDB on a free port with ``cfg``'s tables; stop it (by pid) afterwards.

    ``extra``: opentsdb.conf keys to add or override."""
    if shutil.which("java") is None:
        raise RuntimeError("java not found")
    classpath = await asyncio.to_thread(opentsdb_classpath)
    for sub in ("static", "cache"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    port = _free_port()
    conf = opentsdb_conf(server, cfg, workdir, port, extra)
    log = workdir / "opentsdb.log"
    process = await asyncio.to_thread(_launch, classpath, conf, log)
    try:
        await _wait_ready(process, port, log)
        yield OpenTSDB(port, log, process.pid)
    finally:
        await stop_process(process)


async def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s: a server this test process started."""
    process.terminate()
    try:
        await asyncio.to_thread(process.wait, 30)
    except subprocess.TimeoutExpired:
        process.kill()
        await asyncio.to_thread(process.wait)


def _launch(classpath: str, conf: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                "java",
                "-Xmx512m",
                *JVM_OPTS,
                f"-Dlogback.configurationFile={LOGBACK}",
                "-cp",
                classpath,
            ]
            + ["net.opentsdb.tools.TSDMain", f"--config={conf}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def _wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    url = f"http://127.0.0.1:{port}/api/version"
    await wait_http_ready("OpenTSDB", url, process.poll, log, START_TIMEOUT_S, every_s=0.25)


async def put_telnet(port: int, lines: Iterable[str]) -> list[str]:
    """Send telnet ``put`` lines to a TSD (OpenTSDB or tsd) on 127.0.0.1.

    A put is answered only when it fails, so ``version`` follows the lines: its reply
    (its second line starts with ``Built on``) shows every line before it was handled.
    Returns the replies to the puts: error lines, none when all were accepted.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write("".join(f"{line}\n" for line in lines).encode() + b"version\n")
        await writer.drain()
        replies: list[str] = []
        while True:
            line = await reader.readline()
            if not line:
                raise ConnectionError(f"port {port} closed the connection: {replies!r}")
            text = line.decode("utf-8", "replace").rstrip("\n")
            if text.startswith("Built on"):
                break
            replies.append(text)
    finally:
        writer.close()
        await writer.wait_closed()
    # the first line of the version reply ("net.opentsdb... built at revision ...")
    return replies[:-1]


@contextlib.asynccontextmanager
async def fresh_tables(server: HBaseServer) -> AsyncIterator[StorageConfig]:
    """OpenTSDB's four tables under a new prefix (``tsdb create-tables``), as a StorageConfig
    naming them; dropped afterwards in an external HBase (the harness's own is thrown away)."""
    prefix = unique_prefix()
    cfg = server.storage_config(
        data_table=f"{prefix}tsdb",
        uid_table=f"{prefix}tsdb-uid",
        tree_table=f"{prefix}tsdb-tree",
        meta_table=f"{prefix}tsdb-meta",
    )
    storage = HBaseStorage(hbase_settings(cfg))
    try:
        await create_tables(storage, cfg)
    finally:
        await storage.close()
    try:
        yield cfg
    finally:
        if not server.owned:
            await drop_tables(server, prefix)


#: the counter row of tsdb-uid (OpenTSDB's MAXID_ROW)
MAXID_ROW = b"\x00"


@dataclasses.dataclass
class UidTable:
    """What tsdb-uid holds, per kind (``metrics``, ``tagk``, ``tagv``)."""

    forward: dict[str, dict[bytes, bytes]]  # kind -> name -> UID (family id)
    reverse: dict[str, dict[bytes, bytes]]  # kind -> UID -> name (family name)
    counters: dict[str, int]  # kind -> the counter row's value

    def name(self, kind: str, uid: bytes) -> str:
        return self.reverse[kind][uid].decode("latin-1")

    def uid(self, kind: str, name: str) -> bytes:
        return self.forward[kind][name.encode("latin-1")]

    def problems(self) -> list[str]:
        """Every way the table gives one name two UIDs or one UID two names.

        The forward rows decide (one cell per name and kind): no two names may share a
        UID, and the reverse row of each assigned UID must name its name. A reverse row
        whose UID no forward row uses is an ID leaked by a lost race (OpenTSDB leaks them
        too): allowed, see :meth:`leaked`.
        """
        found = []
        for kind, names in self.forward.items():
            owners: dict[bytes, list[bytes]] = {}
            for name, uid in names.items():
                owners.setdefault(uid, []).append(name)
                back = self.reverse.get(kind, {}).get(uid)
                if back != name:
                    found.append(f"{kind} {name!r} -> {uid.hex()} but {uid.hex()} -> {back!r}")
            found += [
                f"{kind} {uid.hex()} has names {sorted(many)!r}"
                for uid, many in owners.items()
                if len(many) > 1
            ]
        return found

    def leaked(self, kind: str) -> dict[bytes, bytes]:
        """UID -> name of the reverse rows no forward row points back to."""
        used = set(self.forward.get(kind, {}).values())
        return {uid: name for uid, name in self.reverse.get(kind, {}).items() if uid not in used}


async def read_uid_table(storage: HBaseStorage, cfg: StorageConfig) -> UidTable:
    """Scan the whole of ``cfg.uid_table``."""
    table = UidTable({}, {}, {})
    async with contextlib.aclosing(storage.scan(cfg.uid_table, ScanSpec())) as rows:
        async for row in rows:
            for cell in row.cells:
                kind = cell.qualifier.decode("latin-1")
                if row.key == MAXID_ROW and cell.family == "id":
                    table.counters[kind] = int.from_bytes(cell.value, "big", signed=True)
                elif cell.family == "id":
                    table.forward.setdefault(kind, {})[row.key] = cell.value
                elif cell.family == "name" and kind in ("metrics", "tagk", "tagv"):
                    table.reverse.setdefault(kind, {})[row.key] = cell.value
    return table
