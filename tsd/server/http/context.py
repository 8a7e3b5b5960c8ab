"""What handlers and middlewares read from the application and the request.

The keys live apart from :mod:`tsd.server.http.app` so that the middlewares, which read
them, and the app, which installs the middlewares, import this module and not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tsd.config import Config
from tsd.meta.service import MetaService
from tsd.protocol.histogram_put import HistogramCodecs
from tsd.protocol.names import NameRules
from tsd.query.engine import QueryEngine
from tsd.query.tracking import QueryTracker
from tsd.server.credentials import Credentials
from tsd.stats import StatsRegistry
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService

__all__ = ["CORS_DOMAINS", "IS_API", "ROUTES", "SERVICES", "Services"]


class StorageCalls(Protocol):
    """The daemon's count of storage calls (``tsd.storage.instrumented``), as the stats
    handlers read it; ``inner`` is the store it counts for."""

    @property
    def calls(self) -> int: ...

    @property
    def errors(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def inner(self) -> object: ...


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
    #: /api/histogram's codecs (None: ``tsd.core.histograms.config`` unset, histograms off)
    histogram_codecs: HistogramCodecs | None
    #: series index, TSMeta/UIDMeta and annotations (the write path's, with its tracking)
    meta: MetaService
    #: the storage calls counted for ``/api/stats/region_clients``
    storage_calls: StorageCalls
    #: running and completed queries (``/api/stats/query``)
    query_tracker: QueryTracker
    #: the query engine (None in write-only mode, where no query route is served)
    query_engine: QueryEngine | None = None
    #: the loaded credentials when authentication is on
    credentials: Credentials | None = None

    @property
    def engine(self) -> QueryEngine:
        """The query engine, for the query routes (never served without one)."""
        if self.query_engine is None:
            raise RuntimeError("no query engine in write-only mode")
        return self.query_engine


SERVICES = web.AppKey("services", Services)
ROUTES = web.AppKey("routes", dict)
#: The upper-cased CORS domains (absent when CORS is off).
CORS_DOMAINS = web.AppKey("cors_domains", frozenset)
#: True for requests under /api: their replies are JSON, errors included.
IS_API = web.RequestKey("tsd.is_api", bool)
