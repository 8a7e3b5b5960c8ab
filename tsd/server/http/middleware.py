"""The outermost HTTP middleware: ``?jsonp=`` and compressed responses.

* ``?jsonp=fn`` wraps every JSON body as ``fn(...)``, errors included, as OpenTSDB's
  ``HttpJsonSerializer`` does (a handler that wrapped its body already is left alone);
* a response with a body is compressed, gzip if the client's ``Accept-Encoding`` takes it,
  else deflate, as Netty's ``HttpContentCompressor`` does in OpenTSDB's pipeline (behaviour
  doc §0). Responses a handler has already started streaming are left as they are.

CORS is ``tsd.server.http.app.cors_middleware``, inside this one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.web_response import ContentCoding

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def response_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if not isinstance(response, web.Response) or response.prepared:
        return response
    body = response.body
    if not isinstance(body, bytes) or not body:
        return response
    if "jsonp" in request.query and response.content_type == "application/json":
        callback = request.query.getall("jsonp")[-1].encode("utf-8")
        if not body.startswith(callback + b"("):
            response.body = callback + b"(" + body + b")"
    coding = accepted_coding(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    if coding is not None:
        response.enable_compression(coding)
    return response


def accepted_coding(accept: str) -> ContentCoding | None:
    """gzip if the client takes it, else deflate, else None (``q=0`` refuses a coding)."""
    offered: dict[str, float] = {}
    for part in accept.split(","):
        name, *params = part.split(";")
        quality = 1.0
        for param in params:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        offered[name.strip().lower()] = quality
    if offered.get("gzip", 0.0) > 0:
        return ContentCoding.gzip
    if offered.get("deflate", 0.0) > 0:
        return ContentCoding.deflate
    return None
