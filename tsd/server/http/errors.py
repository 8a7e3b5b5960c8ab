"""OpenTSDB's JSON error body (HttpSerializer.formatErrorV1) and JSON replies.

:func:`tsd.server.http.middlewares.error_middleware` turns every error into this body.

``{"error": {"code": 400, "message": "...", "details": "..."}}`` with ``details`` only when
not empty. OpenTSDB adds a Java stack trace whenever ``tsd.http.show_stack_trace`` is true
(its default); tsd adds a Python one (``trace``) only for unexpected errors (500s), since
a trace of a bad request says nothing useful. Every reply under ``/api`` carries
``Content-Type: application/json; charset=UTF-8``, even a 204, as OpenTSDB's do.
Non-API routes (``/version``, ``/stats``...) get the same body with their status.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

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
