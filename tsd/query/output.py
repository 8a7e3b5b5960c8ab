"""Query results: what the engine answers, before any rendering. Pure.

The server renders them (``tsd.server.http.render``: OpenTSDB 2.4's JSON, byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from tsd.query.series import AggregatedSeries, JoinedSeries
from tsd.query_spec import SubQuery, TSQuery

__all__ = [
    "LastPoint",
    "QueryResult",
    "SeriesColumns",
    "SeriesParts",
    "SeriesResult",
    "emitted_points",
]


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
    tsuids: Sequence[str] = field(default_factory=list)
    annotations: list[dict[str, Any]] | None = None
    stats: dict[str, Any] | None = None
    #: tag key UIDs of the sub-query's filters (showQuery's ``filterTagKs``)
    filter_tagks: tuple[bytes, ...] = ()


class SeriesColumns(Sequence[SeriesResult]):
    """Result series that are each one series' points, without annotations (a
    group-by's groups of one: 10,000 of them), by column: the series' indices, their
    facts (tags and TSUIDs, by series index) and their points end to end. The HTTP
    output writes them from the columns (tsd.server.http.render); anything else reads
    them as :class:`SeriesResult`, each built when asked."""

    __slots__ = (
        "_dps", "_lo", "_members", "_n", "columns", "filter_tagks", "metric", "stats", "sub",
        "tags", "tsuids",
    )  # fmt: skip

    def __init__(
        self,
        sub: SubQuery,
        metric: str,
        members: npt.NDArray[np.int64],
        dps: JoinedSeries,
        tags: Sequence[dict[str, str]],
        tsuids: Sequence[str],
        columns: dict[str, tuple[list[str], npt.NDArray[np.int64]]] | None,
        stats: dict[str, Any] | None,
        filter_tagks: tuple[bytes, ...],
        lo: int = 0,
        n: int | None = None,
    ) -> None:
        """Results ``lo:lo + n`` of ``members`` (all of them by default): result ``r``
        is series ``members[r]``, with points ``dps.part(r)``; ``stats`` is showStats'
        timings (None without it)."""
        self.sub, self.metric, self._members, self._dps = sub, metric, members, dps
        self.tags, self.tsuids, self.columns, self.stats = tags, tsuids, columns, stats
        self.filter_tagks = filter_tagks
        self._lo = lo
        self._n = len(members) - lo if n is None else n

    def __len__(self) -> int:
        return self._n

    @property
    def members(self) -> npt.NDArray[np.int64]:
        """The series index of each result."""
        return self._members[self._lo : self._lo + self._n]

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        """Result ``r``'s points are ``points[offsets[r]:offsets[r + 1]]``."""
        return self._dps.offsets[self._lo : self._lo + self._n + 1]

    @property
    def points(self) -> AggregatedSeries:
        """Every point of every result, end to end."""
        return self._dps.dps

    def point_count(self) -> int:
        offsets = self.offsets
        return int(offsets[-1] - offsets[0])

    def part(self, lo: int, hi: int) -> SeriesColumns:
        """Results ``lo:hi`` (0 <= lo <= hi <= len)."""
        return SeriesColumns(
            self.sub,
            self.metric,
            self._members,
            self._dps,
            self.tags,
            self.tsuids,
            self.columns,
            self.stats,
            self.filter_tagks,
            self._lo + lo,
            hi - lo,
        )

    def result(self, r: int) -> SeriesResult:
        """Result ``r`` as a :class:`SeriesResult` (what the per-series path builds)."""
        i = int(self._members[self._lo + r])
        dps = self._dps.part(self._lo + r)
        stats = None
        if self.stats is not None:
            stats = dict(self.stats, emittedDPs=len(dps), queryIndex=self.sub.index)
        return SeriesResult(
            sub=self.sub,
            metric=self.metric,
            tags=dict(self.tags[i]),
            aggregate_tags=[],
            dps=dps,
            tsuids=[self.tsuids[i]],
            annotations=None,
            stats=stats,
            filter_tagks=self.filter_tagks,
        )

    @overload
    def __getitem__(self, r: int) -> SeriesResult: ...
    @overload
    def __getitem__(self, r: slice) -> SeriesColumns: ...
    def __getitem__(self, r: int | slice) -> SeriesResult | SeriesColumns:
        if isinstance(r, slice):
            lo, hi, step = r.indices(self._n)
            if step != 1:
                raise ValueError("SeriesColumns: a slice of step 1 only")
            return self.part(lo, max(lo, hi))
        if r < 0:
            r += self._n
        if not 0 <= r < self._n:
            raise IndexError(r)
        return self.result(r)

    def __iter__(self) -> Iterator[SeriesResult]:
        return map(self.result, range(self._n))


class SeriesParts(Sequence[SeriesResult]):
    """The result series of every sub-query, one after the other, where some come as
    :class:`SeriesColumns`: each part as it came (``pieces`` gives them by range)."""

    __slots__ = ("_ends", "_parts")

    def __init__(self, parts: Sequence[Sequence[SeriesResult]]) -> None:
        self._parts = [p for p in parts if len(p)]
        self._ends = np.cumsum([len(p) for p in self._parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def pieces(self, lo: int, hi: int) -> list[Sequence[SeriesResult]]:
        """Results ``lo:hi`` as parts: columns stay columns."""
        out: list[Sequence[SeriesResult]] = []
        start = 0
        for part, end in zip(self._parts, self._ends.tolist(), strict=True):
            a, b = max(lo, start) - start, min(hi, end) - start
            if a < b:
                out.append(part[a:b])
            start = end
        return out

    @overload
    def __getitem__(self, r: int) -> SeriesResult: ...
    @overload
    def __getitem__(self, r: slice) -> list[SeriesResult]: ...
    def __getitem__(self, r: int | slice) -> SeriesResult | list[SeriesResult]:
        if isinstance(r, slice):
            return [self[k] for k in range(*r.indices(len(self)))]
        if r < 0:
            r += len(self)
        if not 0 <= r < len(self):
            raise IndexError(r)
        k = int(np.searchsorted(self._ends, r, side="right"))
        start = int(self._ends[k - 1]) if k else 0
        return self._parts[k][r - start]

    def __iter__(self) -> Iterator[SeriesResult]:
        for part in self._parts:
            yield from part


def emitted_points(series: Sequence[SeriesResult]) -> int:
    """The points of every result series (no step per series for columns)."""
    if isinstance(series, SeriesColumns):
        return series.point_count()
    if isinstance(series, SeriesParts):
        return sum(emitted_points(p) for p in series.pieces(0, len(series)))
    return sum([len(s.dps.timestamps) for s in series])


@dataclass(frozen=True, slots=True, eq=False)
class QueryResult:
    query: TSQuery
    #: a list, or :class:`SeriesParts` when some sub-query answered columns
    series: Sequence[SeriesResult]
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
