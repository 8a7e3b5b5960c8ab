"""One listening socket for both protocols, as OpenTSDB's PipelineFactory does.

The first bytes of a connection decide: an uppercase ASCII letter starts an HTTP
request line (``GET``, ``POST``...), anything else is a telnet command. The
:class:`SniffingProtocol` waits for those bytes, builds the real protocol
(aiohttp's ``RequestHandler`` or our ``TelnetProtocol``), swaps it in with
``transport.set_protocol`` and replays the bytes, the way uvicorn hands a
connection over to its websocket protocol.

With TLS on (``tsd.network.tls.cert``), a first byte 0x16 starts a TLS handshake: the
connection is decrypted (:mod:`tsd.server.tls`) and its plaintext sniffed the same way.
The header timeout runs from the connection on, through the handshake: a client that
stops in the middle of its ClientHello is closed by it (asyncio's own handshake timeout
is 60 s).

A client that connects and closes without sending anything (potsdb's probe,
Telegraf's ``Connect()``) never gets a protocol at all; nothing is logged.

``tsd.network.header_timeout`` (seconds, 0 = none): a connection must send its first
telnet line's first bytes, or the whole header block of its first HTTP request, within
that time, or it is closed. HTTP bytes are held here until the blank line that ends the
headers (at most ``MAX_HEADER_BYTES``), so a client trickling a request line cannot hold a
connection forever (aiohttp has no header timeout of its own); later requests on a
keep-alive connection are bounded by ``tsd.core.socket.timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

from tsd.errors import ListenError
from tsd.protocol.sniff import looks_like_http
from tsd.server.tls import hand_over_to_tls, is_tls_hello
from tsd.stats import StatsRegistry

#: Bytes of an HTTP request head held while sniffing; past it aiohttp takes over (and
#: refuses an over-long header with its 431/400).
MAX_HEADER_BYTES = 256 * 1024


class TrackedProtocol(asyncio.Protocol):
    """A protocol the listener can count and close: it reports its own end."""

    on_lost: Callable[[TrackedProtocol], None] | None = None

    def close(self) -> None:
        """Finish what was received, then close (graceful shutdown)."""
        raise NotImplementedError

    async def wait_closed(self) -> None:
        """Return once the connection is gone and nothing is left to handle."""
        raise NotImplementedError


#: Builds the telnet protocol for one connection.
TelnetFactory = Callable[[], TrackedProtocol]
#: Gives a plaintext telnet connection (its transport, the bytes read) to a worker
#: process; the owner's half of it, or None to serve it here.
HandOff = Callable[[asyncio.Transport, bytes], TrackedProtocol | None]


class SniffingProtocol(asyncio.Protocol):
    """Reads the first bytes of a connection and hands it to the right protocol."""

    __slots__ = ("_buffer", "_decrypted", "_listener", "_timer", "_transport")

    def __init__(
        self,
        listener: Listener,
        decrypted: bool = False,
        timer: asyncio.TimerHandle | None = None,
    ) -> None:
        """``decrypted``: the inside of a TLS connection, admitted already; ``timer``: its
        header timeout, running since the connection was accepted."""
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._timer = timer
        self._decrypted = decrypted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport: cast, do not check.
        transport = cast(asyncio.Transport, transport)
        if not self._listener.admit(self, transport, counted=self._decrypted):
            transport.abort()
            return
        self._transport = transport
        timeout = self._listener.header_timeout_s
        if timeout > 0 and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                timeout, _header_timed_out, self._listener, transport
            )

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or not data:
            return
        data = self._buffer + data
        if len(data) < MAX_HEADER_BYTES and looks_like_http(data) and not _has_head(data):
            self._buffer = data  # the header block is not complete yet
            return
        self._buffer = b""
        timer, self._timer = self._timer, None
        self._transport = None
        tls = self._listener.tls
        if tls is not None and not self._decrypted:
            self._listener.forget_sniffing(self)
            if is_tls_hello(data):
                # the header timeout goes on through the handshake, to the inner head
                inner = SniffingProtocol(self._listener, True, timer)
                hand_over_to_tls(transport, data, inner, tls)
                return
        if timer is not None:
            timer.cancel()
        if tls is not None and not self._decrypted and self._listener.tls_required:
            transport.abort()  # tsd.network.tls.required: no plaintext
            return
        if not self._decrypted and self._listener.hand_off(self, transport, data):
            return  # a worker process serves it (tsd.server.worker_pool)
        protocol = self._listener.protocol_for(self, data)
        # Swap first so that anything the new protocol triggers (pause_reading, a
        # close) is delivered to it, then replay what we read.
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)

    def eof_received(self) -> bool:
        return False  # nothing was sent: let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._listener.forget_sniffing(self)
        self._transport = None


class Listener:
    """Owns the listening socket and the choice of protocol per connection.

    Open connections = those still sniffing + live telnet protocols + aiohttp's own
    connection list; ``tsd.core.connections.limit`` (0 = unlimited) caps the sum,
    closing connections over it as OpenTSDB's ConnectionManager does.
    """

    def __init__(
        self,
        telnet_factory: TelnetFactory,
        http_server: web.Server,
        registry: StatsRegistry,
        connections_limit: int = 0,
        *,
        header_timeout_s: float = 0.0,
        tls: ssl.SSLContext | None = None,
        tls_required: bool = False,
    ) -> None:
        """``tls``: also serve TLS on the port (:mod:`tsd.server.tls`); ``tls_required``:
        close connections that do not start with a TLS handshake."""
        self.tls = tls
        self.tls_required = tls_required and tls is not None
        self._telnet_factory = telnet_factory
        self.header_timeout_s = header_timeout_s
        self._http_server = http_server
        self._limit = connections_limit
        self._sniffing: set[SniffingProtocol] = set()
        self._telnet: set[TrackedProtocol] = set()
        self._server: asyncio.Server | None = None
        #: set by the daemon when worker processes serve telnet (tsd.network.worker_threads)
        self.handoff: HandOff | None = None
        registry.gauge("connectionmgr.connections", self.open_connections, type="open")
        self._rejected = registry.counter("connectionmgr.connections", type="rejected")
        self._total = registry.counter("connectionmgr.connections", type="total")
        self.header_timeouts = registry.counter("connectionmgr.connections", type="timeout")

    # -- per connection ----------------------------------------------------------------------

    def open_connections(self) -> int:
        return len(self._sniffing) + len(self._telnet) + len(self._http_server.connections)

    def admit(
        self, sniffer: SniffingProtocol, transport: asyncio.Transport, counted: bool = False
    ) -> bool:
        """Count a new connection; False when over ``tsd.core.connections.limit``.
        ``counted``: the decrypted side of a connection admitted already."""
        if counted:
            self._sniffing.add(sniffer)
            return True
        if self._limit > 0 and self.open_connections() >= self._limit:
            self._rejected.inc()
            return False
        self._sniffing.add(sniffer)
        self._total.inc()
        _set_nodelay(transport)
        return True

    def forget_sniffing(self, sniffer: SniffingProtocol) -> None:
        self._sniffing.discard(sniffer)

    def protocol_for(self, sniffer: SniffingProtocol, first_bytes: bytes) -> asyncio.Protocol:
        self._sniffing.discard(sniffer)
        if looks_like_http(first_bytes):
            return self._http_server()
        protocol = self._telnet_factory()
        protocol.on_lost = self._telnet.discard
        self._telnet.add(protocol)
        return protocol

    def hand_off(
        self, sniffer: SniffingProtocol, transport: asyncio.Transport, first_bytes: bytes
    ) -> bool:
        """Give a plaintext telnet connection to a worker process; False to keep it."""
        if self.handoff is None or looks_like_http(first_bytes):
            return False
        protocol = self.handoff(transport, first_bytes)
        if protocol is None:
            return False
        self._sniffing.discard(sniffer)
        protocol.on_lost = self._telnet.discard
        self._telnet.add(protocol)
        return True

    @property
    def telnet_protocols(self) -> frozenset[TrackedProtocol]:
        return frozenset(self._telnet)

    # -- the socket ---------------------------------------------------------------------------

    async def start(
        self, host: str, port: int, *, backlog: int = 1024, bound: BoundPort | None = None
    ) -> None:
        """Accept connections on ``host:port``: on ``bound`` when the port was bound
        beforehand (:class:`BoundPort`), else bound now."""
        if bound is None:
            bound = BoundPort()
            await bound.bind(host, port, backlog=backlog)
        self._server = await bound.serve(self)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        """Close the listening socket; connections already open carry on."""
        if self._server is not None:
            self._server.close()

    def close(self) -> None:
        """Stop accepting for good and forget the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None


