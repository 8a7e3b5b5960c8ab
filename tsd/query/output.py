"""Query results: what the engine answers, before any rendering. Pure.

The server renders them (``tsd.server.http.render``: OpenTSDB 2.4's JSON, byte for byte).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tsd.query.series import AggregatedSeries
from tsd.query_spec import SubQuery, TSQuery

__all__ = ["LastPoint", "QueryResult", "SeriesResult"]


# not frozen: a group-by answers one per series (10,000), and a frozen dataclass's
# __init__ (object.__setattr__ per field) took about twice as long; never assigned to
@dataclass(slots=True, eq=False)
class SeriesResult:
    """One result series (OpenTSDB's DataPoints after grouping and aggregation).

    ``dps`` is already trimmed to the query's [start, end]. ``annotations`` is None when the
    series' group has none (no ``annotations`` key), else the notes in range (maybe empty).
    """

    sub: SubQuery
    metric: str
    tags: dict[str, str]
    aggregate_tags: list[str]
    dps: AggregatedSeries
    tsuids: list[str] = field(default_factory=list)
    annotations: list[dict[str, Any]] | None = None
    stats: dict[str, Any] | None = None
    #: tag key UIDs of the sub-query's filters (showQuery's ``filterTagKs``)
    filter_tagks: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class QueryResult:
    query: TSQuery
    series: list[SeriesResult]
    global_annotations: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class LastPoint:
    """One answer of /api/query/last (IncomingDataPoint): the value as Java prints it."""

    timestamp_ms: int
    value: str
    tsuid: str
    metric: str | None = None
    tags: dict[str, str] | None = None
