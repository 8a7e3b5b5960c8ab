"""/api/query/last: its requests, and the read of each series' last point.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §1.3; OpenTSDB 2.4.1
src/tsd/QueryRpc.java handleLastDataPointQuery / parseLastPointQuery / LastPointSubQuery,
src/meta/TSUIDQuery.java getLastPoint, src/core/Internal.java GetLastDataPointCB):

* GET: ``timeseries=metric{k=v,...}`` and ``tsuids=hex,hex`` (both repeatable), ``resolve``
  (presence), ``back_scan=<hours>``. POST: ``{"queries":[{"metric","tags"} | {"tsuids"}],
  "resolveNames":bool, "backScan":int}``. No sub-query -> 400 "Missing sub queries".
* A series' last point is the last point of its newest row holding data, looking back
  from the current hour one hour at a time, ``backScan`` hours at most. The answer's
  value is a string (Java's ``Long.toString`` / ``Double.toString``), its timestamp in ms.
* OpenTSDB answers a metric+tags query with ``backScan`` 0 from the meta table only
  (``[]`` without ``tsd.core.meta.enable_tsuid_tracking``, a top complaint). tsd has no
  meta table to read: with ``backScan`` 0 it scans the data table over the last
  :data:`DEFAULT_BACK_SCAN_HOURS` hours and answers every series of the metric carrying
  the given tags (the meta lookup's semantics); with ``backScan`` > 0 the tags name one
  series exactly, as in OpenTSDB. TSUID queries look up their series with ``backScan`` 0
  meaning the default window too.

:class:`LastPointReader` reads the rows (storage's with the head's, reader.py's
:func:`~tsd.query.reader.with_head`); the engine runs it within ``tsd.query.timeout``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tsd.codec import KeyLayout, encode_tags, salt_bucket
from tsd.codec.const import FAMILY, MAX_TIMESPAN
from tsd.codec.rowkey import salt_bytes
from tsd.errors import BadRequestError
from tsd.head import Head
from tsd.java_text import java_double_to_string
from tsd.query.compute import ComputeSlots
from tsd.query.decode import decode_rows, series_key
from tsd.query.output import LastPoint
from tsd.query.plan import SCAN_BATCH_ROWS, TagCondition, parse_tsuids, row_key_regex
from tsd.query.reader import with_head
from tsd.query.results import has_data
from tsd.storage.base import Row, RowFilter, ScanSpec, Storage
from tsd.uid.service import UidService

__all__ = [
    "DEFAULT_BACK_SCAN_HOURS",
    "LastPointQuery",
    "LastPointReader",
    "LastPointSubQuery",
    "format_last_value",
    "parse_last_query_json",
    "parse_last_query_params",
]

#: Hours looked back when the request gives no ``backScan`` (OpenTSDB would need meta).
DEFAULT_BACK_SCAN_HOURS = 24
#: More hours than this is refused: each one is a read per series.
MAX_BACK_SCAN_HOURS = 24 * 366


@dataclass(frozen=True, slots=True)
class LastPointSubQuery:
    """A metric with tags, or TSUIDs (which win when both are given)."""

    metric: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    tsuids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LastPointQuery:
    queries: tuple[LastPointSubQuery, ...]
    resolve_names: bool = False
    back_scan: int = 0

    @property
    def hours(self) -> int:
        """Hours to look back before the current one."""
        return self.back_scan if self.back_scan > 0 else DEFAULT_BACK_SCAN_HOURS

    @property
    def exact_tags(self) -> bool:
        """Metric+tags name one series exactly (OpenTSDB's backScan > 0 path)."""
        return self.back_scan > 0


def _check(query: LastPointQuery) -> LastPointQuery:
    if not query.queries:
        raise BadRequestError("Missing sub queries")
    if query.back_scan < 0:
        raise BadRequestError("Backscan must be zero or a positive number")
    if query.back_scan > MAX_BACK_SCAN_HOURS:
        raise BadRequestError(f"Backscan must be at most {MAX_BACK_SCAN_HOURS} hours")
    return query


def parse_timeseries(text: str) -> LastPointSubQuery:
    """``metric{k=v,...}`` (Tags.parseWithMetric; exact values only)."""
    brace = text.find("{")
    if brace < 0:
        return LastPointSubQuery(metric=text)
    if not text.endswith("}"):
        raise BadRequestError(f"Missing '}}' at the end of: {text}")
    metric = text[:brace]
    tags: dict[str, str] = {}
    body = text[brace + 1 : -1]
    for item in body.split(",") if body else []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value or "=" in value:
            raise BadRequestError(f"invalid tag: {item}")
        if tags.get(key, value) != value:
            raise BadRequestError(f"duplicate tag: {item}, tags={tags}")
        tags[key] = value
    return LastPointSubQuery(metric=metric, tags=tags)


def parse_last_query_params(params: Mapping[str, Sequence[str]]) -> LastPointQuery:
    """GET /api/query/last parameters (each name -> all its values)."""
    back_scan = 0
    if "back_scan" in params:
        text = params["back_scan"][-1]
        try:
            back_scan = int(text.strip())
        except ValueError:
            raise BadRequestError("Unable to parse back_scan parameter") from None
    subs = [parse_timeseries(q) for q in params.get("timeseries", ())]
    for tsuids in params.get("tsuids", ()):
        subs.append(LastPointSubQuery(tsuids=tuple(t for t in tsuids.split(",") if t)))
    return _check(LastPointQuery(tuple(subs), "resolve" in params, back_scan))


def parse_last_query_json(body: bytes | str) -> LastPointQuery:
    """A POST /api/query/last body."""
    if not body or not body.strip():
        raise BadRequestError(
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError("Unable to parse the given JSON", str(exc)) from None
    if not isinstance(document, dict):
        raise BadRequestError("Unable to parse the given JSON", "expected an object")
    subs = [_sub_from_json(item) for item in document.get("queries") or ()]
    return _check(
        LastPointQuery(
            tuple(subs),
            _as_bool(document.get("resolveNames")),
            _as_int(document.get("backScan")),
        )
    )


def _sub_from_json(item: Any) -> LastPointSubQuery:
    if not isinstance(item, dict):
        raise BadRequestError("Unable to parse the given JSON", "a sub query must be an object")
    tags = item.get("tags") or {}
    tsuids = item.get("tsuids") or ()
    if not isinstance(tags, dict) or not isinstance(tsuids, list | tuple):
        raise BadRequestError("Unable to parse the given JSON", "bad tags or tsuids")
    return LastPointSubQuery(
        metric=str(item.get("metric") or ""),
        tags={str(k): str(v) for k, v in tags.items()},
        tsuids=tuple(str(t) for t in tsuids),
    )


def _as_bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _as_int(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise BadRequestError("Unable to parse the given JSON", "backScan must be an integer")


def format_last_value(value: int | float) -> str:
    """The value as OpenTSDB's last-point answer writes it (a string)."""
    return str(value) if isinstance(value, int) else java_double_to_string(value)


class LastPointReader:
    """Finds the last data point of each series a /api/query/last request names."""

    def __init__(
        self,
        storage: Storage,
        head: Head | None,
        uids: UidService,
        layout: KeyLayout,
        table: str,
        fix_duplicates: bool,
        compute: ComputeSlots,
        wall_clock: Callable[[], float],
    ) -> None:
        self._storage = storage
        self._head = head
        self._uids = uids
        self._layout = layout
        self._table = table
        self._fix_duplicates = fix_duplicates
        self._compute = compute
        self._wall_clock = wall_clock

    async def find(self, query: LastPointQuery) -> list[LastPoint]:
        """The last data point of each series the sub-queries name, without names."""
        now_s = int(self._wall_clock())
        top = now_s - now_s % MAX_TIMESPAN
        hours = query.hours
        found: list[LastPoint] = []
        for sub in query.queries:
            if sub.tsuids:
                tsuids = parse_tsuids(self._layout, list(sub.tsuids))
                for tsuid in tsuids:
                    point = await self._last_of_series(tsuid, top, hours)
                    if point is not None:
                        found.append(point)
            elif query.exact_tags:
                tsuid = await self._tsuid_of(sub)
                point = await self._last_of_series(tsuid, top, hours)
                if point is not None:
                    found.append(point)
            else:
                found.extend(await self._last_of_metric(sub, top, hours))
        return found

    async def _tsuid_of(self, sub: LastPointSubQuery) -> bytes:
        if not sub.tags:
            raise BadRequestError("Tags cannot be null or empty when getting a TSUID")
        metric_uid = await self._uids.metrics.get_id(sub.metric)
        pairs = [
            (await self._uids.tagk.get_id(k), await self._uids.tagv.get_id(v))
            for k, v in sub.tags.items()
        ]
        return metric_uid + encode_tags(self._layout, pairs)

    async def _last_of_series(self, tsuid: bytes, top: int, hours: int) -> LastPoint | None:
        """GETs of the series' rows from the current hour back, newest first."""
        layout = self._layout
        metric_uid = tsuid[: layout.metric_width]
        tag_bytes = tsuid[layout.metric_width :]
        salt = b""
        if layout.salt_width:
            salt = salt_bytes(layout, salt_bucket(layout, metric_uid, tag_bytes))
        step = 24
        for first in range(0, hours + 1, step):
            bases = [top - MAX_TIMESPAN * h for h in range(first, min(hours + 1, first + step))]
            keys = [
                salt + metric_uid + (b & 0xFFFFFFFF).to_bytes(4, "big") + tag_bytes for b in bases
            ]
            head = self._head.snapshot_keys(keys) if self._head is not None else None
            rows = with_head(await self._storage.get_many(self._table, keys, (FAMILY,)), head)
            for row in sorted(rows, key=lambda r: r.key, reverse=True):
                point = await self._last_in_rows([row])
                if point is not None:
                    return point
        return None

    async def _last_of_metric(
        self, sub: LastPointSubQuery, top: int, hours: int
    ) -> list[LastPoint]:
        """Every series of the metric carrying the given tags, each with its last point
        within the window (tsd's stand-in for OpenTSDB's meta-table lookup)."""
        layout = self._layout
        metric_uid = await self._uids.metrics.get_id(sub.metric)
        conditions = [
            TagCondition(await self._uids.tagk.get_id(k), (await self._uids.tagv.get_id(v),))
            for k, v in sorted(sub.tags.items())
        ]
        conditions.sort(key=lambda c: c.tagk_uid)
        regex = row_key_regex(layout, conditions, False) if conditions else None
        buckets: Sequence[int | None] = range(layout.salt_buckets) if layout.salt_width else (None,)
        newest: dict[bytes, Row] = {}
        first = max(0, top - MAX_TIMESPAN * hours)
        for bucket in buckets:
            prefix = (salt_bytes(layout, bucket) if bucket is not None else b"") + metric_uid
            spec = ScanSpec(
                start=prefix + first.to_bytes(4, "big"),
                stop=prefix + (top + MAX_TIMESPAN).to_bytes(4, "big"),
                families=(FAMILY,),
                row_filter=RowFilter(regex) if regex is not None else None,
                batch_rows=SCAN_BATCH_ROWS,
            )
            head = self._head.snapshot([spec]) if self._head is not None else None
            async with contextlib.aclosing(self._storage.scan(self._table, spec)) as rows:
                scanned = [row async for row in rows]
            # A series' rows come in time order (key order): the last one with data wins.
            for row in sorted(with_head(scanned, head), key=lambda r: r.key):
                if has_data(row):
                    newest[series_key(layout, row.key)] = row
        out = []
        for key in sorted(newest):
            point = await self._last_in_rows([newest[key]])
            if point is not None:
                out.append(point)
        return out

    async def _last_in_rows(self, rows: list[Row]) -> LastPoint | None:
        points = await self._compute.off_loop(
            decode_rows, rows, self._layout, fix_duplicates=self._fix_duplicates
        )
        if not points.point_count:
            return None
        i = points.point_count - 1
        value: int | float = float(points.values[i])
        if points.is_int is not None and points.int_values is not None and points.is_int[i]:
            value = int(points.int_values[i])
        key = rows[-1].key
        tsuid = key[self._layout.salt_width :]
        tsuid = tsuid[: self._layout.metric_width] + tsuid[self._layout.metric_width + 4 :]
        return LastPoint(int(points.timestamps[i]), format_last_value(value), tsuid.hex().upper())

    async def with_names(self, point: LastPoint) -> LastPoint:
        layout = self._layout
        raw = bytes.fromhex(point.tsuid)
        metric = await self._uids.metrics.get_name(raw[: layout.metric_width])
        tags = {}
        pair, kw = layout.tag_pair_width, layout.tagk_width
        for i in range(layout.metric_width, len(raw), pair):
            tagk = await self._uids.tagk.get_name(raw[i : i + kw])
            tags[tagk] = await self._uids.tagv.get_name(raw[i + kw : i + pair])
        return LastPoint(point.timestamp_ms, point.value, point.tsuid, metric, tags)
