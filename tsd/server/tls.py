"""TLS on the shared port: a connection whose first byte is 0x16 (a TLS handshake record,
which no telnet command or HTTP verb starts with) is decrypted, then sniffed again for
telnet or HTTP.

``loop.start_tls`` cannot be used: it wants a transport whose bytes have not been read yet,
and the listener has read the ClientHello to decide. So the connection is handed to
asyncio's own TLS protocol (``asyncio.sslproto.SSLProtocol``, what ``start_tls`` builds on
both asyncio's loop and, through the transport interface, uvloop's) and the bytes already
read are replayed into it. OpenTSDB has no TLS at all.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto

from tsd.errors import ConfigError

#: The first byte of every TLS record carrying a handshake (RFC 8446 §5.1: ContentType 22).
TLS_HANDSHAKE = 0x16


def is_tls_hello(first_bytes: bytes) -> bool:
    return bool(first_bytes) and first_bytes[0] == TLS_HANDSHAKE


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context from PEM files (``tsd.network.tls.cert`` / ``.key``; the key may be
    in the certificate file). TLS 1.2 at least, Python's default ciphers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("tsd.network.tls.cert", f"cannot load {cert} / {key}: {exc}") from None
    return context


def hand_over_to_tls(
    transport: asyncio.Transport,
    first_bytes: bytes,
    inner: asyncio.Protocol,
    context: ssl.SSLContext,
) -> None:
    """Decrypt ``transport`` for ``inner`` (which sees a plain connection once the handshake
    is done), replaying ``first_bytes`` already read from it."""
    loop = asyncio.get_running_loop()
    # No waiter: the connection is the inner protocol's once the handshake is done.
    tls = sslproto.SSLProtocol(loop, inner, context, None, server_side=True)  # type: ignore[arg-type]
    transport.set_protocol(tls)
    tls.connection_made(transport)
    view = memoryview(first_bytes)
    while view:
        buffer = tls.get_buffer(len(view))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        tls.buffer_updated(size)
        view = view[size:]
