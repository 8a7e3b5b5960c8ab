"""Telnet authentication: the first line of a connection is its credential.

OpenTSDB 2.4's ``AuthenticationChannelHandler`` hands a connection's first telnet command to
the authentication plugin and answers ``AUTH_SUCCESS`` or ``AUTH_FAIL`` (CRLF-terminated);
the plugins of the 2.3 branch read ``auth basic <key> <secret>``. tsd takes that line, and
``auth token <secret>`` (:meth:`Credentials.telnet`). On success the connection becomes an
ordinary :class:`~tsd.server.telnet.TelnetProtocol` whose commands are those the
credential's rights open (``put`` needs write; ``dropcaches`` and ``diediedie`` admin): a
command outside them is unknown on that connection, and ``help`` lists what is left. On
failure tsd answers ``AUTH_FAIL`` and closes the connection; OpenTSDB keeps it open for
another try, which would make every line of a collector that does not authenticate a
failed attempt (a departure listed in the README).

The gate forwards every callback to the protocol it builds, so the listener keeps tracking
one object per connection, and the telnet protocol itself knows nothing of credentials.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import cast

from tsd.log import TELNET, get_logger
from tsd.server.credentials import Credentials, Right
from tsd.server.listener import TelnetFactory, TrackedProtocol
from tsd.server.telnet import TelnetContext, TelnetProtocol, telnet_factory

log = get_logger(TELNET)

AUTH_SUCCESS = b"AUTH_SUCCESS\r\n"
AUTH_FAIL = b"AUTH_FAIL\r\n"
#: A credential line is short; anything longer before a newline is not one.
MAX_AUTH_LINE_BYTES = 1024

#: The right each command needs; any valid credential may run the others (version, help,
#: exit: tcollector probes a connection with ``version`` whatever it may do).
COMMAND_RIGHTS = {
    "put": Right.WRITE,
    "rollup": Right.WRITE,
    "histogram": Right.WRITE,
    "stats": Right.READ,
    "dropcaches": Right.ADMIN,
    "diediedie": Right.ADMIN,
}


def authenticated_telnet_factory(context: TelnetContext, credentials: Credentials) -> TelnetFactory:
    """Gate each connection on its first line; one protocol factory per set of rights."""
    factories: dict[Right, Callable[[], TelnetProtocol]] = {}

    def protocol_for(rights: Right) -> TelnetProtocol:
        factory = factories.get(rights)
        if factory is None:
            commands = tuple(
                c for c in context.commands if COMMAND_RIGHTS.get(c, Right(0)) in rights
            )
            factory = factories[rights] = telnet_factory(
                dataclasses.replace(context, commands=commands)
            )
        return factory()

    failures = context.registry.counter("rpc.auth", type="telnet_failed")
    timeout_s = context.idle_timeout_s
    return lambda: TelnetAuthProtocol(credentials, protocol_for, failures.inc, timeout_s)


class TelnetAuthProtocol(TrackedProtocol):
    """Reads the credential line, then forwards everything to the telnet protocol."""

    def __init__(
        self,
        credentials: Credentials,
        protocol_for: Callable[[Right], TelnetProtocol],
        on_failure: Callable[[], None],
        timeout_s: float = 0.0,
    ) -> None:
        """``timeout_s``: close a connection that sends no credential line this long
        (``tsd.core.socket.timeout``; 0 = never)."""
        self._credentials = credentials
        self._timeout_s = timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._protocol_for = protocol_for
        self._on_failure = on_failure
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._inner: TelnetProtocol | None = None
        self._finished = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self._timeout_s > 0:
            self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._timed_out)

    def _timed_out(self) -> None:
        if self._inner is None and self._transport is not None:
            log.info("telnet.auth_timeout", peer=str(self._transport.get_extra_info("peername")))
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)
            return
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._buffer += data
        end = self._buffer.find(b"\n")
        if end < 0 and len(self._buffer) <= MAX_AUTH_LINE_BYTES:
            return
        line = bytes(self._buffer[:end]).rstrip(b"\r") if end >= 0 else b""
        principal = self._credentials.telnet(line) if end >= 0 else None
        peer = transport.get_extra_info("peername")
        if principal is None:
            self._on_failure()
            log.info("telnet.auth_failed", peer=str(peer))
            transport.write(AUTH_FAIL)
            transport.close()
            return
        rest = bytes(self._buffer[end + 1 :])
        self._buffer.clear()
        if self._timer is not None:
            self._timer.cancel()
        transport.write(AUTH_SUCCESS)
        inner = self._inner = self._protocol_for(principal.rights)
        inner.on_lost = self._inner_finished
        inner.connection_made(transport)
        if rest:
            inner.data_received(rest)

    def eof_received(self) -> bool:
        return self._inner.eof_received() if self._inner is not None else False

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
        if self._inner is not None:
            self._inner.connection_lost(exc)  # reports through _inner_finished
        else:
            self._inner_finished(self)

    def _inner_finished(self, protocol: TrackedProtocol) -> None:
        if not self._finished.done():
            self._finished.set_result(None)
            if self.on_lost is not None:
                self.on_lost(self)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        elif self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._finished)
