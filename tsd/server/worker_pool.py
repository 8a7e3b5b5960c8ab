"""Telnet on every core: worker processes frame and parse, the daemon ingests.

``tsd.network.worker_threads`` (0 = the machine's cores; 1 = none) processes share the
telnet work: this process (the owner: the log, the writer, UID assignment, HTTP, TLS,
authentication, every command) and ``worker_threads - 1`` workers
(:mod:`tsd.server.worker_process`). The owner still accepts every connection; once the sniffer
sees a plaintext telnet connection it hands the socket to a worker (round robin) with the
bytes it read, and keeps a :class:`RemoteTelnet` for it: the same
:class:`~tsd.server.telnet.TelnetProtocol` (one ingest session, the same replies, the same
barriers before commands), fed with what the worker parsed instead of raw lines. Why this
shape and what each guarantee rests on: docs/write-path.md, "Every core".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any, cast

from tsd.cores import usable_cores
from tsd.data_points import Tags
from tsd.log import TELNET, get_logger
from tsd.protocol.ref_table import RefTable
from tsd.protocol.telnet import TELNET_REF_CACHE
from tsd.protocol.telnet_frame import ParsedPut, items_from_wire, remember_key
from tsd.server.listener import TrackedProtocol
from tsd.server.telnet import TelnetContext, TelnetProtocol, TelnetStats
from tsd.server.worker_process import Deframer, frame
from tsd.wal.record import EncodedPart
from tsd.write.ingest import RefCache, SeriesCache, SeriesRef

log = get_logger(TELNET)

#: Seconds a stopping worker gets before it is killed.
WORKER_STOP_TIMEOUT_S = 5.0


def worker_count(setting: int) -> int:
    """Worker processes for ``tsd.network.worker_threads`` (0: one per core but the
    owner's)."""
    total = setting if setting > 0 else usable_cores()
    return max(0, total - 1)


class _RemoteTransport(asyncio.Transport):
    """What a :class:`RemoteTelnet` writes to: the worker holding the client's socket."""

    def __init__(self, channel: WorkerChannel, cid: int, peer: Any) -> None:
        super().__init__()
        self._channel = channel
        self._cid = cid
        self._peer = peer
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._channel.send(("w", self._cid, bytes(data)))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._channel.send(("c", self._cid))

    def abort(self) -> None:
        self.close()

    # Reading is paused for the whole channel (the owner's writer is full), not per
    # connection; a client that does not read its replies is no longer read by its
    # worker, which tells the owner (pause_writing / resume_writing of the protocol).
    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


class RemoteTelnet(TelnetProtocol):
    """A telnet connection whose socket a worker holds: the owner's half. The worker
    frames the client's bytes (:class:`~tsd.protocol.telnet_frame.TelnetFramer`) and this
    half runs the one item loop of :class:`~tsd.server.telnet.TelnetProtocol` over them."""

    def __init__(self, context: TelnetContext, stats: TelnetStats, channel: WorkerChannel) -> None:
        super().__init__(context, stats)
        self._channel = channel
        # A series this connection resolves is taught to its worker as well, which from
        # then on encodes that series' points itself (into parts).
        self._session.cache = channel.learning

    def feed(self, items: list[Any]) -> None:
        """What the worker framed from one read."""
        self._arrived(b"", items)

    def remote_eof(self) -> None:
        self._eof = True
        if self._task is None:
            self._handle_available()

    def _took_part(self, points: int) -> None:
        self._channel.encoded.value += points

    def _learned(self, keys: Sequence[Hashable], refs: list[SeriesRef]) -> None:
        # the worker does not know these refs (yet): teach them, once per item
        self._channel.teach_all(dict(zip(keys, refs, strict=True)))

    def _series_of(self, key: Hashable) -> tuple[str, Tags]:
        return self._channel.series[key]


class _LearningCache(RefCache):
    """The ref cache of a worker's connections' sessions: a series one of them resolved
    is remembered in the daemon's telnet cache and taught to the worker (whose puts of it
    then arrive encoded)."""

    __slots__ = ("_channel", "_shared")

    def __init__(self, shared: SeriesCache, channel: WorkerChannel) -> None:
        super().__init__(shared.max_entries)
        self._shared = shared
        self._channel = channel

    def remember(self, key: Hashable, ref: SeriesRef) -> None:
        self._shared.remember(key, ref)
        self._channel.teach(key, ref)

    def remember_many(self, keys: Sequence[Hashable], values: Sequence[SeriesRef]) -> None:
        self._shared.remember_many(keys, values)
        for key, ref in zip(keys, values, strict=True):
            self._channel.teach(key, ref)

    def recall(self, key: Hashable) -> SeriesRef | None:
        return self._shared.recall(key)


class WorkerChannel(asyncio.Protocol):
    """The owner's end of one worker: its process, its channel, its connections."""

    def __init__(self, pool: WorkerPool, number: int) -> None:
        self.pool = pool
        self.number = number
        self.transport: asyncio.Transport | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.handoff: socket.socket | None = None
        self.connections: dict[int, RemoteTelnet] = {}
        #: put_line_key -> (metric, tags) of every put the worker parsed first
        self.series: dict[Any, tuple[str, Tags]] = {}
        self.lost = asyncio.get_running_loop().create_future()
        self._deframer = Deframer()
        self._paused = False
        #: points this worker handed over encoded (its parts)
        self.encoded = pool.context.registry.counter("workers.points", type="encoded")
        self.learning = _LearningCache(
            pool.context.ingest.ref_cache(TELNET_REF_CACHE, RefTable), self
        )
        self._teaching: list[tuple[Any, bytes, bytes, bytes]] | None = None
        #: the worker said it serves (a connection handed to a worker still starting
        #: would wait for its imports, past a short tsd.core.socket.timeout)
        self.ready = False

    def start(self, settings: dict[str, Any]) -> None:
        owner_channel, worker_channel = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        owner_handoff, worker_handoff = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tsd.server.worker_process",
                    str(worker_channel.fileno()),
                    str(worker_handoff.fileno()),
                    json.dumps(settings),
                ],
                pass_fds=(worker_channel.fileno(), worker_handoff.fileno()),
            )
        finally:
            worker_channel.close()
            worker_handoff.close()
        owner_handoff.setblocking(False)
        self.handoff = owner_handoff
        self._channel_socket = owner_channel

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: self, self._channel_socket)

    # -- the channel ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, message: object) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(frame(message))

    def teach(self, key: Hashable, ref: SeriesRef) -> None:
        """Tell the worker a series' ref (sent once per loop turn, in one message)."""
        if self._teaching is None:
            self._teaching = []
            asyncio.get_running_loop().call_soon(self._send_teaching)
        metric_uid = ref.metric_uid
        self._teaching.append((key, ref.salt, metric_uid, ref.tsuid[len(metric_uid) :]))

    def teach_all(self, refs: dict[Any, SeriesRef]) -> None:
        """:meth:`teach` of every key of ``refs``."""
        for key, ref in refs.items():
            self.teach(key, ref)

    def _send_teaching(self) -> None:
        entries, self._teaching = self._teaching, None
        if entries:
            self.send(("k", entries))

    def forget(self) -> None:
        """The daemon dropped its caches: so does the worker."""
        self._teaching = None
        self.send(("K", 0))

    def data_received(self, data: bytes) -> None:
        connections, series = self.connections, self.series
        for message in self._deframer.feed(data):
            kind, cid = message[0], message[1]
            protocol = connections.get(cid)
            if kind == "d":
                items = items_from_wire(message[2], EncodedPart)
                for item in items:  # in channel order: before any later key-only put
                    if type(item) is ParsedPut:
                        point = item.point
                        remember_key(series, item.key, (point.metric, point.tags))
                if protocol is not None:
                    protocol.feed(items)
            elif kind == "e":
                if protocol is not None:
                    protocol.remote_eof()
            elif kind == "p":
                if protocol is not None:
                    protocol.pause_writing()
            elif kind == "r":
                if protocol is not None:
                    protocol.resume_writing()
            elif kind == "ready":
                self.ready = True
                if self.pool.all_ready():
                    log.info("workers.ready", workers=len(self.pool.pids()))
            elif kind == "x":
                connections.pop(cid, None)
                if protocol is not None:
                    protocol.connection_lost(None)
        self._hold_while_full()

    def _hold_while_full(self) -> None:
        """Back-pressure: while the writer is full, stop reading the worker (whose clients
        then stop being read)."""
        writer = self.pool.writer_full
        if self._paused or self.transport is None or not writer():
            return
        self._paused = True
        self.transport.pause_reading()

        async def resume() -> None:
            await self.pool.wait_writable()
            self._paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

        asyncio.get_running_loop().create_task(resume())

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for protocol in list(self.connections.values()):
            protocol.connection_lost(None)
        self.connections.clear()
        if not self.lost.done():
            self.lost.set_result(None)

    # -- connections ------------------------------------------------------------------------

    def adopt(self, transport: asyncio.Transport, first: bytes, cid: int) -> RemoteTelnet | None:
        """Hand ``transport``'s socket to the worker; the owner's half, or None when the
        worker cannot take it (the caller keeps the connection)."""
        sock = transport.get_extra_info("socket")
        if sock is None or self.handoff is None or self.transport is None or not self.ready:
            return None
        fd = os.dup(sock.fileno())
        try:
            socket.send_fds(self.handoff, [pickle.dumps((cid, first))], [fd])
        except OSError:
            return None
        finally:
            os.close(fd)
        protocol = RemoteTelnet(self.pool.context, self.pool.stats, self)
        self.connections[cid] = protocol
        protocol.connection_made(_RemoteTransport(self, cid, transport.get_extra_info("peername")))
        transport.pause_reading()
        transport.close()  # the worker's copy of the socket keeps the connection open
        return protocol

    async def stop(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.handoff is not None:
            self.handoff.close()
            self.handoff = None
        process = self.process
        if process is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(process.wait), WORKER_STOP_TIMEOUT_S)
            except TimeoutError:
                process.kill()
                await asyncio.to_thread(process.wait)


