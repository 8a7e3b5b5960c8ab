"""``tsdb tsd``: the composition root and the daemon's lifecycle.

Start: Config -> Storage (tables created if missing) -> UidService -> Writer -> QueryEngine
-> aiohttp app + telnet -> one listening socket. Stop (SIGTERM, SIGINT, ``diediedie``), in
an order that loses nothing accepted (uvicorn's server.shutdown is the model):

1. stop accepting connections;
2. let every telnet connection handle the lines it already read, then close it;
3. let HTTP requests in progress finish (``/api/put?sync`` waits for its writes), close
   idle keep-alive connections;
4. close the writer: write everything buffered, compact the hours that are due;
5. close storage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import socket
import time
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from aiohttp import web

import tsd.native as native
from tsd.buildinfo import version_reply
from tsd.codec.rowkey import KeyLayout
from tsd.config import Config, load_config
from tsd.errors import ConfigError
from tsd.log import DAEMON, configure_logging, get_logger
from tsd.malloc import FreedMemory, keep_freed_memory
from tsd.meta.service import MetaService
from tsd.protocol.histogram_put import HistogramCodecs, parse_histogram_config
from tsd.protocol.names import NameRules
from tsd.protocol.rollup_config import RollupConfig
from tsd.protocol.rollup_put import RollupRules
from tsd.protocol.telnet import telnet_command_names
from tsd.query.engine import QueryEngine
from tsd.query.rollup_compute import ComputedRollups
from tsd.query.tracking import QueryTracker
from tsd.server.credentials import Credentials
from tsd.server.http.app import make_app
from tsd.server.http.context import Services
from tsd.server.listener import BoundPort, Listener
from tsd.server.telnet import (
    HBASE_ERROR,
    STORAGE_ERROR,
    TelnetContext,
    TelnetStats,
    telnet_factory,
)
from tsd.server.telnet_auth import authenticated_telnet_factory
from tsd.server.tls import server_context
from tsd.server.worker_pool import WorkerPool, worker_count
from tsd.stats import StatsRegistry, host_tag
from tsd.storage.base import Storage
from tsd.storage.factory import open_storage
from tsd.storage.instrumented import InstrumentedStorage
from tsd.storage_setup import ensure_tables, rollup_setup, storage_settings
from tsd.uid.service import UidService, check_uid_config
from tsd.uid.uniqueid import UniqueId
from tsd.write.batch_writer import Writer, WriterLimits
from tsd.write.cell_store import CellStore
from tsd.write.control import ControlServer
from tsd.write.histogram_store import Histograms
from tsd.write.ingest import IngestService
from tsd.write.pipeline import WritePath
from tsd.write.rollup import RollupWriter
from tsd.write.rollup_store import Rollups

log = get_logger(DAEMON)

#: Seconds a stop waits for telnet connections, then for HTTP requests, to finish.
TELNET_DRAIN_TIMEOUT_S = 15.0
HTTP_SHUTDOWN_TIMEOUT_S = 15.0
#: A stop still running after this long logs every task's stack (``daemon.task`` lines).
STOP_WATCHDOG_S = TELNET_DRAIN_TIMEOUT_S + HTTP_SHUTDOWN_TIMEOUT_S + 15.0
#: how often the heap's freed chunks are looked at, and how many new bytes of them are
#: given back (tsd/malloc.py's FreedMemory: about a millisecond a look)
FREED_CHECK_S = 5.0
FREED_RELEASE_BYTES = 32 << 20


def computed_rollups(config: Config, effective: RollupConfig | None) -> ComputedRollups | None:
    """What tsd computes of the rollup configuration in force (docs/rollups.md); logs the
    intervals it leaves to an outside job."""
    if effective is None:
        return None
    computed = ComputedRollups.from_config(
        effective, effective.intervals, KeyLayout.from_storage_config(config.storage)
    )
    skipped = [
        i.interval
        for i in effective.intervals
        if not i.default_interval and not computed.computes(i)
    ]
    if skipped:
        log.warning("rollup.not_computed_intervals", intervals=skipped, why="longer than an hour")
    return computed


def load_histogram_codecs(value: str) -> HistogramCodecs | None:
    """HistogramCodecManager's reading of ``tsd.core.histograms.config`` (None when unset:
    histograms are off)."""
    if not value:
        return None
    text = value
    if value.endswith(".json"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                "tsd.core.histograms.config", f"Unable to open plugin config file: {value}"
            ) from exc
    return parse_histogram_config(text)


class Daemon:
    """One TSD: build with a Config, ``await start()``, later ``await stop()``."""

    def __init__(
        self,
        config: Config,
        *,
        storage: Storage | None = None,
        writer_limits: WriterLimits | None = None,
        hostname: str | None = None,
    ) -> None:
        """``storage``: use this store instead of opening the configured one (the caller
        closes it); ``writer_limits``: the write path's sizes."""
        self.config = config
        self.registry = StatsRegistry()
        self._hostname = hostname or socket.gethostname()
        self._stop_requested = asyncio.Event()
        self._storage: Storage | None = storage
        self._owns_storage = storage is None
        self._writer_limits = writer_limits
        self._write_path: WritePath | None = None
        self._uids: UidService | None = None
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None
        self._workers: WorkerPool | None = None
        self._control: ControlServer | None = None
        self._query_engine: Any = None
        self._freed_task: asyncio.Task[None] | None = None
        self._stopped = False

    # -- start --------------------------------------------------------------------------------

    async def start(self) -> None:
        # The port first: a start that fails on it creates nothing (no data directory,
        # store or log); given up again if anything later fails.
        network = self.config.network
        bound = BoundPort()
        await bound.bind(network.bind, network.port)
        try:
            await self._start(bound)
        except BaseException:
            bound.close()
            raise

    async def _start(self, bound: BoundPort) -> None:
        config = self.config
        network = config.network
        # Security settings first: a bad credentials file or certificate stops the start
        # before storage is opened.
        credentials = Credentials.load(config.auth.users_file) if config.auth.enable else None
        tls = server_context(network.tls_cert, network.tls_key) if network.tls_cert else None
        check_uid_config(config)
        if self._storage is None:
            self._storage = open_storage(storage_settings(config.storage))
        if config.storage.backend == "embedded":
            # Tools beside the daemon ask it to write out what it acknowledged first.
            self._control = ControlServer(config.storage.data_dir)
            await self._control.start()
        storage = InstrumentedStorage(self._storage, self.registry)
        self._gateway_stats(self._storage)
        rollups = rollup_setup(config)
        rollup_config = rollups.stored
        if config.storage.create_tables:
            created = await ensure_tables(storage, config.storage, rollups.tables())
            if created:
                log.info("daemon.tables_created", tables=created)
        computed = computed_rollups(config, rollups.effective) if rollups.computes else None
        uids = self._uids = UidService(storage, config)
        write_path = self._write_path = WritePath.build(
            storage,
            uids,
            config,
            self.registry,
            self._writer_limits,
            rollups=computed,
            rollup_intervals=rollups.intervals(),
            cells=self._cell_store(storage, uids, rollup_config),
        )
        await write_path.start()
        if self._control is not None:
            self._control.serve(write_path.writer.write_out)
        services = self._services(storage, uids, write_path, credentials)
        if services.query_engine is not None:
            services.query_engine.rollups = rollups.effective
            services.query_engine.computed = computed
        tracker = services.query_tracker
        self.registry.gauge("query.count", lambda: tracker.running_count, type="running")
        http_options: dict[str, Any] = {}
        if config.network.socket_timeout_s > 0:  # idle keep-alive connections, as telnet's
            http_options["keepalive_timeout"] = float(config.network.socket_timeout_s)
        self._query_engine = services.query_engine
        self._runner = web.AppRunner(
            make_app(services),
            access_log=None,
            shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT_S,
            # A client that goes away cancels its handler: its query stops (issue 13).
            handler_cancellation=True,
            **http_options,
        )
        await self._runner.setup()
        assert self._runner.server is not None
        telnet_context = self._telnet_context(services)
        self._listener = Listener(
            telnet_factory(telnet_context)
            if credentials is None
            else authenticated_telnet_factory(telnet_context, credentials),
            self._runner.server,
            self.registry,
            network.connections_limit,
            header_timeout_s=float(network.header_timeout_s),
            tls=tls,
            tls_required=network.tls_required,
        )
        workers = worker_count(network.worker_threads)
        if workers and credentials is None and "put" in telnet_context.commands:
            writer = write_path.writer
            self._workers = WorkerPool(
                telnet_context,
                TelnetStats(self.registry),
                workers,
                writer_full=writer.is_full,
                wait_writable=writer.wait_writable,
            )
            await self._workers.start()
            self._listener.handoff = self._workers.adopt
        await self._listener.start(network.bind, network.port, bound=bound)
        freed = FreedMemory(config.query.keep_freed_bytes)
        if freed.available:
            self._freed_task = asyncio.get_running_loop().create_task(release_freed(freed))
        self._register_stats(uids)
        self._report_native_helpers()
        log.info(
            "daemon.started",
            bind=config.network.bind,
            port=self.port,
            mode=config.core.mode,
            backend=config.storage.backend,
            tls=tls is not None,
            authentication=credentials is not None,
        )

    def _cell_store(
        self, storage: InstrumentedStorage, uids: UidService, rollup_config: RollupConfig | None
    ) -> CellStore:
        """The stores of rollup, pre-aggregate and histogram puts (one cell each)."""
        config = self.config
        rules = NameRules(config.core.tag_allow_specialchars, config.storage.max_tags)
        rollups = Rollups(
            RollupRules(
                rollup_config,
                config.rollups.agg_tag_key,
                config.rollups.raw_agg_tag_value,
                config.rollups.tag_raw,
                config.rollups.block_derived,
                rules,
            ),
            RollupWriter(storage, uids, KeyLayout.from_storage_config(config.storage)),
            self.registry,
        )
        histograms = Histograms(
            load_histogram_codecs(config.core.histograms_config),
            rollups.writer,
            config.storage.data_table,
            rules,
        )
        return CellStore(rollups, histograms)

    def _services(
        self,
        storage: InstrumentedStorage,
        uids: UidService,
        write_path: WritePath,
        credentials: Credentials | None,
    ) -> Services:
        config = self.config
        cells = write_path.ingest.cells
        assert cells is not None
        rules = NameRules(config.core.tag_allow_specialchars, config.storage.max_tags)
        return Services(
            config=config,
            ingest=write_path.ingest,
            uids=uids,
            registry=self.registry,
            stats_tags=self._stats_tags(),
            rules=rules,
            request_shutdown=self.request_shutdown,
            histogram_codecs=cells.histograms.codecs,
            meta=write_path.meta,
            storage_calls=storage,
            query_tracker=QueryTracker(),
            query_engine=(
                QueryEngine(storage, uids, config, head=write_path.head)
                if config.core.mode != "wo"
                else None
            ),
            credentials=credentials,
        )

    def _telnet_context(self, services: Services) -> TelnetContext:
        core = self.config.core
        return TelnetContext(
            ingest=services.ingest,
            uids=services.uids,
            registry=self.registry,
            stats_tags=services.stats_tags,
            version_reply=version_reply(),
            commands=telnet_command_names(core.mode, allow_diediedie=not core.no_diediedie),
            rules=services.rules,
            max_line_bytes=self.config.telnet.max_line_bytes,
            return_errors=self.config.telnet.return_errors,
            diediedie_loopback_only=core.diediedie_loopback_only,
            request_shutdown=self.request_shutdown,
            idle_timeout_s=float(self.config.network.socket_timeout_s),
            storage_error=HBASE_ERROR if self.config.storage.backend == "hbase" else STORAGE_ERROR,
            histogram_codecs=services.histogram_codecs,
        )

    def _gateway_stats(self, storage: Storage) -> None:
        """Calls, failures and state of each Thrift gateway (the HBase backend's pool):
        ``tsd.hbase.gateway.*`` in /api/stats, ``tsd_hbase_gateway_*`` in /metrics."""
        pool = getattr(storage, "pool", None)
        for gateway in getattr(pool, "gateways", ()):
            where = gateway.endpoint
            gauge = self.registry.gauge
            gauge(
                "hbase.gateway.calls",
                partial(getattr, gateway, "calls"),
                monotonic=True,
                gateway=where,
            )
            gauge(
                "hbase.gateway.errors",
                partial(getattr, gateway, "errors"),
                monotonic=True,
                gateway=where,
            )
            gauge("hbase.gateway.up", partial(getattr, gateway, "up"), gateway=where)

    def _stats_tags(self) -> tuple[tuple[str, str], ...]:
        core = self.config.core
        tags = [host_tag(self._hostname, core.stats_canonical)]
        if core.stats_with_port:
            tags.append(("port", str(self.config.network.port)))
        return tuple(tags)

    def _register_stats(self, uids: UidService) -> None:
        for unique_id in (uids.metrics, uids.tagk, uids.tagv):
            self._register_uid_stats(unique_id)
        engine = self._query_engine
        if engine is not None:
            stats = engine.stats
            gauge = self.registry.gauge
            gauge("query.running", lambda: engine.running)
            gauge("query.memory", lambda: engine.memory.charged, type="charged")
            for kind in ("started", "refused", "cancelled", "timed_out", "scans"):
                gauge("query.count", functools.partial(getattr, stats, kind), type=kind)

    def _report_native_helpers(self) -> None:
        """One warning naming every compiled helper that did not load (the daemon runs
        their Python fallbacks, slower), and the count on /api/stats and /metrics."""
        outcomes = native.status()
        missing = {name: why for name, why in outcomes.items() if why is not None}
        if missing:
            log.warning(
                "daemon.native_helpers_missing",
                missing=sorted(missing),
                reasons=missing,
                loaded=len(outcomes) - len(missing),
                helpers=len(outcomes),
                hint="the Python fallbacks run instead, slower: build tsd with a C compiler",
            )
        gauge = self.registry.gauge
        gauge("native.helpers.loaded", functools.partial(int, len(outcomes) - len(missing)))
        for name, why in outcomes.items():
            gauge("native.helper.loaded", functools.partial(int, why is None), helper=name)

    def _register_uid_stats(self, unique_id: UniqueId) -> None:
        stats, kind = unique_id.stats, unique_id.kind
        self.registry.gauge("uid.cache-hit", lambda: stats.cache_hits, monotonic=True, kind=kind)
        self.registry.gauge("uid.cache-miss", lambda: stats.cache_misses, monotonic=True, kind=kind)
        self.registry.gauge("uid.cache-size", lambda: len(unique_id.cache), kind=kind)

    @property
    def writer(self) -> Writer:
        assert self._write_path is not None, "not started"
        return self._write_path.writer

    @property
    def ingest(self) -> IngestService:
        assert self._write_path is not None, "not started"
        return self._write_path.ingest

    @property
    def meta(self) -> MetaService:
        assert self._write_path is not None, "not started"
        return self._write_path.meta

    @property
    def uids(self) -> UidService:
        assert self._uids is not None, "not started"
        return self._uids

    @property
    def storage(self) -> Storage:
        assert self._storage is not None, "not started"
        return self._storage

    @property
    def listener(self) -> Listener:
        assert self._listener is not None, "not started"
        return self._listener

    @property
    def port(self) -> int:
        assert self._listener is not None
        return self._listener.port

    # -- stop ---------------------------------------------------------------------------------

    def request_shutdown(self) -> None:
        """Ask :meth:`run_until_stopped` to stop (signals, ``diediedie``)."""
        self._stop_requested.set()

    @property
    def shutdown_requested(self) -> bool:
        return self._stop_requested.is_set()

    async def wait_for_shutdown_request(self) -> None:
        await self._stop_requested.wait()

    async def stop(self) -> None:
        """Stop in order, losing nothing accepted. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        log.info("daemon.stopping")
        # A stop that hangs says where: every task's stack, once, after STOP_WATCHDOG_S.
        watchdog = asyncio.get_running_loop().call_later(STOP_WATCHDOG_S, log_task_stacks)
        try:
            await self._stop_in_order()
        finally:
            watchdog.cancel()
        log.info("daemon.stopped")

    async def _stop_in_order(self) -> None:
        if self._freed_task is not None:
            self._freed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._freed_task
        if self._control is not None:
            await self._control.close()  # a tool asking now waits for the stop's end
        if self._query_engine is not None:
            self._query_engine.cancel_all()  # running queries stop at their next chunk
        if self._listener is not None:
            self._listener.stop_accepting()
            protocols = self._listener.telnet_protocols
            for protocol in protocols:
                protocol.close()
            if protocols:
                await asyncio.wait(
                    [asyncio.ensure_future(p.wait_closed()) for p in protocols],
                    timeout=TELNET_DRAIN_TIMEOUT_S,
                )
        if self._workers is not None:
            await self._workers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._write_path is not None:
            await self._write_path.close()
        if self._listener is not None:
            self._listener.close()
        if self._storage is not None and self._owns_storage:
            await self._storage.close()
        if self._control is not None:
            self._control.remove()

    async def run_until_stopped(self) -> int:
        """Start, serve until SIGTERM/SIGINT/diediedie, stop; the exit status."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_shutdown)
        loop.add_signal_handler(signal.SIGQUIT, log_task_stacks)
        try:
            await self.start()
            await self._stop_requested.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signum)
            await self.stop()
        return 0


