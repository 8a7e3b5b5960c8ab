"""The HTTP middlewares, outermost first (``make_app`` installs them in this order).

* the response layer (:func:`finish_response`): ``?jsonp=fn`` wraps every JSON body as
  ``fn(...)``, errors included, as OpenTSDB's ``HttpJsonSerializer`` does (the only place
  jsonp is applied: handlers and renderers never wrap); a response with a body is
  compressed, gzip if the client's ``Accept-Encoding`` takes it, else deflate, as Netty's
  ``HttpContentCompressor`` does in OpenTSDB's pipeline (behaviour doc §0). Responses a
  handler has already started streaming, or encoded itself (remote read's snappy), are left
  as they are. The deflate stream is Intel's ISA-L (``isal``, the same gzip and zlib
  formats as zlib writes, a faster encoder; also aiohttp's backend: :func:`use_fast_zlib`),
  at level ``COMPRESS_LEVEL`` (1), not Netty's 6: a day of one series at 10 s (172 KB of
  JSON) takes 0.23 ms and 47 KB, against zlib's 1.07 ms and 52 KB at level 1 and 9.1 ms at
  6 (the same bytes once decoded; the level is not part of OpenTSDB's answer). A body up to
  ``INLINE_COMPRESS_BYTES`` is compressed here, on the event loop: waking a worker thread
  on a busy machine costs more (0.3-8 ms measured under load) than compressing 256 KiB
  (about 0.35 ms); a bigger body in one worker thread.
* :func:`cors_middleware`: RpcHandler.applyCorsConfig; outside the error middleware so its
  headers go on error replies too.
* :func:`error_middleware`: every error becomes OpenTSDB's JSON error body
  (:mod:`tsd.server.http.errors` renders it); unexpected ones are a 500 and a log event.

``make_app`` installs them as one aiohttp middleware (:func:`layered`): a request that is
neither a CORS preflight nor from a browser (no Origin, Referer, Sec-Fetch-Site or
Accept-Language: collectors, Grafana's server-side proxy, curl) on a TSD without
authentication has nothing for the CORS layer and the guards to do but the ``nosniff``
header, so it goes straight to the error layer: one coroutine instead of four or five on
every small query (issue 27). Any other request passes every layer in the order above.
"""

from __future__ import annotations

import asyncio
import functools
import traceback
import uuid
import zlib
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestPayloadError
from aiohttp.web_response import ContentCoding
from isal import isal_zlib

from tsd.errors import ConfigError, TsdError
from tsd.log import HTTP, get_logger
from tsd.server.http.auth import auth_middleware
from tsd.server.http.body_limit import check_declared_length, too_large_response
from tsd.server.http.context import CORS_DOMAINS, IS_API, SERVICES
from tsd.server.http.errors import JSON_CONTENT_TYPE, UNEXPECTED, error_response
from tsd.server.http.guard import from_browser, nosniff, origin_guard

__all__ = [
    "accepted_coding",
    "cors_middleware",
    "error_middleware",
    "layered",
    "finish_response",
    "parse_cors_domains",
]

log = get_logger(HTTP)

#: bodies up to this size are compressed on the event loop (see the module docstring)
INLINE_COMPRESS_BYTES = 256 * 1024
#: ISA-L's level (0-3) for every body this middleware compresses (see the module docstring)
COMPRESS_LEVEL = 1
#: zlib window bits per coding, as aiohttp writes them (gzip header; zlib header for deflate)
_WBITS = {ContentCoding.gzip: 16 + zlib.MAX_WBITS, ContentCoding.deflate: zlib.MAX_WBITS}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Layer = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


