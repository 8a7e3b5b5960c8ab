"""Writing a large JSON answer piece by piece, with the connection's backpressure.

``response_middleware`` compresses and jsonp-wraps whole bodies; a large /api/query answer
would then be held as one blob, again compressed, again in the transport's buffer. Here the
pieces come from an async iterator (built in worker threads), each compressed as it goes
(gzip or deflate as the client takes them, the same choice as the middleware) and written
with ``await response.write``, which waits while the client is not reading.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import hdrs, web

from tsd.server.http.errors import JSON_CONTENT_TYPE
from tsd.server.http.middleware import accepted_coding


async def stream_json(request: web.Request, pieces: AsyncIterator[bytes]) -> web.StreamResponse:
    """A 200 whose JSON body is ``pieces``, written as they come."""
    response = web.StreamResponse(headers={"Content-Type": JSON_CONTENT_TYPE})
    coding = accepted_coding(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    if coding is not None:
        response.enable_compression(coding)
    await response.prepare(request)
    async for piece in pieces:
        await response.write(piece)
    await response.write_eof()
    return response
