"""One middleware: every error becomes OpenTSDB's JSON error body (HttpSerializer.formatErrorV1).

``{"error": {"code": 400, "message": "...", "details": "..."}}`` with ``details`` only when
not empty. OpenTSDB adds a Java stack trace whenever ``tsd.http.show_stack_trace`` is true
(its default); tsd adds a Python one (``trace``) only for unexpected errors (500s), since
a trace of a bad request says nothing useful. Every reply under ``/api`` carries
``Content-Type: application/json; charset=UTF-8``, even a 204, as OpenTSDB's do.
Non-API routes (``/version``, ``/stats``...) get the same body with their status.
"""

from __future__ import annotations

import traceback
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from tsd.errors import TsdError
from tsd.log import HTTP, get_logger
from tsd.server.http.app import IS_API, SERVICES

log = get_logger(HTTP)

JSON_CONTENT_TYPE = "application/json; charset=UTF-8"


def error_body(status: int, message: str, details: str = "", trace: str = "") -> bytes:
    error: dict[str, Any] = {"code": status, "message": message}
    if details:
        error["details"] = details
    if trace:
        error["trace"] = trace
    return orjson.dumps({"error": error})


def error_response(status: int, message: str, details: str = "", trace: str = "") -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, details, trace),
        headers={"Content-Type": JSON_CONTENT_TYPE},
    )


def json_response(body: bytes, status: int = 200) -> web.Response:
    """A JSON reply with OpenTSDB's content type."""
    return web.Response(status=status, body=body, headers={"Content-Type": JSON_CONTENT_TYPE})


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except TsdError as exc:
        details = getattr(exc, "details", "")
        return error_response(exc.status, exc.message or type(exc).__name__, details)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(413, "Request entity too large", exc.text or "")
    except RequestPayloadError as exc:  # a body that does not inflate, a broken chunk
        response = error_response(400, "Unable to read the request body", str(exc.__cause__ or exc))
        response.force_close()  # the rest of the body cannot be read either
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason, exc.text or "")
    except Exception as exc:
        log.exception("http.unexpected_error", path=request.path, method=request.method)
        show_trace = request.app[SERVICES].config.http.show_stack_trace
        trace = traceback.format_exc() if show_trace else ""
        return error_response(500, str(exc) or type(exc).__name__, trace=trace)
    if request.get(IS_API) and "Content-Type" not in response.headers:
        response.headers["Content-Type"] = JSON_CONTENT_TYPE
    return response
