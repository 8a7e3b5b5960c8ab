"""tsd.rollups.config (OpenTSDB 2.4.1 src/rollup/RollupConfig.java, RollupInterval.java)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tsd.codec.rollup import RollupSpan
from tsd.errors import BadRequestError, ConfigError
from tsd.protocol.rollup_config import parse_rollup_config

IDS = {"sum": 0, "count": 1, "min": 2, "max": 3}


def interval(**fields: Any) -> dict[str, Any]:
    base = {"table": "r1h", "preAggregationTable": "a1h", "interval": "1h", "rowSpan": "1d"}
    return base | fields


def config(*intervals: dict[str, Any], ids: dict[str, int] = IDS) -> bytes:
    return orjson.dumps({"aggregationIds": ids, "intervals": list(intervals)})


def test_a_valid_config() -> None:
    cfg = parse_rollup_config(
        config(
            interval(defaultInterval=True),
            interval(table="r10m", preAggregationTable="a10m", interval="10m", rowSpan="6h"),
        )
    )
    assert cfg.default.table == "r1h"
    assert cfg.interval("10m").span == RollupSpan("h", 6, 600)
    assert cfg.aggregation_ids == IDS
    with pytest.raises(BadRequestError, match="No rollups configured for the interval: 5m"):
        cfg.interval("5m")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (config(ids=IDS), "Rollup config given but no intervals were found."),
        (config(interval(defaultInterval=True), ids={}), "no aggegation ID mappings found."),
        (config(interval()), 'None of the rollup intervals were marked as the "default".'),
        (config(interval(defaultInterval=True), interval(defaultInterval=True, table="x")),
         "Only one interval of each type can be configured"),
        (config(interval(defaultInterval=True, rowSpan="3h", interval="1m")),
         "The multiplier must be 1 or an even value"),
        (config(interval(defaultInterval=True, rowSpan="2d")),
         "Multipliers are only usable with the 'h' unit"),
        (config(interval(defaultInterval=True, interval="1s", rowSpan="1d")),
         "Too many intervals [86400] in the span"),
        (config(interval(defaultInterval=True, interval="4h", rowSpan="1d")),
         "Not enough intervals [6] for the span"),
        (config(interval(defaultInterval=True, interval="1d", rowSpan="1d")),
         "Interval [86400] is too large for the span [d]"),
        (config(interval(defaultInterval=True, table="")), "The rollup table cannot be null"),
        (config(interval(defaultInterval=True), ids={"sum": 128}), "must be between 0 and 127"),
        (config(interval(defaultInterval=True), ids={"sum": 1, "max": 1}),
         "Multiple mappings for the ID '1' are not allowed."),
        (config(interval(defaultInterval=True), ids={"nope": 1}),
         "No such aggregator found for nope"),
    ],
)  # fmt: skip
def test_invalid_configs_say_why(document: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rollup_config(document)
    assert message in caught.value.message
