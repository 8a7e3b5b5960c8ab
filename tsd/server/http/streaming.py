"""Writing a large /api/query answer piece by piece, with the connection's backpressure.

The response middleware (``finish_response``) compresses and jsonp-wraps whole bodies; a
large answer would then be held as one blob, again compressed, again in the transport's
buffer. Here it is rendered ``PIECE_SERIES`` series at a time in the engine's worker
threads, each piece compressed as it goes (gzip or deflate as the client takes them, the
middleware's choice) and written with ``await response.write``, which waits while the
client is not reading. ``?jsonp=`` is applied here for these answers (the middleware
leaves a started response alone), the same way: the last callback given.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from tsd.query.engine import QueryEngine
from tsd.query.output import QueryResult
from tsd.query.output import emitted_points as series_points
from tsd.server.http.errors import JSON_CONTENT_TYPE
from tsd.server.http.middlewares import accepted_coding
from tsd.server.http.render import render_series_range, render_summary

#: Series rendered per piece, and the answer size (points) from which it is streamed.
PIECE_SERIES = 1024
STREAM_POINTS = 200_000


def emitted_points(result: QueryResult) -> int:
    """The points the answer holds (counted once per answer: a pass over 10,000 series,
    none over columns)."""
    return series_points(result.series)


def is_large(result: QueryResult, points: int | None = None) -> bool:
    """True when the answer (of ``points`` points, counted when not given) is worth
    writing piece by piece."""
    if len(result.series) > PIECE_SERIES:
        return True
    return (emitted_points(result) if points is None else points) > STREAM_POINTS


def piece_series(count: int, points: int) -> int:
    """Series rendered per piece of an answer of ``count`` series and ``points`` points:
    ``PIECE_SERIES``, or as many more as hold about ``STREAM_POINTS`` points (a group-by's
    10,000 series of 24 points each: two pieces, not ten hops to a worker thread)."""
    per_series = max(1, points // max(1, count))
    return max(PIECE_SERIES, STREAM_POINTS // per_series)


async def stream_query_result(
    request: web.Request,
    engine: QueryEngine,
    result: QueryResult,
    *,
    arrays: bool,
    points: int | None = None,
) -> web.StreamResponse:
    """A 200 whose body is ``result``'s JSON, written as it is rendered (``points``: the
    answer's, counted when not given)."""
    if points is None:
        points = emitted_points(result)
    response = web.StreamResponse(headers={"Content-Type": JSON_CONTENT_TYPE})
    coding = accepted_coding(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    if coding is not None:
        response.enable_compression(coding)
    await response.prepare(request)
    callback = request.query.getall("jsonp")[-1].encode() if "jsonp" in request.query else b""
    pending = callback + b"([" if callback else b"["
    count = len(result.series)
    step = piece_series(count, points)
    for lo in range(0, count, step):
        piece = await engine.compute(render_series_range, result, lo, lo + step, arrays)
        await response.write(pending + (b"," if lo else b"") + piece)
        pending = b""
    summary = render_summary(result)
    if summary is not None:
        pending += (b"," if count else b"") + summary
    await response.write(pending + (b"])" if callback else b"]"))
    await response.write_eof()
    return response
