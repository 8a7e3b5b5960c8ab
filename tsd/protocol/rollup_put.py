"""Rollup and pre-aggregate points: the telnet ``rollup`` line, the /api/rollup body, and
the checks OpenTSDB 2.4.1 makes before it stores one (``src/tsd/RollupDataPointRpc.java``,
``src/rollup/RollUpDataPoint.java`` validate, ``src/core/TSDB.java``
addAggregatePoint/addAggregatePointInternal). Pure: the writer resolves UIDs and stores.

A point is a rollup of raw data (an ``interval`` and an ``aggregator``), a pre-aggregate (a
``groupByAggregator``: the tag ``tsd.rollups.agg_tag_key`` takes its upper-cased name), or a
rollup of pre-aggregates (both). Where it goes:

* interval given: the interval's ``table``, or its ``preAggregationTable`` for a group-by
  point; row key base time and 3-byte qualifier of :mod:`tsd.codec.rollup`;
* no interval (a pre-aggregate): the default interval's ``preAggregationTable``, with the
  row key and qualifier of a data point.

Values: an integer on the fewest bytes; a float as OpenTSDB's RPCs pass it. The telnet
command passes ``Float.parseFloat`` when the double fits a float (4 bytes) and the double
otherwise (8 bytes); /api/rollup writes ``fits ? Float.parseFloat(v) : Double.parseDouble(v)``,
a Java conditional whose type is ``double``: every float it stores takes 8 bytes.

Errors carry OpenTSDB's class (:class:`RollupError` ``kind``) and message; the adapters word
them (telnet ``rollup: <kind text>: <message>``, /api/rollup details).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tsd.codec.const import SECOND_MASK
from tsd.codec.qualifier import build_qualifier
from tsd.codec.rollup import rollup_base_time, rollup_qualifier, rollup_value_bytes
from tsd.codec.value import parse_value
from tsd.errors import BadRequestError, IllegalValueError, NumberFormatError
from tsd.java_text import format_java_bytes, java_split
from tsd.protocol.names import NameRules, check_metric_and_tags, format_java_map, parse_tag
from tsd.protocol.rollup_config import RollupConfig, RollupInterval
from tsd.protocol.telnet_words import metric_and_timestamp
from tsd.query_spec import AGGREGATOR_NAMES

__all__ = [
    "ILLEGAL_ARGUMENT",
    "INVALID_VALUE",
    "NO_SUCH_ROLLUP",
    "STORAGE",
    "UNEXPECTED",
    "UNKNOWN_METRIC",
    "PreparedRollup",
    "RollupError",
    "RollupPoint",
    "RollupRules",
    "parse_rollup_line",
    "prepare_rollup",
]

#: OpenTSDB's exception classes, as the adapters word them
ILLEGAL_ARGUMENT: Final = "illegal argument"  # IllegalArgumentException
INVALID_VALUE: Final = "invalid value"  # NumberFormatException
NO_SUCH_ROLLUP: Final = "No such rollup"  # NoSuchRollupForIntervalException
STORAGE: Final = "storage"  # thrown inside the write callback: reported as a storage error
UNKNOWN_METRIC: Final = "unknown metric"  # NoSuchUniqueName (auto-create off)
UNEXPECTED: Final = "Unexpected runtime exception"  # any other RuntimeException


class RollupError(BadRequestError):
    """A rollup point OpenTSDB refuses: ``kind`` is its exception class, ``message`` its
    text."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        #: the point's tags when OpenTSDB had changed them (the aggregate tag added) before
        #: it failed: /api/rollup's echo shows them so
        self.tags: dict[str, str] | None = None


def _illegal(message: str) -> RollupError:
    return RollupError(ILLEGAL_ARGUMENT, message)


@dataclass(frozen=True, slots=True)
class RollupRules:
    """What the checks depend on: ``tsd.rollups.*`` and the parsed rollup config (None when
    rollups are not enabled)."""

    config: RollupConfig | None
    agg_tag_key: str = "_aggregate"
    raw_agg_tag_value: str = "RAW"
    tag_raw: bool = False
    block_derived: bool = True
    names: NameRules | None = None