class WorkerPool:
    """The worker processes of one daemon, restarted when one dies."""

    def __init__(
        self,
        context: TelnetContext,
        stats: TelnetStats,
        count: int,
        *,
        writer_full: Callable[[], bool],
        wait_writable: Callable[[], Any],
    ) -> None:
        self.context = context
        self.stats = stats
        self.count = count
        self.writer_full = writer_full
        self.wait_writable = wait_writable
        self.settings = {
            "special_chars": context.rules.special_chars,
            "max_tags": context.rules.max_tags,
            "commands": list(context.commands),
            "max_line_bytes": context.max_line_bytes,
            "max_refs": context.ingest.ref_cache(TELNET_REF_CACHE, RefTable).max_entries,
        }
        self._channels: list[WorkerChannel] = []
        context.ingest.on_drop_caches(self._forget)
        self._next = 0
        self._cid = 0
        self._stopping = False
        self._watchers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for number in range(self.count):
            await self._start_one(number)
        log.info("workers.started", workers=self.count)

    async def _start_one(self, number: int) -> None:
        channel = WorkerChannel(self, number)
        channel.start(self.settings)
        await channel.connect()
        if number < len(self._channels):
            self._channels[number] = channel
        else:
            self._channels.append(channel)
        watcher = asyncio.get_running_loop().create_task(self._watch(channel))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, channel: WorkerChannel) -> None:
        """A worker that dies takes its connections with it; start another."""
        await channel.lost
        if self._stopping:
            return
        process = channel.process
        status = None
        if process is not None:
            with contextlib.suppress(Exception):
                status = await asyncio.to_thread(process.wait)
        log.error("workers.died", worker=channel.number, status=status, restarting=True)
        if channel.handoff is not None:
            channel.handoff.close()
            channel.handoff = None
        await self._start_one(channel.number)

    def adopt(self, transport: asyncio.Transport, first: bytes) -> TrackedProtocol | None:
        """Give a telnet connection to the next worker; None to keep it here."""
        if self._stopping or not self._channels:
            return None
        channel = self._channels[self._next % len(self._channels)]
        self._next += 1
        self._cid += 1
        return channel.adopt(transport, first, self._cid)

    def _forget(self) -> None:
        for channel in self._channels:
            channel.forget()

    def all_ready(self) -> bool:
        """True once every worker serves (until then the daemon keeps its connections)."""
        return bool(self._channels) and all(channel.ready for channel in self._channels)

    def pids(self) -> list[int]:
        return [c.process.pid for c in self._channels if c.process is not None]

    async def stop(self) -> None:
        """After the listener drained the connections: close the channels, wait for the
        workers to exit."""
        self._stopping = True
        for watcher in list(self._watchers):
            watcher.cancel()
        await asyncio.gather(*(channel.stop() for channel in self._channels))
        log.info("workers.stopped", workers=len(self._channels))
