"""Thrift1 connections to HBase's Thrift gateway, and the pool that hands them out.

Why a pool of our own, and these rules (aiohappybase 1.4.0 / thriftpy2's async
client, as observed):

- A connection carries one request at a time: the client writes a call and
  reads the next reply off the socket, so two tasks sharing a connection would
  read each other's replies. A connection is leased to one task per call.
- The client never checks Thrift sequence ids. A call abandoned mid-flight (a
  cancellation, a timeout) leaves its reply on the socket, where the next call
  would read it as its own. So a connection that saw any exception is closed,
  never returned to the pool.
- HBase's Thrift server closes connections idle for 60 s
  (``hbase.thrift.server.socket.read.timeout``). A pooled connection idle
  longer than ``max_idle_s`` (default 50 s, under the server's limit), or whose
  peer has already closed it (EOF seen by the event loop), is discarded and a
  fresh one opened, so callers never see the drop.

The Thrift IDL is the one aiohappybase ships (HBase's ``Hbase.thrift``), loaded
by importing aiohappybase; its transport and protocol factories are the ones
aiohappybase configures (binary fields stay ``bytes``), except that the binary
protocol *writes* calls with thriftpy2's compiled encoder (cybin) when it is
built: the pure-Python encoder spends about 7 ms on a 1,000-cell ``mutateRows``
(about half of tsd's CPU when ingesting into HBase), cybin 0.4 ms, for the same
bytes. Replies carrying rows, and the bool replies of pipelined calls, are read by
rows.py's compiled reader, the others by thriftpy2's asyncio protocol. aiohappybase's
Table/Batch layer is not used: the backend needs the raw calls (sorted
columns, scanner caching, checkAndPut with an unset value) and its own error
mapping.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tsd.errors import StorageUnavailable
from tsd.log import STORAGE, get_logger
from tsd.storage.hbase.rows import compiled_reading, scalar_replies

with warnings.catch_warnings():
    # aiohappybase imports pkg_resources (deprecated by setuptools) at import time.
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import aiohappybase
    from thriftpy2.contrib.aio.client import TAsyncClient
    from thriftpy2.contrib.aio.protocol.binary import TAsyncBinaryProtocol
    from thriftpy2.contrib.aio.socket import TAsyncSocket
    from thriftpy2.thrift import TMessageType
    from thriftpy2.transport import TTransportException

try:  # thriftpy2's Cython extension; absent when it was installed without a compiler
    CYBIN: Any = importlib.import_module("thriftpy2.protocol.cybin")
except ImportError:  # pragma: no cover - the wheels ship it
    CYBIN = None
_MEMORY: Any = importlib.import_module("thriftpy2.transport.memory")
_FRAMED: Any = importlib.import_module("thriftpy2.contrib.aio.transport.framed")

log = get_logger(f"{STORAGE}.hbase")

#: the Thrift module thriftpy2 built from aiohappybase's Hbase.thrift on import
HBASE_THRIFT: Any = sys.modules["Hbase_thrift"]

#: the exceptions HBase answers for one call (a pipelined call's result, not a failure)
HBASE_ANSWERS = (HBASE_THRIFT.IOError, HBASE_THRIFT.IllegalArgument)

TRANSPORTS: dict[str, Any] = aiohappybase.Connection.THRIFT_TRANSPORTS
PROTOCOLS: dict[str, Any] = dict(aiohappybase.Connection.THRIFT_PROTOCOLS)


class CompiledWriteBinaryProtocol(TAsyncBinaryProtocol):
    """The asyncio binary protocol, encoding each call's arguments with cybin in one go
    (the same bytes as the pure-Python encoder, tens of times faster)."""

    def write_struct(self, obj: Any) -> None:
        buffer = _MEMORY.TCyMemoryBuffer()
        CYBIN.TCyBinaryProtocol(buffer).write_struct(obj)
        self.trans.write(buffer.getvalue())


class CompiledWriteBinaryProtocolFactory:
    """aiohappybase's binary protocol settings (bytes stay bytes), compiled writes."""

    def get_protocol(self, trans: Any) -> CompiledWriteBinaryProtocol:
        return CompiledWriteBinaryProtocol(trans, decode_response=False)  # type: ignore[no-untyped-call]


if CYBIN is not None:
    PROTOCOLS["binary"] = CompiledWriteBinaryProtocolFactory()


