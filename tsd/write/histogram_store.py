"""Histogram points from either protocol to the data table (TSDB.addHistogramPoint): the
timestamp and name checks of a put, then one cell, ``06``-prefixed qualifier, written
straight to storage as OpenTSDB's one PutRequest per point."""

from __future__ import annotations

from dataclasses import dataclass

from tsd.codec.const import MAX_TIMESPAN, SECOND_MASK
from tsd.codec.histogram import SimpleHistogram, histogram_qualifier
from tsd.data_points import MAX_MS_TIMESTAMP
from tsd.errors import BadRequestError
from tsd.java_text import format_java_bytes
from tsd.protocol.histogram_put import HistogramCodecs, HistogramFailure
from tsd.protocol.names import NameRules, check_metric_and_tags, format_java_map
from tsd.protocol.rollup_put import PreparedRollup
from tsd.write.rollup import RollupWriter

__all__ = ["HistogramCell", "Histograms"]


@dataclass(frozen=True, slots=True)
class HistogramCell:
    """One histogram point of either protocol, its histogram decoded."""

    metric: str
    timestamp: int
    histogram: SimpleHistogram
    tags: dict[str, str]


@dataclass(frozen=True, slots=True)
class Histograms:
    """The daemon's histogram codecs (None: ``tsd.core.histograms.config`` unset) and the
    writer of single cells."""

    codecs: HistogramCodecs | None
    writer: RollupWriter
    data_table: str
    rules: NameRules

    async def store(self, cell: HistogramCell) -> None:
        """Encode and store. Raises HistogramFailure (OpenTSDB's IllegalArgument texts),
        NoSuchUniqueName, or TsdError from storage."""
        assert self.codecs is not None
        metric, timestamp, histogram, tags = cell.metric, cell.timestamp, cell.histogram, cell.tags
        raw = self.codecs.encode(histogram)
        if timestamp < 0 or (timestamp & SECOND_MASK and timestamp > MAX_MS_TIMESTAMP):
            kind = "negative " if timestamp < 0 else "bad"
            raise HistogramFailure(
                f"{kind} timestamp={timestamp} when trying to add value="
                f"{format_java_bytes(raw)}/0 to metric={metric}, tags={format_java_map(tags)}"
            )
        try:
            check_metric_and_tags(metric, tags, self.rules)
        except BadRequestError as exc:
            raise HistogramFailure(exc.message) from None
        seconds = timestamp // 1000 if timestamp & SECOND_MASK else timestamp
        base = seconds - seconds % MAX_TIMESPAN
        prepared = PreparedRollup(
            self.data_table,
            metric,
            tuple(sorted(tags.items())),
            base,
            histogram_qualifier(timestamp),
            raw,
        )
        await self.writer.write_cell(prepared)
