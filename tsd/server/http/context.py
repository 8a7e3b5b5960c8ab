"""What handlers and middlewares read from the application and the request.

The keys live apart from :mod:`tsd.server.http.app` so that the middlewares, which read
them, and the app, which installs the middlewares, import this module and not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tsd.config import Config
from tsd.protocol.names import NameRules
from tsd.stats import StatsRegistry
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService

__all__ = ["CORS_DOMAINS", "IS_API", "ROUTES", "SERVICES", "Services"]


@dataclass(slots=True)
class Services:
    """Everything handlers may call, built by the daemon."""

    config: Config
    ingest: IngestService
    uids: UidService
    registry: StatsRegistry
    stats_tags: tuple[tuple[str, str], ...]
    rules: NameRules
    request_shutdown: Callable[[], None]
    #: the query engine, once the daemon has one (``tsd.query.engine.QueryEngine``)
    query_engine: Any = None
    #: /api/rollup and telnet ``rollup`` (``tsd.server.rollups.Rollups``), built by the daemon
    rollups: Any = None
    #: /api/histogram and telnet ``histogram`` (``tsd.server.histograms.Histograms``)
    histograms: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


SERVICES = web.AppKey("services", Services)
ROUTES = web.AppKey("routes", dict)
#: The upper-cased CORS domains (absent when CORS is off).
CORS_DOMAINS = web.AppKey("cors_domains", frozenset)
#: True for requests under /api: their replies are JSON, errors included.
IS_API = web.RequestKey("tsd.is_api", bool)
