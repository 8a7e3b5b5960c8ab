"""OpenTSDB's JSON error body (HttpSerializer.formatErrorV1) and JSON replies.

:func:`tsd.server.http.middlewares.error_middleware` turns every error into this body.

``{"error": {"code": 400, "message": "...", "details": "..."}}`` with ``details`` only when
not empty. An unexpected error (a 500) never shows its internals: the body says
:data:`UNEXPECTED` and carries an ``errorId`` that is also in its log event
(``http.unexpected_error``, with the traceback), so an operator can find it from what the
client saw. OpenTSDB adds a Java stack trace whenever ``tsd.http.show_stack_trace`` is true
(its default); in tsd the key is false by default (a documented departure) and adds the
exception text and Python traceback (``trace``) to 500s only, since a trace of a bad
request says nothing useful. Every reply under ``/api`` carries
``Content-Type: application/json; charset=UTF-8``, even a 204, as OpenTSDB's do.
Non-API routes (``/version``, ``/stats``...) get the same body with their status.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

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
