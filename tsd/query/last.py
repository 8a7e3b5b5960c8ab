"""/api/query/last requests and the pure parts of answering them.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tsd.errors import BadRequestError
from tsd.java_text import java_double_to_string

__all__ = [
    "DEFAULT_BACK_SCAN_HOURS",
    "LastPointQuery",
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
