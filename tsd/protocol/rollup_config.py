"""``tsd.rollups.config``: OpenTSDB 2.4.1's rollup configuration JSON (src/rollup/
RollupConfig.java, RollupInterval.java). Pure: the caller reads a ``.json`` file.

::

    {"aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
     "intervals": [{"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-agg-1h",
                    "interval": "1h", "rowSpan": "1d", "defaultInterval": true}]}

Validation and messages are OpenTSDB's (an interval's row span ``<n>h`` with n 1 or
even, ``1d``, ``1n`` or ``1y``; 12 to 7774 intervals per row; aggregator ids 0 to 127,
each once, naming known aggregators; one interval of each size; exactly one default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tsd.codec.rollup import MAX_INTERVALS, MIN_INTERVALS, RollupSpan
from tsd.errors import BadRequestError, ConfigError
from tsd.protocol.timespec import parse_duration
from tsd.query_spec import AGGREGATOR_NAMES

__all__ = [
    "RollupConfig",
    "RollupInterval",
    "default_rollup_config",
    "parse_rollup_config",
    "rollup_config_source",
]

_SPAN_SECONDS = {"h": 3600, "d": 86400, "n": 86400 * 32, "y": 86400 * 366}
_UNITS = ("ms", "s", "m", "h", "d", "w", "n", "y")


@dataclass(frozen=True, slots=True)
class RollupInterval:
    """One configured interval: its two tables and the span of its rows."""

    table: str
    pre_aggregation_table: str
    interval: str
    row_span: str
    default_interval: bool
    span: RollupSpan


@dataclass(frozen=True, slots=True)
class RollupConfig:
    intervals: tuple[RollupInterval, ...]
    #: aggregator name (lower case) -> id
    aggregation_ids: Mapping[str, int]

    @property
    def default(self) -> RollupInterval:
        return next(i for i in self.intervals if i.default_interval)

    def find(self, name: str) -> RollupInterval | None:
        """The interval configured as ``name`` (``1h``), or None."""
        for i in self.intervals:
            if i.interval == name:
                return i
        return None

    def interval(self, name: str) -> RollupInterval:
        """RollupConfig.getRollupInterval(String), with its messages."""
        if not name:
            raise BadRequestError("Interval cannot be null or empty")
        found = self.find(name)
        if found is None:
            raise BadRequestError(f"No rollups configured for the interval: {name}")
        return found

    def id_for(self, aggregator: str | None) -> int:
        """RollupConfig.getIdForAggregator: raises BadRequestError with its message."""
        if not aggregator:
            raise BadRequestError("Aggregator cannot be null or empty.")
        found = self.aggregation_ids.get(aggregator.lower())
        if found is None:
            raise BadRequestError(f"No ID found mapping to aggregator: {aggregator}")
        return found

    def best_matches(self, seconds: int) -> list[RollupInterval]:
        """RollupConfig.getRollupInterval(long, String): the intervals a downsample of
        ``seconds`` can read, largest first (the exact one, then those dividing it); empty
        when none does."""
        if seconds <= 0:
            return []
        found = {
            i.span.interval_seconds: i
            for i in self.intervals
            if seconds % i.span.interval_seconds == 0
        }
        return [found[s] for s in sorted(found, reverse=True)]

    def tables(self) -> list[str]:
        """Every table the intervals name (rollups, then pre-aggregates), once each."""
        names = [i.table for i in self.intervals] + [
            i.pre_aggregation_table for i in self.intervals
        ]
        return list(dict.fromkeys(names))


def _bad(message: str) -> ConfigError:
    return ConfigError("tsd.rollups.config", message)


def _duration_units(text: str) -> str:
    digits = len(text) - len(text.lstrip("0123456789"))
    units = text[digits:].lower()
    if units not in _UNITS:
        raise _bad(f"Invalid units in the duration: {units}")
    return units


def _duration_amount(text: str) -> int:
    if "." in text:
        raise _bad("Floating point intervals are not supported")
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    if not digits:
        raise _bad(f"Invalid duration (number): {text}")
    amount = int(digits)
    if amount <= 0:
        raise _bad(f"Zero or negative duration: {text}")
    return amount


def _interval(obj: Mapping[str, Any]) -> RollupInterval:
    table = obj.get("table") or ""
    pre_agg = obj.get("preAggregationTable") or ""
    interval = obj.get("interval") or ""
    row_span = obj.get("rowSpan") or ""
    if not row_span:
        raise _bad("Duration cannot be null or empty")
    units = _duration_units(row_span)
    if len(units) > 1:
        raise _bad("Milliseconds are not supported")
    multiplier = _duration_amount(row_span)
    if not table:
        raise _bad("The rollup table cannot be null or empty")
    if not pre_agg:
        raise _bad("The pre-aggregate rollup table cannot be null or empty")
    if units != "h" and multiplier > 1:
        raise _bad("Multipliers are only usable with the 'h' unit")
    if units == "h" and multiplier > 1 and multiplier % 2:
        raise _bad("The multiplier must be 1 or an even value")
    try:
        seconds = parse_duration(interval) // 1000
    except BadRequestError as exc:
        raise _bad(exc.message) from None
    if units not in _SPAN_SECONDS:
        raise _bad(f"Unrecogznied span '{units}'")
    span_seconds = _SPAN_SECONDS[units] * multiplier
    if seconds >= span_seconds:
        raise _bad(f"Interval [{seconds}] is too large for the span [{units}]")
    if seconds <= 0:
        raise _bad("Milliseconds are not supported as the interval")
    count = span_seconds // seconds
    if count > MAX_INTERVALS:
        raise _bad(
            f"Too many intervals [{count}] in the span. Must be smaller than "
            f"[{MAX_INTERVALS}] to fit in 14 bits"
        )
    if count < MIN_INTERVALS:
        raise _bad(
            f"Not enough intervals [{count}] for the span. Must be at least [{MIN_INTERVALS}]"
        )
    return RollupInterval(
        table,
        pre_agg,
        interval,
        row_span,
        bool(obj.get("defaultInterval", False)),
        RollupSpan(units, multiplier, seconds),
    )


def parse_rollup_config(text: str | bytes) -> RollupConfig:
    """The JSON of ``tsd.rollups.config`` (or of the file it names), validated."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"tsd.rollups.config is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise _bad("tsd.rollups.config must be a JSON object")
    raw_intervals = document.get("intervals") or []
    raw_ids = document.get("aggregationIds") or {}
    if not raw_intervals:
        raise _bad("Rollup config given but no intervals were found.")
    if not raw_ids:
        raise _bad("Rollup config given but no aggegation ID mappings found.")
    intervals: list[RollupInterval] = []
    defaults = 0
    for obj in raw_intervals:
        interval = _interval(obj if isinstance(obj, dict) else {})
        if any(i.interval == interval.interval for i in intervals):
            raise _bad(f"Only one interval of each type can be configured: {interval}")
        if interval.default_interval:
            defaults += 1
            if defaults > 1:
                raise _bad(
                    f"Multiple default intervals configured. Only one is allowed: {interval}"
                )
        intervals.append(interval)
    ids: dict[str, int] = {}
    for name, value in raw_ids.items():
        if not isinstance(value, int) or not 0 <= value <= 127:
            raise _bad(f"ID for aggregator must be between 0 and 127: {name}={value}")
        if value in ids.values():
            raise _bad(f"Multiple mappings for the ID '{value}' are not allowed.")
        if name.lower() not in AGGREGATOR_NAMES:
            raise _bad(f"No such aggregator found for {name.lower()}")
        ids[name.lower()] = value
    if not defaults:
        raise _bad('None of the rollup intervals were marked as the "default".')
    return RollupConfig(tuple(intervals), ids)