@dataclass(frozen=True, slots=True)
class RollupPoint:
    """A rollup point as given (validated for presence, not yet for meaning)."""

    metric: str
    timestamp: int
    value: str
    #: in the order given (OpenTSDB's messages print them in HashMap order)
    tags: Mapping[str, str]
    interval: str | None
    aggregator: str | None
    groupby: str | None
    #: the telnet command stores a float on 4 bytes when it fits; /api/rollup never does
    float32: bool


@dataclass(frozen=True, slots=True)
class PreparedRollup:
    """A checked point: where it goes and its cell, less the row key's UIDs."""

    table: str
    metric: str
    #: the tags of the stored series (the aggregate tag included when it applies)
    tags: tuple[tuple[str, str], ...]
    base_time: int
    qualifier: bytes
    value: bytes


# --- telnet ----------------------------------------------------------------------------------


def parse_rollup_line(words: list[str]) -> RollupPoint:
    """RollupDataPointRpc.importDataPoint over the split words (``words[0]`` is ``rollup``):
    ``rollup <interval>-<agg>[:<groupby agg>] <metric> <timestamp> <value> <tagk=tagv>...``,
    or ``rollup <groupby agg> ...`` for a pre-aggregate. Raises RollupError, or
    PutLineError (already worded) for the metric and timestamp words."""
    if len(words) < 6:
        raise _illegal(f"not enough arguments (need least 7, got {len(words) - 1})")
    interval_agg = words[1]
    if not interval_agg:
        raise _illegal("Missing interval or aggregator")
    interval, temporal, spatial = split_interval_agg(interval_agg)
    metric, timestamp = metric_and_timestamp(words[2], words[3], "rollup")
    value = words[4]
    if not value:
        raise _illegal("empty value")
    tags: dict[str, str] = {}
    try:
        for word in words[5:]:
            if word:
                parse_tag(tags, word)
    except BadRequestError as exc:
        raise _illegal(exc.message) from None
    if spatial is not None and temporal is None:
        temporal = spatial
    return RollupPoint(metric, timestamp, value, tags, interval, temporal, spatial, True)


def split_interval_agg(text: str) -> tuple[str | None, str | None, str | None]:
    """``1h-sum:count`` -> (interval, rollup aggregator, group-by aggregator), as
    RollupDataPointRpc splits it (Java's split drops trailing empty parts)."""
    parts = java_split(text, ":")
    if not parts:  # ":" alone: Java's split gives no parts and OpenTSDB indexes the first
        raise RollupError(UNEXPECTED, "Index 0 out of bounds for length 0")
    interval = temporal = spatial = None
    dash = parts[0].find("-")
    if dash > -1:
        interval, temporal = parts[0][:dash], parts[0][dash + 1 :]
    elif len(parts) == 1:
        spatial = parts[0]
    if len(parts) > 1:
        spatial = parts[1]
    return interval, temporal, spatial


# --- checks and encoding ---------------------------------------------------------------------


def encode_rollup_value(point: RollupPoint) -> tuple[int, bytes]:
    """The value's flags and bytes as the RPC hands them to addAggregatePoint; raises
    RollupError (INVALID_VALUE for text that is no number, ILLEGAL_ARGUMENT for NaN or
    infinite values)."""
    try:
        value = parse_value(point.value, metric=point.metric, timestamp=point.timestamp)
    except NumberFormatError as exc:
        raise RollupError(INVALID_VALUE, exc.message) from None
    except IllegalValueError as exc:
        raise _illegal(exc.message) from None
    return rollup_value_bytes(value, float32=point.float32)


