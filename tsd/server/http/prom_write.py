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
* the answer waits until every point taken is durable, so a 2xx never acknowledges what
  a crash could lose: on the embedded store, points of known series once the write-ahead
  log holds them (the head takes them with the writer's next batch; :func:`_ingest`),
  others once storage holds them (as ``/api/put?sync``); storage trouble (a failed
  write, HBase's spool or a disk refusing writes, no answer within
  :data:`STORE_TIMEOUT_S`) is a 503, which Prometheus retries;
* a body that is not a snappy block of a WriteRequest is a 400 (retrying cannot help).

A request is read as columns (:func:`~tsd.protocol.prom_wire.decode_write_columns`), and
series are remembered by their key (their labels' bytes) in the ingest service's
``prometheus`` ref cache (a compact table): a series seen before costs a lookup of its key
where it lies in the request, no decoding, mapping or lookup of its names. The samples
of those are taken in one pass
(:func:`~tsd.protocol.prom_samples.take_known_series`, compiled): their series listed,
their timestamps and values left in the request's columns (arrays, no Python number or
point per sample); on the embedded store those are encoded in one compiled pass as the
request's log record, a row per sample (:func:`~tsd.wal.record.encode_samples_payload`),
and handed on as columns (:class:`~tsd.wal.record.SampleBlock`): the head's runs are made
of a writer batch's requests at once, a run a row (:func:`~tsd.wal.record.sample_runs`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import orjson
from aiohttp import web

from tsd.data_points import MAX_MS_TIMESTAMP, MAX_SECONDS_TIMESTAMP, DataPoint
from tsd.errors import StorageRefused
from tsd.log import HTTP, get_logger
from tsd.protocol.prom_labels import (
    LabelMapper,
    MappedSeries,
    classify_nonfinite,
    is_storable_timestamp,
)
from tsd.protocol.prom_samples import take_known_series
from tsd.protocol.prom_wire import (
    DecodeError,
    WriteColumns,
    decode_key,
    decode_label,
    decode_write_columns,
    series_key,
    write_request_of,
)
from tsd.protocol.ref_table import RefTable
from tsd.server.http.appends import append_in_room, put_waiting
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.stats import StatsRegistry
from tsd.wal.record import EncodedPart, SampleBlock, encode_samples_payload
from tsd.write.ingest import (
    IngestSession,
    LoggedPart,
    RefPoint,
    RefusalKind,
    Refused,
    SeriesCache,
    SeriesRef,
    SyncOutcome,
)

log = get_logger(HTTP)

#: The ingest service's cache of remote write keys (a series' encoded labels), a compact
#: table (:data:`~tsd.protocol.ref_table.RefTable`): a key's bytes once in an arena rather
#: than a bytes object of its own, looked up without making one (take_known_series).
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


@dataclass(slots=True)
class _Outcome:
    """What one request did not store, by reason."""

    skipped: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    #: a refusal that makes the request retried (a UID assignment failed)
    storage: Refused | None = None

    def refuse(self, reason: str, message: str, samples: int) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + samples
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
        columns = await asyncio.to_thread(decode_write_columns, body, limit)
    else:
        columns = decode_write_columns(body, limit)
    rules = services.rules
    refs = services.ingest.ref_cache(PROM_REFS, RefTable)
    mapper = LabelMapper(rules.special_chars, rules.max_tags)
    take = _Take(refs, mapper)
    if columns.series is None or not await take.one_sample_each(columns):
        take = _Take(refs, mapper)  # not one sample per series: each one's samples
        await take.any_series(write_request_of(columns).timeseries)
    outcome = take.outcome
    stored = await _ingest(services, take)
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


async def _ingest(services: Any, take: _Take) -> SyncOutcome[int]:
    """The one place remote write calls the ingest service.

    A durable session: points of known series (:meth:`_Take.known_columns`), on the
    embedded store encoded as a part of a log record (a row per point) and appended once the
    write-ahead log holds it (:class:`~tsd.write.ingest.LoggedPart`: written and synced,
    then buffered for the head with the next batch), so a request costs one log record
    rather than a batch of its own; elsewhere (HBase) appended by ref and waited for until
    storage holds them, as ``/api/put?sync``. Points of new series are resolved
    in the session's window (each remembered under its key) and waited for likewise."""
    outcome = take.outcome
    session: IngestSession[int] = services.ingest.session(
        cache=take.refs,
        on_refused=outcome.on_refused,
        track_acks=True,
        protocol=PROTOCOL,
        durable=True,
    )
    series, timestamps, values = take.known_columns()
    if services.ingest.writer.logs_points:
        if series:
            await session.wait_room()
            block = SampleBlock(series, timestamps, values)
            part = EncodedPart(encode_samples_payload(*block), block, len(series))
            session.append_part(LoggedPart(part, len(series)), range(len(series)))
    else:
        known: list[RefPoint] = list(zip(series, timestamps.tolist(), values.tolist(), strict=True))
        await append_in_room(session, known, range(len(known)))
    for tag, (point, key) in enumerate(take.new, start=1):
        await put_waiting(session, point, -tag, (key,))
    await session.settle()
    refused_samples = sum(outcome.refused.values()) - outcome.refused.get("unknown_metric", 0)
    if session.counters is not None and refused_samples:
        session.counters[1].inc(refused_samples)  # unknown metrics counted by the session
    return await session.stored(STORE_TIMEOUT_S)


@dataclass(slots=True)
class _Take:
    """One request's samples sorted for :func:`_ingest`: points of series known by their
    key, by ref (:meth:`known_columns`), points of series to resolve
    (:attr:`new`, with their key), and what is not stored (:attr:`outcome`)."""

    refs: SeriesCache
    mapper: LabelMapper
    #: the series of each point of a known series, in order; their timestamps and values
    #: as columns (int64, float64): whole parts taken at once, and points one by one
    known_series: list[SeriesRef] = field(default_factory=list)
    known_parts: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    known_timestamps: list[int] = field(default_factory=list)
    known_values: list[float] = field(default_factory=list)
    new: list[tuple[DataPoint, bytes]] = field(default_factory=list)
    outcome: _Outcome = field(default_factory=_Outcome)
    #: the mapping of each new key met in this request (a series may come many times)
    mapped: dict[bytes, MappedSeries | tuple[str, str] | None] = field(default_factory=dict)

    async def one_sample_each(self, columns: WriteColumns) -> bool:
        """As many samples as series, one each (what Prometheus sends): the samples of
        known series in one compiled pass
        (:func:`~tsd.protocol.prom_samples.take_known_series`), the others one by one.
        False, with the request half taken, when a key met for the first time is not a
        series without samples (:func:`~tsd.protocol.prom_wire.decode_key`): the keys did
        not part each series from its sample."""
        series, payloads = columns.series, columns.payloads
        values, timestamps = columns.values, columns.timestamps
        if series is None or payloads is None or values is None or timestamps is None:
            return False  # no columns
        low, high = MAX_SECONDS_TIMESTAMP, MAX_MS_TIMESTAMP  # is_storable_timestamp's
        get = self.refs.get
        count = len(series)
        for start in range(0, count, YIELD_EVERY):
            if start:
                await asyncio.sleep(0)
            end = min(count, start + YIELD_EVERY)
            taken, others = take_known_series(
                series,
                payloads,
                values,
                timestamps,
                self.refs,
                self.known_series,
                low,
                high,
                start,
                end,
            )
            if taken:
                if end - start == count:  # the usual request: one part, no copies
                    part_timestamps, part_values = timestamps, values
                else:
                    part_timestamps, part_values = timestamps[start:end], values[start:end]
                if others:
                    kept = np.ones(end - start, dtype=np.bool_)
                    kept[np.array(others, dtype=np.int64) - start] = False
                    part_timestamps, part_values = part_timestamps[kept], part_values[kept]
                self.add_known_part(part_timestamps, part_values)
            for index in others:
                key = columns.key(index)
                ref = get(key)
                if ref is None and self.mapping(key) is None:
                    return False  # not a key: the samples may not be one per series
                sample = (values[index].item(), timestamps[index].item())
                self.other(key, ref, (sample,))
        return True

    async def any_series(self, series_list: Any) -> None:
        """Series of any shape (exemplars or native histograms only, many samples), each
        keyed by :func:`~tsd.protocol.prom_wire.series_key`."""
        for turn, series in enumerate(series_list):
            if turn % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            samples = [(sample.value, sample.timestamp) for sample in series.samples]
            if samples:
                key = series_key(series)
                self.other(key, self.refs.get(key), samples)
            elif series.histograms:
                self.outcome.refuse(
                    "native_histogram", "native histograms are not stored", len(series.histograms)
                )

    def other(
        self, key: bytes, ref: SeriesRef | None, samples: Sequence[tuple[float, int]]
    ) -> None:
        """The samples of one series off the hot loop: a new series, or a sample that is
        not stored (not finite, its timestamp out of range)."""
        outcome = self.outcome
        mapped: MappedSeries | tuple[str, str] | None = None
        if ref is None:
            mapped = self.mapping(key)
            if mapped is None:
                return  # not a key (one_sample_each stops before; series_key's always are)
            if not isinstance(mapped, MappedSeries):
                outcome.refuse(mapped[0], mapped[1], len(samples))
                return
        for value, timestamp in samples:
            if classify_nonfinite(value) is not None or not is_storable_timestamp(timestamp):
                _bad_sample(value, timestamp, outcome.skipped, outcome)
            elif isinstance(mapped, MappedSeries):
                self.new.append((DataPoint(mapped.metric, timestamp, value, mapped.tags), key))
            elif ref is not None:
                self.add_known(ref, timestamp, value)

    def add_known(self, ref: SeriesRef, timestamp: int, value: float) -> None:
        """One point of a known series off the hot loop, after the points before it."""
        self.known_series.append(ref)
        self.known_timestamps.append(timestamp)
        self.known_values.append(value)

    def add_known_part(self, timestamps: np.ndarray, values: np.ndarray) -> None:
        """The timestamps and values of the points whose series the hot loop has just
        listed in :attr:`known_series`, after the points before them."""
        self._close_singles()
        self.known_parts.append((timestamps, values))

    def known_columns(self) -> tuple[list[SeriesRef], np.ndarray, np.ndarray]:
        """The points of known series, in order: their series, timestamps (int64) and
        values (float64)."""
        self._close_singles()
        if len(self.known_parts) == 1:
            timestamps, values = self.known_parts[0]
        elif self.known_parts:
            timestamps = np.concatenate([part[0] for part in self.known_parts])
            values = np.concatenate([part[1] for part in self.known_parts])
        else:
            timestamps, values = np.empty(0, np.int64), np.empty(0, np.float64)
        return self.known_series, timestamps, values

    def _close_singles(self) -> None:
        """The points taken one by one so far, as a part."""
        if self.known_timestamps:
            timestamps = np.array(self.known_timestamps, dtype=np.int64)
            values = np.array(self.known_values, dtype=np.float64)
            self.known_parts.append((timestamps, values))
            self.known_timestamps, self.known_values = [], []

    def mapping(self, key: bytes) -> MappedSeries | tuple[str, str] | None:
        """The OpenTSDB series of a key not seen before, or (reason, message) when it
        cannot be stored; None when it is not a key (not whole fields of a series without
        samples). Once per key a request."""
        if key in self.mapped:
            return self.mapped[key]
        mapped = self.mapped[key] = _map(key, self.mapper)
        return mapped


def _map(key: bytes, mapper: LabelMapper) -> MappedSeries | tuple[str, str] | None:
    raw_labels = decode_key(key)
    if raw_labels is None:
        return None
    try:
        labels = [decode_label(raw) for raw in raw_labels]
    except DecodeError as exc:
        return "bad_label", f"a label is not a valid protobuf Label: {exc}"
    mapped = mapper.map_series(labels)
    if isinstance(mapped, MappedSeries):
        return mapped
    return mapped.reason, mapped.message


def _bad_sample(value: float, timestamp: int, skipped: dict[str, int], outcome: _Outcome) -> None:
    reason = classify_nonfinite(value)
    if reason is not None:
        skipped[reason] = skipped.get(reason, 0) + 1
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