def rollup_config_source(value: str) -> tuple[str, str | None]:
    """TSDB's reading of ``tsd.rollups.config``: (the JSON, or the path of the file to
    read when the value ends with ``.json``). Rollups enabled without it:
    "Rollups were enabled but 'tsd.rollups.config' is null or empty."."""
    if not value:
        raise _bad("Rollups were enabled but 'tsd.rollups.config' is null or empty.")
    if value.endswith(".json"):
        return "", value
    return value, None


def default_rollup_config(data_table: str) -> RollupConfig:
    """The configuration tsd computes rollups with when ``tsd.rollups.config`` is not given
    (docs/rollups.md): the raw data as the default interval, and hourly sum, count, min
    and max in ``tsdb-rollup-1h`` for panels of weeks to years, in rows of a month (768
    intervals: a year of a series is 12 rows, read in a few milliseconds). Its ids are
    those of OpenTSDB's documented example."""
    return parse_rollup_config(
        orjson.dumps(
            {
                "aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
                "intervals": [
                    {
                        "table": data_table,
                        "preAggregationTable": f"{data_table}-preagg",
                        "interval": "1m",
                        "rowSpan": "1h",
                        "defaultInterval": True,
                    },
                    {
                        "table": f"{data_table}-rollup-1h",
                        "preAggregationTable": f"{data_table}-rollup-agg-1h",
                        "interval": "1h",
                        "rowSpan": "1n",
                    },
                ],
            }
        )
    )
