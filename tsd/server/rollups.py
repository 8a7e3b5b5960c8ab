"""Rollup points from either protocol to storage: the checks (:mod:`tsd.protocol.rollup_put`)
then the write (:mod:`tsd.write.rollup`), failures classed as OpenTSDB classes them."""

from __future__ import annotations

from dataclasses import dataclass

from tsd.errors import NoSuchUniqueName, TsdError
from tsd.protocol.rollup_put import (
    STORAGE,
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

    async def store(self, point: RollupPoint, *, groupby: bool) -> None:
        """Check and store one point. Raises RollupError (refused before storage, or kind
        STORAGE: failed in the write), or NoSuchUniqueName (auto-create off)."""
        prepared = prepare_rollup(point, self.rules, groupby=groupby)
        try:
            await self.writer.write(prepared)
        except NoSuchUniqueName:
            raise
        except TsdError as exc:
            raise RollupError(STORAGE, exc.message) from exc
        self.registry.counter("rollup.stored").inc()