async def release_freed(freed: FreedMemory) -> None:
    """Every FREED_CHECK_S, give the heap's free chunks below its top back to the system
    when FREED_RELEASE_BYTES more lie there than after the last release (tsd/malloc.py:
    a burst of new series and an hour's close leave the old tables of what grew there,
    about 140 bytes a series at a million series, issue 26)."""
    while True:
        await asyncio.sleep(FREED_CHECK_S)
        if not freed.due(FREED_RELEASE_BYTES):
            continue
        below = freed.below_top()
        began = time.perf_counter()
        await asyncio.to_thread(freed.release)
        log.info(
            "malloc.released",
            free_below_top_bytes=below,
            seconds=round(time.perf_counter() - began, 3),
        )


def log_task_stacks() -> None:
    """SIGQUIT (``kill -3``, Java's thread dump that OpenTSDB operators know): one log line
    per asyncio task with where it waits, outermost frame first. The daemon keeps running."""
    tasks = asyncio.all_tasks()
    log.warning("daemon.task_dump", tasks=len(tasks))
    for task in tasks:
        log.warning("daemon.task", task=task.get_name(), stack=" > ".join(_awaiting(task)))


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The chain of coroutines ``task`` is suspended in (Task.get_stack gives only the
    outermost frame of a suspended coroutine)."""
    frames: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            frames.append(repr(coro))
            break
        frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


# -- the command line -------------------------------------------------------------------------


#: ``tsdb tsd --help``'s closing lines (tsd.cli maps the errors to these statuses).
EXIT_STATUS = """exit status:
  0  stopped by SIGTERM, SIGINT or diediedie, everything accepted written
  1  a runtime error, said on one line on stderr
  2  bad arguments or configuration
  3  cannot listen: the port is in use, the address is not on this host, or not permitted;
     or the store cannot be opened (unreachable, or held by another daemon)
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_STATUS
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--port", type=int, help="listening port (default 4242)")
    parser.add_argument("--bind", help="listening address (default 0.0.0.0)")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="opentsdb.conf (default: ./opentsdb.conf, /etc/opentsdb.conf, "
        "/etc/opentsdb/opentsdb.conf, /opt/opentsdb/opentsdb.conf, the first found)",
    )
    parser.add_argument(
        "--auto-metric", action="store_true", help="create UIDs for new metrics on write"
    )
    parser.add_argument(
        "--mode", choices=("rw", "ro", "wo"), help="read-write, read-only, write-only"
    )
    parser.add_argument("--data-dir", metavar="DIR", help="embedded store directory (./data)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any opentsdb.conf key, overriding the file (repeatable)",
    )


def overrides_from_args(args: argparse.Namespace) -> dict[str, str]:
    """Command-line flags as opentsdb.conf keys (they win over the file)."""
    values: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, "--set takes KEY=VALUE")
        values[key.strip()] = value.strip()
    if args.port is not None:
        values["tsd.network.port"] = str(args.port)
    if args.bind is not None:
        values["tsd.network.bind"] = args.bind
    if args.auto_metric:
        values["tsd.core.auto_create_metrics"] = "true"
    if args.mode is not None:
        values["tsd.mode"] = args.mode
    if args.data_dir is not None:
        values["tsd.storage.data_dir"] = str(Path(args.data_dir))
    return values


def run(args: argparse.Namespace) -> int:
    unknown: list[str] = []
    config = load_config(args.config, overrides_from_args(args), warn=unknown.append)
    configure_logging(config.log.format, config.log.level)
    for key in unknown:
        log.warning("config.unknown_key", key=key)
    keep_freed_memory(config.query.keep_freed_bytes)  # before any thread starts
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(Daemon(config).run_until_stopped())
