"""The request body limit (``tsd.http.request.max_body``, bytes once inflated).

* A body over the limit is answered ``413`` and the connection is closed: the rest of the
  body is neither read nor inflated (reading stops as the 413 is made). aiohttp's default
  after a reply to a request whose body is still arriving is to read it on for up to 10 s
  ("lingering close"), inflating a gzip bomb or an endless chunked body all along; the
  server runs with no lingering (``LINGERING_TIME_S``), and the 413 says
  ``Connection: close``.
* A declared ``Content-Length`` over the limit is refused before anything is read, and a
  request that asks ``Expect: 100-continue`` for such a body gets that 413 instead of
  ``100 Continue`` (:func:`expect_handler`), so the client never sends it.
"""

from __future__ import annotations

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

__all__ = [
    "LINGERING_TIME_S",
    "check_declared_length",
    "expect_handler",
    "too_large_response",
]

MAX_BODY_KEY = "tsd.http.request.max_body"

#: Seconds aiohttp reads the rest of a body its handler did not read (0: close at once).
LINGERING_TIME_S = 0.0


def check_declared_length(request: web.Request) -> None:
    """Raise aiohttp's 413 when the declared ``Content-Length`` is over the limit."""
    limit = request.client_max_size
    declared = request.content_length
    if limit and declared is not None and declared > limit:
        raise web.HTTPRequestEntityTooLarge(
            max_size=limit,
            actual_size=declared,
            text=f"Content-Length {declared} is over the limit of {limit} bytes ({MAX_BODY_KEY})",
        )


async def expect_handler(request: web.Request) -> None:
    """``Expect: 100-continue``: ``100 Continue`` only for a body the limit admits. For a
    declared length over it nothing is sent here: the request goes on to the middlewares,
    whose 413 is the final answer (RFC 9110 §10.1.1 lets a server answer so instead of
    100). Other expectations get aiohttp's 417, as before."""
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version != HttpVersion11:
        return
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
    limit = request.client_max_size
    declared = request.content_length
    if limit and declared is not None and declared > limit:
        return
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the 100 is not part of the response's size


def too_large_response(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """The 413 closes the connection (``Connection: close``), and the connection is read
    no more from now on: bytes read while the reply is sent would still be inflated
    (uvloop: three more rounds of about a quarter second each on a gzip bomb)."""
    response.force_close()
    # The socket itself: aiohttp's protocol hands pause_reading to its parser, whose
    # compiled version asserts a body is still being parsed (not so when it all came in
    # one read, before the handler ran).
    transport = request.transport
    if transport is not None and not transport.is_closing() and transport.is_reading():
        transport.pause_reading()
    return response