class ThriftConnection:
    """One socket to the Thrift gateway and the client speaking over it."""

    def __init__(self, socket: Any, client: Any, now: float) -> None:
        self._socket = socket
        self.client: Any = client
        #: the gateway it leads to (set by the pool)
        self.gateway: Gateway | None = None
        self.last_used = now
        self.calls = 0  # calls made on it; 0 while fresh

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        transport: str,
        protocol: str,
        connect_timeout_ms: int | None,
    ) -> ThriftConnection:
        # No socket_timeout: the caller bounds each whole call with asyncio.timeout.
        socket = TAsyncSocket(host, port, socket_timeout=None, connect_timeout=connect_timeout_ms)
        trans = TRANSPORTS[transport].get_transport(socket)
        proto = PROTOCOLS[protocol].get_protocol(trans)
        try:
            await trans.open()
        except BaseException:
            _discard(socket)  # thriftpy2 leaves the socket of a failed connect open
            raise
        # thriftpy2's TAsyncSocket bounds every read and flush by its connect timeout too:
        # once connected, only the caller's deadline applies (table administration's is
        # longer than the connect timeout)
        socket.connect_timeout = None
        client = TAsyncClient(HBASE_THRIFT.Hbase, proto)  # type: ignore[no-untyped-call]
        return cls(socket, client, time.monotonic())

    def is_reusable(self, now: float, max_idle_s: float) -> bool:
        """Still open, not closed by the server, and not idle long enough to be dropped."""
        reader = getattr(self._socket, "reader", None)
        writer = getattr(self._socket, "writer", None)
        if self._socket.raw_sock is None or reader is None or writer is None:
            return False
        if reader.at_eof() or writer.transport.is_closing():
            return False
        return now - self.last_used < max_idle_s

    def close(self) -> None:
        _discard(self._socket)


def _discard(socket: Any) -> None:
    """Close a TAsyncSocket however far its opening got (its own close() assumes all the way)."""
    writer = getattr(socket, "writer", None)
    if writer is not None:
        writer.close()
    if socket.raw_sock is not None:
        socket.raw_sock.close()
        socket.raw_sock = None


async def pipelined(client: Any, api: str, calls: Sequence[dict[str, Any]]) -> list[Any]:
    """Several calls of ``api`` (one returning a bool or nothing: checkAndPut,
    scannerClose) written in one send, their replies read in order: each result, or the
    exception HBase answered for that call (IOError, IllegalArgument). The replies are read
    by rows.py's compiled reader when it applies.

    One write instead of one per call: on loopback the send that wakes the gateway's
    thread costs about 0.15 ms of tsd's CPU on this 2-core machine, more than the rest of
    a small call. The gateway serves a connection's calls one after the other, in order.
    Transport failures are raised (the connection is then dropped by the pool). A framed
    transport sends each call in its own frame (a nonblocking gateway reads one call per
    frame).
    """
    service = client._service
    oprot = client._oprot
    framed = isinstance(oprot.trans, _FRAMED.TAsyncFramedTransport)
    for kwargs in calls:
        oprot.write_message_begin(api, TMessageType.CALL, client._seqid)
        args = getattr(service, api + "_args")()
        for key, value in kwargs.items():
            setattr(args, key, value)
        oprot.write_struct(args)
        oprot.write_message_end()
        if framed:
            await oprot.trans.flush()
    if not framed:
        await oprot.trans.flush()
    if compiled_reading(client):
        answers = await scalar_replies(client, api, len(calls))
        for answer in answers:
            if isinstance(answer, Exception) and not isinstance(answer, HBASE_ANSWERS):
                raise answer
        return answers
    results: list[Any] = []
    for _ in calls:
        try:
            results.append(await client._recv(api))
        except HBASE_ANSWERS as exc:
            results.append(exc)
    return results


#: after a gateway fails, the first probe waits this long; each failure doubles it up to
#: PROBE_MAX_S (a gateway that is back is used again within PROBE_MAX_S)
PROBE_FIRST_S = 0.5
PROBE_MAX_S = 5.0


@dataclass(eq=False)
class Gateway:
    """One Thrift1 gateway of ``tsd.storage.hbase.thrift.host``, and how it fares.

    ``up`` is False from a failure of the gateway itself (refused, reset, EOF, timed out)
    to the next call it answers; while down, one call at a time probes it once
    ``retry_at`` has passed.
    """

    host: str
    port: int
    calls: int = 0  # calls sent to it, or tried (its connection could not be opened)
    errors: int = 0  # calls that failed on the gateway itself
    up: bool = True
    retry_at: float = 0.0
    failures: int = 0  # in a row
    leased: int = 0  # connections to it in use now

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


class GatewayUnreachable(OSError):
    """A connection to a gateway could not be opened: the call was never sent, so it may
    go to another gateway whatever it is."""

    def __init__(self, gateway: Gateway, cause: BaseException) -> None:
        super().__init__(f"Thrift gateway {gateway.endpoint} unreachable: {cause!r}")
        self.gateway = gateway
        self.cause = cause


Opener = Callable[[Gateway], Awaitable[ThriftConnection]]


