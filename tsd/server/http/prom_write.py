"""POST /api/v1/write: Prometheus' remote write 1.0 into OpenTSDB's schema.

The body is a snappy block of a ``WriteRequest`` (:mod:`tsd.protocol.prom_wire`); each
sample becomes a data point through the ingest service, as a telnet ``put`` or an
/api/put element does, the labels mapped by :mod:`tsd.protocol.prom_labels`.

Prometheus drops a whole batch on a 4xx and retries it on a 5xx, so:

* a series that cannot be stored (its labels, an unknown metric with auto-create off) and
  a sample that is not finite (NaN, staleness marker, infinity) never fail the others:
  they are counted (``prometheus.write.refused`` / ``.skipped`` by reason, refusals also
  in ``ingest.errors{protocol=prometheus}``) and logged once per request, and the answer
  is 204;
* the answer waits until storage holds every point taken (the write-ahead log and the
  store or the head, as ``/api/put?sync``), so a 2xx never acknowledges what a crash
  could lose; storage trouble (a failed write, HBase's spool or a disk refusing writes,
  no answer within :data:`STORE_TIMEOUT_S`) is a 503, which Prometheus retries;
* a body that is not a snappy block of a WriteRequest is a 400 (retrying cannot help).

Series are remembered by their labels' encoded bytes in the ingest service's
``prometheus`` ref cache: a series seen before costs no decoding, mapping or lookup.
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiohttp import web

from tsd.data_points import DataPoint
from tsd.errors import StorageRefused
from tsd.log import HTTP, get_logger
from tsd.protocol.prom_labels import (
    LabelMapper,
    MappedSeries,
    classify_nonfinite,
    is_storable_timestamp,
)
from tsd.protocol.prom_wire import DecodeError, decode_label, decode_write_request
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.stats import StatsRegistry
from tsd.write.ingest import IngestSession, RefCache, RefPoint, RefusalKind, Refused

log = get_logger(HTTP)

#: The ingest service's cache of remote write keys (a series' encoded labels).
PROM_REFS: Final = "prometheus"
#: The protocol name of tsd's ``ingest.points`` / ``ingest.errors`` counters.
PROTOCOL: Final = "prometheus"
#: How long a request waits for storage before a 503 (Prometheus' remote_timeout is 30 s).
STORE_TIMEOUT_S: Final = 25.0
#: Bodies larger than this are decoded in a worker thread.
OFFLOAD_BODY_BYTES: Final = 1 << 20
#: Series handled between two turns given back to the loop.
YIELD_EVERY: Final = 2048
#: Refusal messages kept for the request's log event.
LOGGED_MESSAGES: Final = 3
_MIN_MS = 0xFFFFFFFF


@dataclass(slots=True)
class _Outcome:
    """What one request did not store, by reason."""

    skipped: Tally[str] = field(default_factory=Tally)
    refused: Tally[str] = field(default_factory=Tally)
    messages: list[str] = field(default_factory=list)
    storage: Refused | None = None

    def refuse(self, reason: str, message: str, samples: int) -> None:
        self.refused[reason] += samples
        if len(self.messages) < LOGGED_MESSAGES:
            self.messages.append(message)

    def on_refused(self, tag: int | None, point: DataPoint | None, refused: Refused) -> None:
        if refused.kind is RefusalKind.UNKNOWN_METRIC:
            self.refuse("unknown_metric", refused.message, 1)
        else:  # UID assignment or storage failed: the request is retried
            self.storage = refused


async def handle_write(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.registry.counter("rpc.received", type="prometheus_write").inc()
    body = await request.read()
    limit = services.config.http.max_body_bytes
    if len(body) > OFFLOAD_BODY_BYTES:
        message = await asyncio.to_thread(decode_write_request, body, limit)
    else:
        message = decode_write_request(body, limit)
    rules = services.rules
    mapper = LabelMapper(rules.special_chars, rules.max_tags)
    refs = services.ingest.ref_cache(PROM_REFS)
    outcome = _Outcome()
    session: IngestSession[int] = services.ingest.session(
        cache=refs, on_refused=outcome.on_refused, track_acks=True, protocol=PROTOCOL
    )
    known: list[RefPoint] = []
    await _append_series(message.timeseries, session, refs, mapper, known, outcome)
    await session.append_all(known, range(len(known)))
    await session.settle()
    refused_samples = sum(outcome.refused.values()) - outcome.refused["unknown_metric"]
    if session.counters is not None and refused_samples:
        session.counters[1].inc(refused_samples)  # unknown metrics counted by the session
    stored = await session.stored(STORE_TIMEOUT_S)
    _count(services.registry, outcome)
    if outcome.refused:
        log.warning(
            "prometheus.write_refused",
            samples=sum(outcome.refused.values()),
            reasons=dict(outcome.refused),
            first=outcome.messages,
        )
    failure = _storage_failure(outcome, stored.unstored, stored.refusal)
    if failure is not None:
        log.warning("prometheus.write_failed", error=failure, unstored=len(stored.unstored))
        reply = json_response(orjson.dumps({"error": {"code": 503, "message": failure}}), 503)
        reply.headers["Retry-After"] = "1"
        return reply
    return web.Response(status=204)


async def _append_series(
    series_list: Any,
    session: IngestSession[int],
    refs: RefCache,
    mapper: LabelMapper,
    known: list[RefPoint],
    outcome: _Outcome,
) -> None:
    """Every sample of the request: those of known series into ``known`` (appended by
    ref in one run afterwards), the others appended one by one (their series resolved
    in the session's window), the rest counted."""
    add = known.append
    get = refs.get
    skipped = outcome.skipped
    tag = 0
    for turn, series in enumerate(series_list):
        if turn % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        key = b"".join(series.labels)
        ref = get(key)
        samples = series.samples
        if ref is not None:
            for sample in samples:
                value = sample.value
                timestamp = sample.timestamp
                if value - value == 0.0 and _MIN_MS < timestamp <= 9_999_999_999_999:
                    add((ref, timestamp, value))
                else:
                    _bad_sample(value, timestamp, skipped, outcome)
            continue
        if not samples:
            if series.histograms:
                outcome.refuse(
                    "native_histogram", "native histograms are not stored", len(series.histograms)
                )
            continue
        mapped = _map(series.labels, mapper)
        if not isinstance(mapped, MappedSeries):
            outcome.refuse(mapped[0], mapped[1], len(samples))
            continue
        aliases: tuple[Hashable, ...] = (key,)
        for sample in samples:
            value = sample.value
            timestamp = sample.timestamp
            if classify_nonfinite(value) is not None or not is_storable_timestamp(timestamp):
                _bad_sample(value, timestamp, skipped, outcome)
                continue
            point = DataPoint(mapped.metric, timestamp, value, mapped.tags)
            tag += 1
            if not session.try_append(point, -tag, aliases):
                await session.append(point, -tag, aliases, missed=True)


def _map(raw_labels: Any, mapper: LabelMapper) -> MappedSeries | tuple[str, str]:
    try:
        labels = [decode_label(raw) for raw in raw_labels]
    except DecodeError as exc:
        return "bad_label", f"a label is not a valid protobuf Label: {exc}"
    mapped = mapper.map_series(labels)
    if isinstance(mapped, MappedSeries):
        return mapped
    return mapped.reason, mapped.message


def _bad_sample(value: float, timestamp: int, skipped: Tally[str], outcome: _Outcome) -> None:
    reason = classify_nonfinite(value)
    if reason is not None:
        skipped[reason] += 1
    else:
        outcome.refuse("bad_timestamp", f"timestamp {timestamp} ms is out of range", 1)


def _count(registry: StatsRegistry, outcome: _Outcome) -> None:
    for reason, count in outcome.skipped.items():
        registry.counter("prometheus.write.skipped", reason=reason).inc(count)
    for reason, count in outcome.refused.items():
        registry.counter("prometheus.write.refused", reason=reason).inc(count)


def _storage_failure(
    outcome: _Outcome, unstored: list[tuple[int, Refused | None]], refusal: StorageRefused | None
) -> str | None:
    """Why the request must be retried, or None."""
    if outcome.storage is not None:
        return outcome.storage.message
    if refusal is not None:
        return refusal.message
    for _, why in unstored:
        if why is None:
            return f"storage did not take the samples within {STORE_TIMEOUT_S:g}s"
        return why.message
    return None


ROUTES = {"api/write": Route(handle_write, modes=frozenset({"rw", "wo"}))}
