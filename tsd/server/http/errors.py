"""One middleware: every error becomes OpenTSDB's JSON error body (HttpSerializer.formatErrorV1).

``{"error": {"code": 400, "message": "...", "details": "..."}}`` with ``details`` only when
not empty. An unexpected error (a 500) never shows its internals: the body says
"Unexpected error" and carries an ``errorId`` that is also in its log event
(``http.unexpected_error``, with the traceback), so an operator can find it from what the
client saw. OpenTSDB adds a Java stack trace whenever ``tsd.http.show_stack_trace`` is true
(its default); in tsd the key is false by default (a documented departure) and adds the
exception text and Python traceback (``trace``) to 500s only, since a trace of a bad
request says nothing useful. Every reply under ``/api`` carries
``Content-Type: application/json; charset=UTF-8``, even a 204, as OpenTSDB's do.
Non-API routes (``/version``, ``/stats``...) get the same body with their status.
"""

from __future__ import annotations

import traceback
import uuid
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from tsd.errors import TsdError
from tsd.log import HTTP, get_logger
from tsd.server.http.app import IS_API, SERVICES

log = get_logger(HTTP)

JSON_CONTENT_TYPE = "application/json; charset=UTF-8"
#: The message of every 500 (without tsd.http.show_stack_trace): nothing from inside.
UNEXPECTED = "Unexpected error; the TSD's log has the details under this errorId"


def error_body(
    status: int, message: str, details: str = "", trace: str = "", error_id: str = ""
) -> bytes:
    error: dict[str, Any] = {"code": status, "message": message}
    if details:
        error["details"] = details
    if error_id:
        error["errorId"] = error_id
    if trace:
        error["trace"] = trace
    return orjson.dumps({"error": error})


def error_response(
    status: int, message: str, details: str = "", trace: str = "", error_id: str = ""
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, details, trace, error_id),
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
