"""Scan planning: a sub-query with resolved UIDs -> the storage scans to run. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.5-3.6; OpenTSDB 2.4.1
src/core/TsdbQuery.java configureFromQuery / findGroupBys / getScanStartTimeSeconds /
getScanEndTimeSeconds / getScanner, src/query/QueryUtil.java getRowKeyUIDRegex /
getRowKeyTSUIDRegex, src/query/filter/TagVLiteralOrFilter.java resolveTagkName):

* Names: the metric and every filter's tag key must resolve (an unknown one fails the query
  with ``No such name for 'metrics': 'x'`` / ``'tagk'``). The values of case-sensitive
  ``literal_or`` filters with at most ``tsd.query.filter.expansion_limit`` values are
  resolved too, so they can go into the row key filter; an unknown one fails the query
  unless ``tsd.query.skip_unresolved_tagvs``, which just leaves it out. The engine does the
  (async) lookups; :func:`literal_names` says which values to look up.
* Rows: one range per salt bucket, ``[salt][metric][scan start]`` to
  ``[salt][metric][scan end]``, the window widened to whole hours (and first to whole
  downsample intervals) by :mod:`tsd.codec.rowkey`.
* Row filter: OpenTSDB's key regex, for each filtered tag key in UID order, "some tag pairs,
  this key, one of these values (or any value), some tag pairs" (no gaps with
  ``explicitTags``). The literal values of one key are those of its literal filters, unless
  the running count of literal values passes the expansion limit. Filters that need names
  (wildcards, regexps, case-insensitive and negative literals) are checked after the scan
  on resolved names; tsd checks every filter there, so the key filter is only a pre-filter.

tsd deviations: ``not_key`` (unregistered in 2.4.1) is left out of the key regex, which
only asks for keys a series must have. Two literal filters on one key are ANDed as their
documentation says (OpenTSDB pushes the union of their values and skips the post-scan
check, so it answers the union).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tsd.codec import KeyLayout, scan_end_time_s, scan_start_time_s
from tsd.codec.const import FAMILY
from tsd.codec.rowkey import salt_bytes
from tsd.errors import BadRequestError
from tsd.query_spec import DownsampleSpec, Filter, SubQuery, split_literals
from tsd.storage.base import RowFilter, ScanSpec

__all__ = [
    "ResolvedFilter",
    "ScanPlan",
    "TagCondition",
    "literal_names",
    "plan_metric_scan",
    "plan_tsuid_scan",
    "row_key_regex",
    "scan_window_s",
    "tsuid_regex",
]

#: Rows per storage round trip (tsd.storage.hbase.scanner.maxNumRows is 128 for HBase;
#: the embedded store gains from bigger batches).
SCAN_BATCH_ROWS = 1024


@dataclass(frozen=True, slots=True)
class ResolvedFilter:
    """A filter with its tag key UID and, for pushed-down literals, its value UIDs.

    ``tagk_uid`` is None only for a ``not_key`` filter whose key has no UID (no series can
    carry it). ``tagv_uids`` is None when the filter is not a literal that can be pushed
    down; an empty tuple means none of its values exist.
    """

    filter: Filter
    tagk_uid: bytes | None
    tagv_uids: tuple[bytes, ...] | None = None


@dataclass(frozen=True, slots=True)
class TagCondition:
    """One tag key the row key must carry, with the allowed value UIDs (None: any)."""

    tagk_uid: bytes
    tagv_uids: tuple[bytes, ...] | None


def matches_nothing(conditions: Sequence[TagCondition]) -> bool:
    """True when a literal filter has no existing value (the sub-query has no series)."""
    return any(c.tagv_uids == () for c in conditions)


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """The scans of one sub-query and what the engine needs to finish it.

    ``start_s`` / ``end_s`` are the scan window (end exclusive); ``group_by`` the tag key
    UIDs to group on, sorted by UID (OpenTSDB's group order).
    """

    metric_uid: bytes
    scans: tuple[ScanSpec, ...]
    start_s: int
    end_s: int
    group_by: tuple[bytes, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when no row can match (nothing to scan)."""
        return not self.scans


def literal_names(f: Filter, expansion_limit: int) -> frozenset[str] | None:
    """The values of ``f`` to resolve for the row key filter, or None when it has none:
    case-sensitive ``literal_or`` filters within the expansion limit only."""
    if f.type != "literal_or" or f.ignore_case:
        return None
    values = split_literals(f.filter, False)
    return values if len(values) <= expansion_limit else None


def scan_window_s(start_ms: int, end_ms: int, downsample: DownsampleSpec | None) -> tuple[int, int]:
    """(scan start, exclusive scan end) in seconds, as TsdbQuery computes them."""
    interval_ms = downsample.interval_ms if downsample is not None else 0
    return scan_start_time_s(start_ms, interval_ms), scan_end_time_s(end_ms, interval_ms)


def tag_conditions(filters: Sequence[ResolvedFilter], expansion_limit: int) -> list[TagCondition]:
    """Per filtered tag key (in UID order): the values the row key may carry there."""
    by_key: dict[bytes, list[ResolvedFilter]] = {}
    for resolved in filters:
        if resolved.filter.type == "not_key" or resolved.tagk_uid is None:
            continue
        by_key.setdefault(resolved.tagk_uid, []).append(resolved)
    conditions: list[TagCondition] = []
    pushed = 0
    for tagk_uid in sorted(by_key):
        literal_sets = [set(r.tagv_uids) for r in by_key[tagk_uid] if r.tagv_uids is not None]
        values: tuple[bytes, ...] | None = None
        if literal_sets:
            allowed = set.intersection(*literal_sets)
            if pushed + len(allowed) <= expansion_limit and allowed:
                values = tuple(sorted(allowed))
                pushed += len(values)
            elif not allowed:
                values = ()
        conditions.append(TagCondition(tagk_uid, values))
    return conditions


def row_key_regex(
    layout: KeyLayout, conditions: Sequence[TagCondition], explicit_tags: bool
) -> bytes:
    """QueryUtil.getRowKeyUIDRegex as a bytes regex (fullmatch, DOTALL semantics)."""
    pair = layout.tag_pair_width
    gap = b"(?:.{%d})*" % pair
    parts = [b".{%d}" % layout.tags_start]
    for cond in conditions:
        if not explicit_tags:
            parts.append(gap)
        parts.append(re.escape(cond.tagk_uid))
        if cond.tagv_uids is None:
            parts.append(b".{%d}" % layout.tagv_width)
        elif not cond.tagv_uids:
            parts.append(b"(?!)")  # no value of this key exists: nothing can match
        else:
            parts.append(b"(?:" + b"|".join(re.escape(v) for v in cond.tagv_uids) + b")")
    if not explicit_tags:
        parts.append(gap)
    return b"".join(parts)


def tsuid_regex(layout: KeyLayout, tsuids: Sequence[bytes]) -> bytes:
    """QueryUtil.getRowKeyTSUIDRegex: any of the TSUIDs' tag parts after salt, metric, time."""
    tags = sorted({t[layout.metric_width :] for t in tsuids})
    return b".{%d}(?:%s)" % (layout.tags_start, b"|".join(re.escape(t) for t in tags))


def _scans(
    layout: KeyLayout, metric_uid: bytes, start_s: int, end_s: int, regex: bytes | None
) -> tuple[ScanSpec, ...]:
    row_filter = RowFilter(regex) if regex is not None else None
    buckets: Sequence[int | None] = range(layout.salt_buckets) if layout.salt_width else (None,)
    scans = []
    for bucket in buckets:
        prefix = (salt_bytes(layout, bucket) if bucket is not None else b"") + metric_uid
        scans.append(
            ScanSpec(
                start=prefix + (start_s & 0xFFFFFFFF).to_bytes(4, "big"),
                stop=prefix + (end_s & 0xFFFFFFFF).to_bytes(4, "big"),
                families=(FAMILY,),
                row_filter=row_filter,
                batch_rows=SCAN_BATCH_ROWS,
            )
        )
    return tuple(scans)


def plan_metric_scan(
    layout: KeyLayout,
    metric_uid: bytes,
    filters: Sequence[ResolvedFilter],
    *,
    explicit_tags: bool,
    start_s: int,
    end_s: int,
    expansion_limit: int,
) -> ScanPlan:
    """The scans of a metric sub-query whose names are resolved."""
    conditions = tag_conditions(filters, expansion_limit)
    regex = row_key_regex(layout, conditions, explicit_tags) if conditions else None
    group_by = sorted(
        r.tagk_uid
        for r in filters
        if r.filter.group_by and r.tagk_uid is not None and r.filter.type != "not_key"
    )
    scans = () if matches_nothing(conditions) else _scans(layout, metric_uid, start_s, end_s, regex)
    return ScanPlan(metric_uid, scans, start_s, end_s, tuple(dict.fromkeys(group_by)))


def parse_tsuids(layout: KeyLayout, tsuids: Sequence[str]) -> list[bytes]:
    """The sub-query's TSUIDs as bytes; all must share one metric (TsdbQuery's rule)."""
    width = layout.metric_width * 2
    first = tsuids[0][:width].upper()
    for tsuid in tsuids[1:]:
        metric = tsuid[:width].upper()
        if metric != first:
            raise BadRequestError(
                f"One or more TSUIDs did not share the same metric [{first}] [{metric}]"
            )
    out = []
    pair = layout.tag_pair_width * 2
    for tsuid in tsuids:
        if len(tsuid) <= width or (len(tsuid) - width) % pair:
            raise BadRequestError(f"Invalid TSUID: {tsuid}")
        try:
            out.append(bytes.fromhex(tsuid))
        except ValueError:
            raise BadRequestError(f"Invalid TSUID: {tsuid}") from None
    return out


def plan_tsuid_scan(layout: KeyLayout, sub: SubQuery, *, start_s: int, end_s: int) -> ScanPlan:
    """The scans of a ``tsuids`` sub-query: its metric's rows whose tags are one of them."""
    tsuids = parse_tsuids(layout, sub.tsuids)
    metric_uid = tsuids[0][: layout.metric_width]
    regex = tsuid_regex(layout, tsuids)
    return ScanPlan(metric_uid, _scans(layout, metric_uid, start_s, end_s, regex), start_s, end_s)


def group_key(
    layout: KeyLayout, tags: Mapping[bytes, bytes], group_by: Sequence[bytes]
) -> bytes | None:
    """The group of a series: its value UIDs of the group-by keys (None: drop it)."""
    values = []
    for tagk in group_by:
        tagv = tags.get(tagk)
        if tagv is None:
            return None
        values.append(tagv)
    return b"".join(values)
