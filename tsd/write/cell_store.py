"""Points written as one cell each, straight to storage (OpenTSDB's one PutRequest per
point, no batch, no log): rollups and pre-aggregates into the rollup tables, histograms
into the data table. :meth:`tsd.write.ingest.IngestSession.put_cell` is the way in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from tsd.protocol.rollup_put import RollupPoint
from tsd.write.histogram_store import HistogramCell, Histograms
from tsd.write.rollup_store import Rollups

__all__ = ["CellPoint", "CellStore"]

#: a point stored as a cell of its own
CellPoint: TypeAlias = RollupPoint | HistogramCell


@dataclass(frozen=True, slots=True)
class CellStore:
    """The daemon's rollup and histogram stores behind one call."""

    rollups: Rollups
    histograms: Histograms

    async def store(self, point: CellPoint) -> None:
        """Check, encode and store one point; raises as :meth:`Rollups.store` or
        :meth:`Histograms.store` does."""
        if isinstance(point, HistogramCell):
            await self.histograms.store(point)
        else:
            await self.rollups.store(point)
