"""Series lookup (``/api/search/lookup``): which series have a metric, tag keys or values.

OpenTSDB 2.4.1 (``src/search/TimeSeriesLookup.java``, ``src/tsd/SearchRpc.java``; behaviour
doc §1.7) scans the meta table, whose row keys are TSUIDs, from the metric's UID to the next
one, with a row-key regex built from the tag pairs:

* different tag keys are ANDed, values of one key ORed (``host=a,host=b``);
* a key with ``*`` (or no value, ``host=``) matches any value and overrides pairs of that key;
* a value without a key (``*=web01``, ``=web01``) matches that value under any key; several
  such values are ORed;
* no metric (``{host=web01}``, or ``*``): the whole meta table is scanned.

``limit`` counts matching series; 0 or less means no limit. OpenTSDB's POST form can ask for
``useMeta: false``, which makes it scan the *data* table (every row of the metric, a TSUID per
hour); tsd always answers from the series index, so the two forms agree and no lookup reads
the data table. The index is the meta table: with meta tracking on it holds OpenTSDB's own
rows; with it off tsd still writes one small cell per new series (see
:mod:`tsd.meta.tracking`), so lookups (and Grafana's template variables) work either way.
Names that do not resolve -> 404 "Unable to resolve one or more UIDs".
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from tsd.codec import KeyLayout, split_tsuid
from tsd.codec.const import TSMETA_FAMILY
from tsd.errors import BadRequestError, NoSuchUniqueId, NoSuchUniqueName
from tsd.protocol.m_syntax import split_string
from tsd.protocol.names import java_hash_order
from tsd.storage.base import RowFilter, ScanSpec, Storage
from tsd.uid.service import UidService

#: SearchQuery's default limit.
DEFAULT_LIMIT = 25

TagPair = tuple[str | None, str | None]


@dataclass(frozen=True, slots=True)
class LookupQuery:
    """A parsed lookup: ``metric`` None or ``*`` for any; tag keys/values None or ``*``
    for any."""

    metric: str | None
    tags: tuple[TagPair, ...] = ()
    limit: int = DEFAULT_LIMIT
    start_index: int = 0
    use_meta: bool = True


# -- parsing ----------------------------------------------------------------------------------


def parse_lookup_m(text: str) -> tuple[str | None, list[TagPair]]:
    """Tags.parseWithMetric(String, List<Pair>): ``metric{k=v,=v,k=}`` -> metric, pairs.

    The metric is None for ``{k=v}``. Raises BadRequestError("Unable to parse query").
    """
    try:
        return _parse_with_metric(text)
    except ValueError as exc:
        raise BadRequestError("Unable to parse query", str(exc)) from None


def _parse_with_metric(text: str) -> tuple[str | None, list[TagPair]]:
    curly = text.find("{")
    if curly < 0:
        if not text:
            raise ValueError("Metric string was empty")
        return text, []
    if not text.endswith("}"):
        raise ValueError(f"Missing '}}' at the end of: {text}")
    if curly == len(text) - 2:
        if text[0] == "{":
            raise ValueError(f"Missing metric and tags: {text}")
        return text[:-2], []
    pairs: list[TagPair] = []
    for tag in split_string(text[curly + 1 : -1], ","):
        try:
            pairs.append(parse_tag_pair(tag))
        except ValueError as exc:
            raise ValueError(f"When parsing tag '{tag}': {exc}") from None
    return (None if text[0] == "{" else text[:curly]), pairs


def parse_tag_pair(tag: str) -> TagPair:
    """Tags.parse(List<Pair>, String)."""
    if len(tag) < 2:
        raise ValueError("Missing tag pair")
    if tag[0] == "=":
        return None, tag[1:]
    if tag[-1] == "=":
        return tag[:-1], None
    parts = split_string(tag, "=")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"invalid tag: {tag}")
    return parts[0], parts[1]


# -- matching ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResolvedLookup:
    """UIDs of a lookup: the metric (None: any), and per tag key the allowed values (None:
    any value), and values allowed under any key."""

    metric_uid: bytes | None
    keys: tuple[tuple[bytes, frozenset[bytes] | None], ...]
    any_key_values: frozenset[bytes]


def lookup_regex(layout: KeyLayout, resolved: ResolvedLookup) -> bytes | None:
    """A full-match regex over meta-table row keys (TSUIDs) for the tag conditions.

    Key conditions come in tagk UID order, as tags are sorted in a TSUID. Values without a
    key are checked by :func:`matches_any_key_values` (OpenTSDB does the same, in the TSD,
    when keys are present too). None when nothing needs filtering.
    """
    gap = b"(?:.{%d})*" % layout.tag_pair_width
    start = b".{%d}" % layout.metric_width
    if resolved.keys:
        parts = [start]
        for tagk, values in resolved.keys:
            parts.append(gap)
            if values is None:
                parts.append(re.escape(tagk) + b".{%d}" % layout.tagv_width)
            else:
                options = b"|".join(re.escape(tagk + v) for v in sorted(values))
                parts.append(b"(?:" + options + b")")
        parts.append(gap)
        return b"".join(parts)
    if resolved.any_key_values:
        options = b"|".join(re.escape(v) for v in sorted(resolved.any_key_values))
        return start + gap + b".{%d}(?:%s)" % (layout.tagk_width, options) + gap
    return None


def matches_any_key_values(layout: KeyLayout, tsuid: bytes, values: frozenset[bytes]) -> bool:
    """True when some tag of ``tsuid`` has one of ``values`` (always, if there are none)."""
    if not values:
        return True
    _, pairs = split_tsuid(layout, tsuid)
    return any(tagv in values for _, tagv in pairs)


# -- the lookup -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookupResult:
    """The TSUIDs found and the time taken (ms), for the search response."""

    tsuids: list[bytes]
    time_ms: float


class SeriesLookup:
    """Runs lookups against the meta table (the series index)."""

    def __init__(
        self,
        storage: Storage,
        meta_table: str,
        layout: KeyLayout,
        uids: UidService,
        before_read: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``before_read``: awaited before each scan (the tracker's flush, so a series the
        writer has just seen is in the index)."""
        self._storage = storage
        self._table = meta_table
        self._layout = layout
        self._uids = uids
        self._before_read = before_read

    async def resolve(self, query: LookupQuery) -> ResolvedLookup:
        """Names -> UIDs; NoSuchUniqueName for any that has none."""
        metric_uid = None
        if query.metric and query.metric != "*":
            metric_uid = await self._uids.metrics.get_id(query.metric)
        keys: dict[bytes, set[bytes] | None] = {}
        any_key: set[bytes] = set()
        for key, value in query.tags:
            tagk = None if key is None or key == "*" else await self._uids.tagk.get_id(key)
            tagv = None if value is None or value == "*" else await self._uids.tagv.get_id(value)
            if tagk is None:
                if tagv is not None:
                    any_key.add(tagv)
                continue  # "*=*" constrains nothing
            allowed = keys.get(tagk, set())
            if tagv is None or allowed is None:
                keys[tagk] = None  # a wildcard overrides pairs of the same key
            else:
                allowed.add(tagv)
                keys[tagk] = allowed
        return ResolvedLookup(
            metric_uid,
            tuple((k, None if v is None else frozenset(v)) for k, v in sorted(keys.items())),
            frozenset(any_key),
        )

    async def lookup(self, query: LookupQuery) -> LookupResult:
        """TimeSeriesLookup.lookupAsync over the meta table."""
        if query.metric is None and not query.tags:
            raise BadRequestError("Missing metric and tags. Please supply at least one value.")
        started = time.perf_counter()
        resolved = await self.resolve(query)
        if self._before_read is not None:
            await self._before_read()
        regex = lookup_regex(self._layout, resolved)
        spec = ScanSpec(
            start=resolved.metric_uid or b"",
            stop=_next_key(resolved.metric_uid) if resolved.metric_uid else b"",
            families=(TSMETA_FAMILY,),
            row_filter=RowFilter(regex) if regex is not None else None,
        )
        limit = query.limit if query.limit > 0 else 0
        tsuids: list[bytes] = []
        async with aclosing(self._storage.scan(self._table, spec)) as rows:
            async for row in rows:
                if limit and len(tsuids) >= limit:
                    break
                if not _is_tsuid(self._layout, row.key):
                    continue
                if resolved.keys and not matches_any_key_values(
                    self._layout, row.key, resolved.any_key_values
                ):
                    continue
                tsuids.append(row.key)
        return LookupResult(tsuids, (time.perf_counter() - started) * 1000)

    async def describe(self, tsuid: bytes) -> tuple[str, dict[str, str]]:
        """The metric name and tags of a TSUID (tags in Java HashMap order, as OpenTSDB's
        ``Tags.resolveIdsAsync`` returns them); NoSuchUniqueId when a UID has no name."""
        metric_uid, pairs = split_tsuid(self._layout, tsuid)
        metric = await self._uids.metrics.get_name(metric_uid)
        tags: dict[str, str] = {}
        for tagk, tagv in pairs:
            tags[await self._uids.tagk.get_name(tagk)] = await self._uids.tagv.get_name(tagv)
        return metric, {key: tags[key] for key in java_hash_order(tags)}


