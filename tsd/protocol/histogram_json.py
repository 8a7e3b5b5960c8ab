"""/api/histogram's body (HistogramDataPointRpc: parsePutV1 into HistogramPojo, then its
validate): /api/put's body rules (:mod:`tsd.protocol.put_json`) plus ``id``, ``buckets``,
``underflow`` and ``overflow``. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

from tsd.errors import BadRequestError
from tsd.protocol.put_json import (
    UNPARSEABLE,
    Incoming,
    bind_incoming,
    incoming_error,
    load_put_elements,
    missing_field,
)
from tsd.protocol.put_reply import DatapointEcho, PutError

__all__ = ["HistogramPoint", "parse_histogram_body"]

NULL_DATAPOINT: Final = "Unexpected null datapoint encountered in set."
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """A HistogramPojo that passed validate()."""

    metric: str
    timestamp: int
    tags: dict[str, str]
    #: base64 codec bytes ("" when ``buckets`` carry the histogram)
    value: str
    codec_id: int
    buckets: dict[str, int | None] | None
    underflow: int
    overflow: int


def _number(raw: object, low: int, high: int) -> int:
    """Jackson's binding of an int or long property (numbers, numeric strings, null = 0)."""
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise BadRequestError(UNPARSEABLE)
    try:
        value = (
            int(float(raw)) if isinstance(raw, str) and any(c in raw for c in ".eE") else int(raw)
        )
    except (ValueError, OverflowError):
        raise BadRequestError(UNPARSEABLE) from None
    if not low <= value <= high:
        raise BadRequestError(UNPARSEABLE)
    return value


def _buckets(raw: object) -> dict[str, int | None] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequestError(UNPARSEABLE)
    return {
        str(key): (None if value is None else _number(value, _LONG_MIN, _LONG_MAX))
        for key, value in raw.items()
    }


def parse_histogram_body(body: bytes) -> list[tuple[HistogramPoint, DatapointEcho] | PutError]:
    """The body's histograms (with their echo) or the errors of those validate() refuses.
    Raises BadRequestError for the body-level failures /api/put has."""
    bound: list[tuple[Incoming, int, dict[str, int | None] | None, int, int] | None] = []
    for element in load_put_elements(body):
        if element is None:
            bound.append(None)
            continue
        incoming = bind_incoming(element)
        get = cast(dict[str, Any], element).get
        bound.append(
            (
                incoming,
                _number(get("id"), _INT_MIN, _INT_MAX),
                _buckets(get("buckets")),
                _number(get("underflow"), _LONG_MIN, _LONG_MAX),
                _number(get("overflow"), _LONG_MIN, _LONG_MAX),
            )
        )
    results: list[tuple[HistogramPoint, DatapointEcho] | PutError] = []
    for item in bound:
        if item is None:
            results.append(PutError(NULL_DATAPOINT, None))
            continue
        incoming, codec_id, buckets, underflow, overflow = item
        echo = incoming_error("", incoming).datapoint
        assert echo is not None
        extra = cast(dict[str, Any], echo)
        extra["id"] = codec_id
        if buckets is not None:
            extra["buckets"] = buckets
        extra["underflow"] = underflow
        extra["overflow"] = overflow
        value = "" if incoming.value is None else str(incoming.value)
        failed = missing_field(incoming, value=False)
        if failed is None and not value and not buckets:
            failed = "Histogram buckets cannot be null or empty if 'value' is empty."
        elif failed is None and value and not 0 <= codec_id <= 255:
            failed = "Invalid type. Must be from 0 to 255."
        if failed is not None:
            results.append(PutError(failed, echo))
            continue
        assert incoming.metric is not None
        assert incoming.tags is not None
        point = HistogramPoint(
            incoming.metric,
            incoming.timestamp,
            cast(dict[str, str], incoming.tags),
            value,
            codec_id,
            buckets,
            underflow,
            overflow,
        )
        results.append((point, echo))
    return results
