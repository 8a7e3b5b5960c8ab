"""Rollup points from either protocol to storage: the checks (:mod:`tsd.protocol.rollup_put`)
then the write (:mod:`tsd.write.rollup`), failures classed as OpenTSDB classes them."""

from __future__ import annotations

from dataclasses import dataclass

from tsd.errors import NoSuchUniqueName, TsdError
from tsd.protocol.rollup_put import (
    STORAGE,
    UNKNOWN_METRIC,
    RollupError,
    RollupPoint,
    RollupRules,
    prepare_rollup,
)
from tsd.stats import StatsRegistry
from tsd.write.rollup import RollupWriter

__all__ = ["Rollups"]


@dataclass(frozen=True, slots=True)
class Rollups:
    """The daemon's rollup rules and writer."""

    rules: RollupRules
    writer: RollupWriter
    registry: StatsRegistry

    async def store(self, point: RollupPoint) -> None:
        """Check and store one point (a pre-aggregate when it has a group-by
        aggregator). Raises RollupError: refused before storage, or kind UNKNOWN_METRIC
        (auto-create off) or STORAGE (failed in the write)."""
        prepared = prepare_rollup(point, self.rules, groupby=point.groupby is not None)
        try:
            await self.writer.write_cell(prepared)
        except NoSuchUniqueName as exc:
            error = RollupError(UNKNOWN_METRIC, exc.message)
            error.tags = dict(prepared.tags)
            raise error from exc
        except TsdError as exc:
            error = RollupError(STORAGE, exc.message)
            error.tags = dict(prepared.tags)
            raise error from exc
        self.registry.counter("rollup.stored").inc()