def _is_tsuid(layout: KeyLayout, key: bytes) -> bool:
    rest = len(key) - layout.metric_width
    return rest > 0 and rest % layout.tag_pair_width == 0


def _next_key(prefix: bytes) -> bytes:
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b""
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


async def lookup_response(
    lookup: SeriesLookup, query: LookupQuery, tags_echo: Sequence[TagPair] | None
) -> dict[str, object]:
    """The ``/api/search/lookup`` body (SearchQuery as Jackson writes it, nulls left out:
    ``tags_echo`` None leaves ``tags`` out, as a POST without tags does)."""
    try:
        found = await lookup.lookup(query)
    except NoSuchUniqueName as exc:
        raise BadRequestError("Unable to resolve one or more UIDs", exc.message, 404) from None
    results = []
    try:
        for tsuid in found.tsuids:
            metric, tags = await lookup.describe(tsuid)
            results.append({"tsuid": tsuid.hex().upper(), "metric": metric, "tags": tags})
    except NoSuchUniqueId as exc:
        raise BadRequestError("Unable to resolve one or more TSUIDs", exc.message, 404) from None
    body: dict[str, object] = {"type": "LOOKUP"}
    if query.metric is not None:
        body["metric"] = query.metric
    if tags_echo is not None:
        body["tags"] = [{"key": k, "value": v} for k, v in tags_echo]
    body["limit"] = query.limit
    body["time"] = float(round(found.time_ms))
    body["results"] = results
    body["startIndex"] = query.start_index
    body["totalResults"] = len(results)
    return body