def prepare_rollup(point: RollupPoint, rules: RollupRules, *, groupby: bool) -> PreparedRollup:
    """TSDB.addAggregatePointInternal up to the row key's UIDs: the checks, in OpenTSDB's
    order, then the table, base time, qualifier and value. ``groupby`` is the RPC's
    is_groupby (telnet: a group-by aggregator was given; HTTP: the field is not null)."""
    flags, value = encode_rollup_value(point)
    metric, timestamp, interval = point.metric, point.timestamp, point.interval
    config = rules.config
    tags = dict(point.tags)
    if interval and config is None:
        raise _illegal("No rollup or aggregations were configured")
    groupby_agg = point.groupby
    if groupby and not groupby_agg:
        raise _illegal(
            "Cannot write a group by data point without specifying the aggregation "
            f"function. Metric={metric} tags={format_java_map(tags)}"
        )
    if timestamp < 0 or timestamp & SECOND_MASK:
        kind = "negative " if timestamp < 0 else "bad"
        raise _illegal(
            f"{kind} timestamp={timestamp} when trying to add value="
            f"{format_java_bytes(value)}/{flags} to metric={metric}, "
            f"tags={format_java_map(tags)}"
        )
    key = rules.agg_tag_key
    agg_tag_value = tags.get(key)
    if agg_tag_value is None:
        if not groupby:
            if rules.tag_raw:
                tags[key] = rules.raw_agg_tag_value
            agg_tag_value = rules.raw_agg_tag_value
        else:
            assert groupby_agg
            agg_tag_value = groupby_agg.upper()
            tags[key] = agg_tag_value
    else:
        if groupby_agg is None or agg_tag_value.lower() != groupby_agg.lower():
            raise _illegal(
                f"Given tag value for {key} of {agg_tag_value} did not match the group by "
                f"aggregator of {'null' if groupby_agg is None else groupby_agg} for {metric} "
                f"{format_java_map(tags)}"
            )
        agg_tag_value = groupby_agg.upper()
        tags[key] = agg_tag_value
    try:
        return _place(point, rules, tags, agg_tag_value, flags, value, groupby=groupby)
    except RollupError as exc:
        exc.tags = tags
        raise


def _place(
    point: RollupPoint,
    rules: RollupRules,
    tags: dict[str, str],
    agg_tag_value: str,
    flags: int,
    value: bytes,
    *,
    groupby: bool,
) -> PreparedRollup:
    """addAggregatePointInternal from the group-by checks on (the tags hold the aggregate
    tag by then)."""
    metric, timestamp, interval = point.metric, point.timestamp, point.interval
    groupby_agg, config = point.groupby, rules.config
    if groupby:
        assert groupby_agg
        if groupby_agg.lower() not in AGGREGATOR_NAMES:
            raise _illegal(
                f"Invalid group by aggregator {groupby_agg} with metric {metric} "
                f"{format_java_map(tags)}"
            )
        if rules.block_derived and agg_tag_value in ("AVG", "DEV"):
            raise _illegal(
                f"Derived group by aggregations are not allowed {groupby_agg} with metric "
                f"{metric} {format_java_map(tags)}"
            )
    try:
        if rules.names is None:
            check_metric_and_tags(metric, tags)
        else:
            check_metric_and_tags(metric, tags, rules.names)
    except BadRequestError as exc:
        raise _illegal(exc.message) from None
    rollup: RollupInterval | None = None
    aggregator_id = -1
    if interval:
        assert config is not None
        rollup = config.find(interval)
        if rollup is None:
            raise RollupError(NO_SUCH_ROLLUP, f"No rollups configured for the interval: {interval}")
        try:
            aggregator_id = config.id_for(point.aggregator)
        except BadRequestError as exc:
            raise _illegal(exc.message) from None
    rollup_agg = point.aggregator.upper() if point.aggregator is not None else None
    if rules.block_derived and rollup_agg in ("AVG", "DEV"):
        raise _illegal(
            f"Derived rollup aggregations are not allowed {rollup_agg} with metric {metric} "
            f"{format_java_map(tags)}"
        )
    pairs = tuple(sorted(tags.items()))
    if rollup is None:
        if not groupby:
            raise RollupError(STORAGE, "Interval cannot be null for a non-group by point")
        if config is None:
            # OpenTSDB dereferences its missing default interval: a NullPointerException,
            # reported as a storage failure without a message.
            raise RollupError(STORAGE, "null")
        base = timestamp - timestamp % 3600
        return PreparedRollup(
            config.default.pre_aggregation_table,
            metric,
            pairs,
            base,
            build_qualifier(timestamp, flags),
            value,
        )
    base = rollup_base_time(timestamp, rollup.span)
    qualifier = rollup_qualifier(timestamp, base, flags, aggregator_id, rollup.span)
    table = rollup.pre_aggregation_table if groupby else rollup.table
    return PreparedRollup(table, metric, pairs, base, qualifier, value)