async def finish_response(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """The response layer: jsonp and compression of a handler's response."""
    if not isinstance(response, web.Response) or response.prepared:
        return response
    body = response.body
    if not isinstance(body, bytes) or not body:
        return response
    if "jsonp" in request.query and response.content_type == "application/json":
        callback = request.query.getall("jsonp")[-1].encode("utf-8")
        response.body = callback + b"(" + body + b")"
    if hdrs.CONTENT_ENCODING in response.headers:  # already encoded (remote read's snappy)
        return response
    coding = accepted_coding(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    if coding is None:
        return response
    body = response.body
    if not isinstance(body, bytes):
        response.enable_compression(coding)
        return response
    if len(body) <= INLINE_COMPRESS_BYTES:
        response.body = _compressed(body, coding)
    else:
        response.body = await asyncio.to_thread(_compressed, body, coding)
    response.headers[hdrs.CONTENT_ENCODING] = coding.value
    return response


def _compressed(body: bytes, coding: ContentCoding) -> bytes:
    """The body in one call (the same bytes as a compressor object's ``compress`` and
    ``flush``, without the object: half the time of a small answer's 7 KB, 17 us)."""
    return isal_zlib.compress(body, COMPRESS_LEVEL, _WBITS[coding])


def use_fast_zlib() -> None:
    """aiohttp's deflate (streamed answers, request bodies inflated) by ISA-L too: a
    backend aiohttp supports (``aiohttp.set_zlib_backend``), the process's for good."""
    aiohttp.set_zlib_backend(isal_zlib)


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


def parse_cors_domains(text: str) -> frozenset[str] | None:
    """``tsd.http.request.cors_domains``: None when empty (CORS off), else the upper-cased
    domains; ``*`` cannot be mixed with domains (RpcHandler's constructor refuses it)."""
    domains = frozenset(d.strip().upper() for d in text.split(",") if d.strip())
    if not domains:
        return None
    if "*" in domains and len(domains) > 1:
        raise ConfigError(
            "tsd.http.request.cors_domains",
            "must be a public resource (*) or a list of specific domains, you cannot mix both",
        )
    return domains


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """RpcHandler.applyCorsConfig: OPTIONS and cross-origin requests."""
    domains: frozenset[str] | None = request.app.get(CORS_DOMAINS)
    origin = request.headers.get("Origin", "")
    if request.method != "OPTIONS" and (domains is None or not origin):
        return await handler(request)
    if domains is None or not origin:
        details = f"The HTTP method [{request.method}] is not permitted"
        return error_response(405, "Method not allowed", details)
    if "*" not in domains and origin.upper() not in domains:
        # OpenTSDB: a 200 without the allow-origin header, the refusal in the body.
        return error_response(
            200, "CORS domain not allowed", f"The domain [{origin}] is not permitted access"
        )
    headers = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE",
        "Access-Control-Allow-Headers": request.app[SERVICES].config.http.cors_headers,
    }
    if request.method == "OPTIONS":
        return web.Response(status=200, headers=headers)
    response = await handler(request)
    response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors -> OpenTSDB's JSON error body; API replies get the JSON content type."""
    try:
        check_declared_length(request)
        response = await handler(request)
    except TsdError as exc:
        details = getattr(exc, "details", "")
        return error_response(exc.status, exc.message or type(exc).__name__, details)
    except web.HTTPRequestEntityTooLarge as exc:
        return too_large_response(
            request, error_response(413, "Request entity too large", exc.text or "")
        )
    except RequestPayloadError as exc:  # a body that does not inflate, a broken chunk
        response = error_response(400, "Unable to read the request body", str(exc.__cause__ or exc))
        response.force_close()  # the rest of the body cannot be read either
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason, exc.text or "")
    except Exception as exc:
        error_id = uuid.uuid4().hex[:16]
        log.exception(
            "http.unexpected_error",
            error_id=error_id,
            path=request.path[:200],
            method=request.method,
        )
        if request.app[SERVICES].config.http.show_stack_trace:
            message = str(exc) or type(exc).__name__
            return error_response(500, message, trace=traceback.format_exc(), error_id=error_id)
        return error_response(500, UNEXPECTED, error_id=error_id)
    if request.get(IS_API) and "Content-Type" not in response.headers:
        response.headers["Content-Type"] = JSON_CONTENT_TYPE
    return response


def layered(authenticated: bool) -> Middleware:
    """The response, CORS, origin guard, authentication (when ``authenticated``) and error
    middlewares as one (see the module docstring)."""
    guards: tuple[Layer, ...] = (
        (origin_guard, auth_middleware) if authenticated else (origin_guard,)
    )

    def chain(handler: Handler) -> Handler:
        """Every layer below the response one, for ``handler``."""
        wrapped: Handler = functools.partial(_layer, error_middleware, handler)
        for guard in reversed(guards):
            wrapped = functools.partial(_layer, guard, wrapped)
        return functools.partial(_layer, cors_middleware, wrapped)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authenticated or request.method == "OPTIONS" or from_browser(request):
            response = await chain(handler)(request)
        else:  # nothing for CORS and the guards to do but the nosniff header
            response = nosniff(await error_middleware(request, handler))
        return await finish_response(request, response)

    return middleware


def _layer(layer: Layer, handler: Handler, request: web.Request) -> Awaitable[web.StreamResponse]:
    return layer(request, handler)