class ConnectionPool:
    """At most ``size`` connections, each leased to one task for one call, spread over
    the gateways that answer: a call goes to the gateway with the fewest connections in
    use (in turn among equals); a gateway that fails is left out and probed back in."""

    def __init__(
        self,
        opener: Opener,
        size: int,
        max_idle_s: float,
        clock: Callable[[], float] = time.monotonic,
        gateways: Sequence[tuple[str, int]] = (("localhost", 9090),),
        is_gateway_failure: Callable[[BaseException], bool] = lambda exc: False,
    ) -> None:
        self._opener = opener
        self._slots = asyncio.Semaphore(size)
        self.gateways = [Gateway(host, port) for host, port in gateways]
        self._idle: dict[Gateway, list[ThriftConnection]] = {g: [] for g in self.gateways}
        self._turn = 0
        self._max_idle_s = max_idle_s
        self._clock = clock
        self._is_gateway_failure = is_gateway_failure
        self._closed = False
        self.opened = 0  # connections opened so far (tests and stats)

    @property
    def idle_count(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    @asynccontextmanager
    async def connection(
        self,
        *,
        fresh: bool = False,
        gateway: Gateway | None = None,
        avoid: Gateway | None = None,
    ) -> AsyncIterator[ThriftConnection]:
        """Lease a connection; it goes back to the pool only if the block raised nothing.

        ``fresh``: open a new connection rather than take an idle one. ``gateway``: to that
        gateway (a scanner lives on the gateway that opened it); else to the one
        :meth:`choose` picks, ``avoid`` left out when another can be had.
        """
        if self._closed:
            raise StorageUnavailable("HBase storage is closed")
        async with self._slots:
            chosen = gateway if gateway is not None else self.choose(avoid)
            chosen.calls += 1
            conn = (None if fresh else self._take_idle(chosen)) or await self._open(chosen)
            chosen.leased += 1
            try:
                yield conn
            except BaseException as exc:
                conn.close()
                if self._is_gateway_failure(exc):
                    self._failed(chosen, exc)
                raise
            finally:
                chosen.leased -= 1
            self._answered(chosen)
            conn.calls += 1
            conn.last_used = self._clock()
            self._give_back(chosen, conn)

    def choose(self, avoid: Gateway | None = None) -> Gateway:
        """The gateway for the next call: among those up (or due a probe), the one with
        the fewest connections in use, in turn among equals; when every gateway is down,
        the one due a probe first (the call fails fast, and the spool takes the points)."""
        now = self._clock()
        others = [g for g in self.gateways if g is not avoid] or self.gateways
        ready = [g for g in others if g.up or g.retry_at <= now]
        count = len(self.gateways)
        if ready:
            turn = self._turn
            self._turn += 1
            chosen = min(ready, key=lambda g: (g.leased, (self.gateways.index(g) - turn) % count))
        else:
            chosen = min(others, key=lambda g: g.retry_at)
        if not chosen.up:  # this call is its probe: the next one waits its turn
            chosen.retry_at = now + _backoff(chosen.failures)
        return chosen

    def _failed(self, gateway: Gateway, exc: BaseException) -> None:
        gateway.errors += 1
        gateway.failures += 1
        gateway.retry_at = self._clock() + _backoff(gateway.failures)
        for conn in self._idle[gateway]:  # the same gateway's other connections too
            conn.close()
        self._idle[gateway].clear()
        if gateway.up:
            gateway.up = False
            if len(self.gateways) > 1:  # with one, the caller's own error says it all
                log.warning("hbase.gateway_down", gateway=gateway.endpoint, error=repr(exc))

    def _answered(self, gateway: Gateway) -> None:
        gateway.failures = 0
        if not gateway.up:
            gateway.up = True
            if len(self.gateways) > 1:
                log.info("hbase.gateway_up", gateway=gateway.endpoint)

    def _give_back(self, gateway: Gateway, conn: ThriftConnection) -> None:
        if self._closed:  # closed while the call ran
            conn.close()
        else:
            self._idle[gateway].append(conn)

    def _take_idle(self, gateway: Gateway) -> ThriftConnection | None:
        now = self._clock()
        idle = self._idle[gateway]
        while idle:
            conn = idle.pop()
            if conn.is_reusable(now, self._max_idle_s):
                return conn
            conn.close()
        return None

    async def _open(self, gateway: Gateway) -> ThriftConnection:
        try:
            conn = await self._opener(gateway)
        except (OSError, EOFError, TTransportException, TimeoutError) as exc:
            unreachable = GatewayUnreachable(gateway, exc)
            self._failed(gateway, unreachable)
            raise unreachable from exc
        conn.gateway = gateway
        self.opened += 1
        return conn

    def close(self) -> None:
        """Close the idle connections now; leased ones close when their call ends."""
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


def _backoff(failures: int) -> float:
    return float(min(PROBE_MAX_S, PROBE_FIRST_S * 2 ** max(0, failures - 1)))
