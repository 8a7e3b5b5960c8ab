"""/api/put: the query-string flags and the replies (status and body).

Theory of operation (behaviour doc §1.1; OpenTSDB 2.4.1 ``src/tsd/PutDataPointRpc.java``
processDataPoint and its GroupCB / PutTimeout): without ``summary`` or ``details`` a put
answers 204 with no body, or the generic 400 when a point failed; with either it answers
``{"success","failed"}`` (plus ``timeouts`` with ``sync_timeout``, and ``errors`` with
``details``), 200, or 400 when a point failed validation (storage failures seen through
``sync`` are counted but keep the 200). tsd departs where storage refused the writes (disk
full: 507, read-only filesystem: 503; see ``put_response``). Body parsing lives in
:mod:`tsd.protocol.put_json`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

import orjson

from tsd.data_points import DataPoint
from tsd.errors import BadRequestError, TsdError
from tsd.protocol.names import java_hash_order

__all__ = [
    "PUT_ERRORS_DETAILS",
    "PUT_ERRORS_MESSAGE",
    "DatapointEcho",
    "PutError",
    "PutFlags",
    "datapoint_echo",
    "parse_java_integer",
    "parse_put_flags",
    "put_errors_error",
    "put_response",
    "put_timeout_response",
    "summary_body",
]

#: Per-point texts of the write path (PutDataPointRpc), for the writer's errors.
UNKNOWN_METRIC: Final = "Unknown metric"
PLEASE_THROTTLE: Final = "Please throttle"
TIMEOUT_EXCEPTION: Final = "Timeout exception"
UNEXPECTED_EXCEPTION: Final = "Unexpected exception"
STORAGE_EXCEPTION: Final = "Storage exception: {message}"
WRITE_TIMEDOUT: Final = "Write timedout"

PUT_ERRORS_MESSAGE: Final = "One or more data points had errors"
#: tsd's message when storage refused the writes (disk full, read-only filesystem).
STORAGE_REFUSED_MESSAGE: Final = "Storage refused the write: {failed} data points not stored"
PUT_ERRORS_DETAILS: Final = 'Please see the TSD logs or append "details" to the put request'
PUT_TIMEOUT_MESSAGE: Final = (
    "The put call has timedout with {good} successful writes, {failed} failed writes"
    " and {timeouts} timed out writes."
)


class DatapointEcho(TypedDict):
    """A point as OpenTSDB echoes it in ``errors[].datapoint`` (Jackson, NON_NULL)."""

    metric: NotRequired[str]
    timestamp: int
    value: NotRequired[str]
    tags: NotRequired[dict[str, str | None]]
    tsuid: NotRequired[str]


@dataclass(frozen=True, slots=True)
class PutError:
    """A point that failed: the ``error`` text and the ``datapoint`` echo (None for null)."""

    message: str
    datapoint: DatapointEcho | None


@dataclass(frozen=True, slots=True)
class PutFlags:
    """The /api/put query string: presence-only flags, and ``sync_timeout`` in ms."""

    details: bool = False
    summary: bool = False
    sync: bool = False
    sync_timeout_ms: int = 0


# Long.parseLong / Integer.parseInt: a sign, then digits (Character.digit accepts any Nd
# digit, as Python's \d and int() do). Leading zeros are fine.
_JAVA_INTEGER_TEXT: Final = re.compile(r"[+-]?\d+")


def parse_java_integer(text: str, low: int, high: int) -> int | None:
    """The value of ``text`` within [low, high], or None where Java would refuse it."""
    if _JAVA_INTEGER_TEXT.fullmatch(text) is None:
        return None
    try:
        value = int(text)
    except ValueError:  # more digits than Python converts: out of range anyway
        return None
    return value if low <= value <= high else None


def datapoint_echo(point: DataPoint) -> DatapointEcho:
    """The echo of an accepted point that failed later (storage, unknown metric).

    The value's source text is gone by then: an int prints as digits, a float with
    Python's repr (OpenTSDB would show the client's text).
    """
    tags = dict(point.tags)
    return {
        "metric": point.metric,
        "timestamp": point.timestamp,
        "value": str(point.value),
        "tags": {k: tags[k] for k in java_hash_order(tags)},
    }


# --- Query string ----------------------------------------------------------------------------


def parse_put_flags(query: Mapping[str, str]) -> PutFlags:
    """The flags of an /api/put query string (pass the *last* value of a repeated key).

    ``details``, ``summary``, ``sync`` count by presence, whatever their value.
    ``sync_timeout`` goes through Java's Integer.parseInt; OpenTSDB answers a bad one with a
    500 carrying the NumberFormatException text, tsd with a 400 carrying the same text.
    """
    timeout = 0
    if "sync_timeout" in query:
        text = query["sync_timeout"]
        parsed = parse_java_integer(text, -(2**31), 2**31 - 1)
        if parsed is None:
            raise BadRequestError(f'For input string: "{text}"')
        timeout = parsed
    return PutFlags(
        details="details" in query,
        summary="summary" in query,
        sync="sync" in query,
        sync_timeout_ms=timeout,
    )


# --- Replies ---------------------------------------------------------------------------------


def put_errors_error() -> BadRequestError:
    """The 400 for a put with failed points and neither ``summary`` nor ``details``."""
    return BadRequestError(PUT_ERRORS_MESSAGE, details=PUT_ERRORS_DETAILS)


def summary_body(
    success: int,
    failed: int,
    errors: Sequence[PutError] | None,
    details: bool,
    timeouts: int | None,
) -> bytes:
    """``{"success":N,"failed":M}`` plus ``timeouts`` and, with ``details``, ``errors``.

    Keys come in the order OpenTSDB's HashMap serialises them (success, timeouts, failed,
    errors; each error is datapoint then error).
    """
    summary: dict[str, Any] = {"success": success}
    if timeouts is not None:
        summary["timeouts"] = timeouts
    summary["failed"] = failed
    if details:
        summary["errors"] = [
            {"datapoint": error.datapoint, "error": error.message} for error in errors or ()
        ]
    try:
        return orjson.dumps(summary)
    except TypeError:  # lone surrogates from \\ud800-style escapes: escape them instead
        return json.dumps(summary, separators=(",", ":")).encode("ascii")


def put_response(
    flags: PutFlags,
    *,
    points: int,
    queued: int,
    good_writes: int | None = None,
    failed_writes: int = 0,
    errors: Sequence[PutError] = (),
    refusal: TsdError | None = None,
) -> tuple[int, bytes]:
    """Status and body of an /api/put reply (PutDataPointRpc's GroupCB).

    ``refusal``: why storage refused the failed writes when it is full or read-only
    (:class:`~tsd.errors.StorageRefused`): the reply then carries its status (507, 503)
    instead of OpenTSDB's 200-with-a-count or generic 400, a failure no client can miss.

    ``points`` elements were received and ``queued`` passed validation and went to the
    writer. With ``sync``, ``good_writes``/``failed_writes`` count storage outcomes;
    without it pass ``good_writes=None`` (success is then the queued count). Raises the
    generic BadRequestError when points failed and neither summary nor details was asked.
    """
    failures = points - queued
    if refusal is not None and failed_writes > 0 and not (flags.summary or flags.details):
        raise BadRequestError(
            STORAGE_REFUSED_MESSAGE.format(failed=failed_writes),
            details=refusal.message,
            status=refusal.status,
        )
    if not (flags.summary or flags.details):
        if failures + failed_writes > 0:
            raise put_errors_error()
        return 204, b""
    body = summary_body(
        queued if good_writes is None else good_writes,
        failures + failed_writes,
        errors,
        flags.details,
        0 if flags.sync_timeout_ms > 0 else None,
    )
    if refusal is not None and failed_writes > 0:
        return refusal.status, body  # tsd departs: OpenTSDB answers 200 with "failed"
    # Storage failures reported by sync do not make it a 400; only validation failures do.
    return (400 if failures > 0 else 200), body


def put_timeout_response(
    flags: PutFlags,
    *,
    points: int,
    queued: int,
    good_writes: int,
    failed_writes: int,
    timeouts: int,
    errors: Sequence[PutError] = (),
) -> tuple[int, bytes]:
    """The 400 sent when ``sync_timeout`` expires first (PutDataPointRpc's PutTimeout).

    Without summary/details this raises BadRequestError with OpenTSDB's text.
    """
    if not (flags.summary or flags.details):
        raise BadRequestError(
            PUT_TIMEOUT_MESSAGE.format(good=good_writes, failed=failed_writes, timeouts=timeouts),
            details=PUT_ERRORS_DETAILS,
        )
    failed = points - queued + failed_writes
    return 400, summary_body(good_writes, failed, errors, flags.details, timeouts)


def cells_response(
    flags: PutFlags, *, points: int, queued: int, stored: int, errors: Sequence[PutError]
) -> tuple[int, bytes]:
    """The reply of /api/rollup and /api/histogram, whose points are written one by one
    before the reply: ``queued`` passed the checks, ``stored`` of them reached storage."""
    return put_response(
        flags,
        points=points,
        queued=queued,
        good_writes=stored if flags.sync else None,
        failed_writes=queued - stored if flags.sync else 0,
        errors=errors,
    )