def _header_timed_out(listener: Listener, transport: asyncio.Transport) -> None:
    """``tsd.network.header_timeout``: the connection (its TLS handshake included) did not
    send its first line or header block in time."""
    if not transport.is_closing():  # not a handshake that failed on its own meanwhile
        listener.header_timeouts.inc()
        transport.abort()


class BoundPort:
    """The listening port, bound before the daemon opens its store and accepting only once
    a :class:`Listener` serves it: a start that fails on the port (in use, not on this
    host, not permitted) has created nothing, no data directory, store or log.

    Bound without listening (``start_serving=False``): a client meanwhile is refused, as
    before the port was bound. A port another process listens on cannot be bound; two
    daemons starting at the same moment can both bind it, and the later one to listen
    fails then (the same one-line error)."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._listener: Listener | None = None
        self._where = ("", 0)

    async def bind(self, host: str, port: int, *, backlog: int = 1024) -> None:
        loop = asyncio.get_running_loop()
        self._where = (host, port)
        try:
            self._server = await loop.create_server(
                self._protocol,
                host,
                port,
                reuse_address=True,
                backlog=backlog,
                start_serving=False,
            )
        except OSError as exc:
            raise ListenError(_listen_failure(host, port, exc)) from exc

    def _protocol(self) -> asyncio.Protocol:
        assert self._listener is not None, "accepting before a Listener serves the port"
        return SniffingProtocol(self._listener)

    async def serve(self, listener: Listener) -> asyncio.Server:
        """Start accepting; the connections go to ``listener``."""
        assert self._server is not None, "not bound"
        self._listener = listener
        try:
            await self._server.start_serving()
        except OSError as exc:
            self.close()
            raise ListenError(_listen_failure(*self._where, exc)) from exc
        return self._server

    def close(self) -> None:
        """Give the port up (a start that failed after binding it)."""
        if self._server is not None:
            self._server.close()
            self._server = None


def _has_head(data: bytes) -> bool:
    """True once ``data`` holds a whole HTTP header block (ended by a blank line)."""
    return b"\n\r\n" in data or b"\n\n" in data


def _set_nodelay(transport: asyncio.Transport) -> None:
    sock: Any = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # a socket already reset by the peer
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _listen_failure(host: str, port: int, exc: OSError) -> str:
    """One line saying why the socket could not be bound and what to change."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is already in use (another tsd or "
            "OpenTSDB?); stop it or choose another port with --port"
        )
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need root)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: no such address on this host (see --bind)"
    reason = exc.strerror or str(exc)
    return f"cannot listen on {where}: {reason}"
