"""structlog set-up, done once, and the logger names used by the adapters."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

TELNET = "tsd.telnet"
HTTP = "tsd.http"
WRITER = "tsd.writer"
STORAGE = "tsd.storage"
DAEMON = "tsd.daemon"
UID = "tsd.uid"
QUERY = "tsd.query"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    """JSON lines (production) or console output (a TTY), one event per line."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
