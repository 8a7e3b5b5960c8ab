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
from typing import Any

from tsd.errors import StorageUnavailable
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

try:  # thriftpy2's Cython extension; absent when it was installed without a compiler
    CYBIN: Any = importlib.import_module("thriftpy2.protocol.cybin")
except ImportError:  # pragma: no cover - the wheels ship it
    CYBIN = None
_MEMORY: Any = importlib.import_module("thriftpy2.transport.memory")
_FRAMED: Any = importlib.import_module("thriftpy2.contrib.aio.transport.framed")

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


Opener = Callable[[], Awaitable[ThriftConnection]]


class ConnectionPool:
    """At most ``size`` connections, each leased to one task for one call."""

    def __init__(
        self,
        opener: Opener,
        size: int,
        max_idle_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._opener = opener
        self._slots = asyncio.Semaphore(size)
        self._idle: list[ThriftConnection] = []  # LIFO: the warmest first
        self._max_idle_s = max_idle_s
        self._clock = clock
        self._closed = False
        self.opened = 0  # connections opened so far (tests and stats)

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    @asynccontextmanager
    async def connection(self, *, fresh: bool = False) -> AsyncIterator[ThriftConnection]:
        """Lease a connection; it goes back to the pool only if the block raised nothing.

        ``fresh``: open a new connection rather than take an idle one.
        """
        if self._closed:
            raise StorageUnavailable("HBase storage is closed")
        async with self._slots:
            conn = (None if fresh else self._take_idle()) or await self._open()
            try:
                yield conn
            except BaseException:
                conn.close()
                raise
            conn.calls += 1
            conn.last_used = self._clock()
            self._give_back(conn)

    def _give_back(self, conn: ThriftConnection) -> None:
        if self._closed:  # closed while the call ran
            conn.close()
        else:
            self._idle.append(conn)

    def _take_idle(self) -> ThriftConnection | None:
        now = self._clock()
        while self._idle:
            conn = self._idle.pop()
            if conn.is_reusable(now, self._max_idle_s):
                return conn
            conn.close()
        return None

    async def _open(self) -> ThriftConnection:
        conn = await self._opener()
        self.opened += 1
        return conn

    def close(self) -> None:
        """Close the idle connections now; leased ones close when their call ends."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()
