"""POST /api/put (PutDataPointRpc): parse (protocol.put_json), write, answer (put_reply).

Bodies may be gzip or deflate (aiohttp inflates them), chunked or not, of any or no
Content-Type, up to ``tsd.http.request.max_body`` bytes once inflated (OpenTSDB refuses
anything over about 8 KiB: "Chunked request not supported"). With ``sync`` the reply
waits until storage holds every accepted point (``sync_timeout`` ms at most); without it
a point counts as a success once buffered, as OpenTSDB counts it once queued.

Without ``sync`` (the usual case) the points of series seen before go to the writer in
bulk (:func:`tsd.protocol.put_json.parse_put_body_known`, :meth:`Writer.add_points`);
with it each point keeps its own acknowledgement for the per-point outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable

from aiohttp import web

from tsd.codec import SeriesKey
from tsd.errors import NoSuchUniqueName, StorageRefused, TsdError
from tsd.model import DataPoint
from tsd.protocol.put_json import KnownPut, parse_put_body, parse_put_body_known
from tsd.protocol.put_reply import (
    STORAGE_EXCEPTION,
    UNKNOWN_METRIC,
    WRITE_TIMEDOUT,
    PutError,
    PutFlags,
    datapoint_echo,
    parse_put_flags,
    put_response,
    put_timeout_response,
)
from tsd.server.http.app import SERVICES, ApiPath, Route, method_not_allowed, query_params
from tsd.server.http.errors import json_response
from tsd.stats import StatsRegistry
from tsd.write.writer import Ack, Writer


async def handle_put(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.registry.counter("rpc.received", type="put").inc()
    flags = parse_put_flags(query_params(request))
    body = await request.read()
    errors: list[PutError] = []
    # While storage refuses writes (disk full), a put is answered once its points are
    # stored or refused, as with sync: nothing is acknowledged that may be lost.
    if not flags.sync and services.writer.storage_refusal is None:
        split = parse_put_body_known(body, services.writer.aliases, services.rules)
        queued = await _add_split(services.writer, split, errors)
        _count_ingest(services.registry, queued, len(errors))
        status, reply = put_response(flags, points=split.count, queued=queued, errors=errors)
        return json_response(reply, status)
    results = parse_put_body(body, services.rules)
    accepted = await _add_points(services.writer, results, errors)
    _count_ingest(services.registry, len(accepted), len(errors))
    return await _reply_when_stored(services.writer, flags, len(results), accepted, errors)


def _count_ingest(registry: StatsRegistry, points: int, errors: int) -> None:
    """tsd's per-protocol ingest counters (the telnet side keeps the same pair)."""
    registry.counter("ingest.points", protocol="http").inc(points)
    registry.counter("ingest.errors", protocol="http").inc(errors)


async def _add_split(writer: Writer, split: KnownPut[SeriesKey], errors: list[PutError]) -> int:
    """Buffer the points of a body split by parse_put_body_known, in body order; the number
    queued. Failures go to ``errors`` in body order; series not cached yet are resolved
    after the others (see :func:`_resolve_misses`). Valid points' series are remembered
    under the keys the split gives, for the next body."""
    failed: list[tuple[int, PutError]] = []
    misses: list[tuple[int, DataPoint, tuple[Hashable, ...]]] = []
    raw_keys = split.raw_keys
    queued = done = 0
    for index, at, result, key in split.others:
        if at > done:
            queued += await _add_run(writer, split, done, at, failed)
            done = at
        if isinstance(result, PutError):
            failed.append((index, result))
            continue
        keys = (*(() if key is None else (key,)), *(() if raw_keys is None else (raw_keys[index],)))
        if writer.is_full():
            await writer.wait_writable()
        series = writer.cached_series(result.metric, result.tags)
        if series is None:
            misses.append((index, result, keys))
            continue
        for alias in keys:
            writer.remember_alias(alias, series)
        queued += _add_one(writer, series, index, result, failed)
    if done < len(split.points):
        queued += await _add_run(writer, split, done, len(split.points), failed)
    if raw_keys is not None:  # known under one key only: learn the other
        for (series, _, _), index in zip(split.points, split.point_indexes(), strict=True):
            writer.remember_alias(raw_keys[index], series)
    if misses:
        queued += await _resolve_misses(writer, misses, failed)
    failed.sort(key=lambda item: item[0])
    errors.extend(error for _, error in failed)
    return queued


async def _add_run(
    writer: Writer,
    split: KnownPut[SeriesKey],
    start: int,
    stop: int,
    failed: list[tuple[int, PutError]],
) -> int:
    """Buffer ``split.points[start:stop]`` in bulk, as much at a time as the writer has
    room for (waiting while it is full); the number queued."""
    points = split.points
    index = start
    while index < stop:
        if writer.is_full():
            await writer.wait_writable()
        end = min(stop, index + max(1, writer.room()))
        run = points if index == 0 and end == len(points) else points[index:end]
        try:
            writer.add_points(run)
        except TsdError as exc:  # shutting down: each point fails with its echo
            indexes = split.point_indexes()
            results = split.results()
            for position in range(index, stop):
                point = results[indexes[position]]
                assert isinstance(point, DataPoint)
                failed.append((indexes[position], _storage_error(exc, point)))
            break
        index = end
    return index - start


async def _resolve_misses(
    writer: Writer,
    misses: list[tuple[int, DataPoint, tuple[Hashable, ...]]],
    failed: list[tuple[int, PutError]],
) -> int:
    """Resolve (maybe assign) the UIDs of points whose series is not cached, then buffer
    them; the number queued."""
    queued = 0
    found = await _series_or_errors(writer, [(index, point) for index, point, _ in misses], failed)
    for (index, point, keys), series in zip(misses, found, strict=True):
        if series is None:
            continue
        for alias in keys:
            writer.remember_alias(alias, series)
        if writer.is_full():
            await writer.wait_writable()
        queued += _add_one(writer, series, index, point, failed)
    return queued


async def _series_or_errors(
    writer: Writer, points: list[tuple[int, DataPoint]], failed: list[tuple[int, PutError]]
) -> list[SeriesKey | None]:
    """The points' series, their UIDs resolved (maybe assigned) in one batch, new names
    getting their UIDs in the order of the body as OpenTSDB hands them out (so a body
    always assigns the same UIDs); None, with the point's OpenTSDB error recorded, where
    that fails."""
    try:
        found = await writer.series_of_many([(point.metric, point.tags) for _, point in points])
    except TsdError as exc:
        failed.extend((index, _storage_error(exc, point)) for index, point in points)
        return [None] * len(points)
    answer: list[SeriesKey | None] = []
    for (index, point), series in zip(points, found, strict=True):
        if isinstance(series, NoSuchUniqueName):
            failed.append((index, PutError(UNKNOWN_METRIC, datapoint_echo(point))))
            answer.append(None)
        else:
            answer.append(series)
    return answer


def _add_one(
    writer: Writer,
    series: SeriesKey,
    index: int,
    point: DataPoint,
    failed: list[tuple[int, PutError]],
) -> int:
    try:
        writer.add_to(series, point.timestamp, point.value)
    except TsdError as exc:  # shutting down
        failed.append((index, _storage_error(exc, point)))
        return 0
    return 1


async def _add_points(
    writer: Writer, results: list[DataPoint | PutError], errors: list[PutError]
) -> list[tuple[DataPoint, Ack]]:
    """``sync``: buffer every valid point, keeping each one's ack; invalid ones and those
    the writer refuses go to ``errors``, in the order of the body. Series not cached yet
    are resolved after the cached ones."""
    accepted: list[tuple[DataPoint, Ack]] = []
    failed: list[tuple[int, PutError]] = []
    misses: list[tuple[int, DataPoint]] = []
    for index, point in enumerate(results):
        if isinstance(point, PutError):
            failed.append((index, point))
            continue
        if writer.is_full():
            await writer.wait_writable()  # back-pressure: this client waits
        series = writer.cached_series(point.metric, point.tags)
        if series is None:
            misses.append((index, point))
        else:
            _add(writer, series, index, point, accepted, failed)
    if misses:
        for (index, point), series in zip(
            misses, await _series_or_errors(writer, misses, failed), strict=True
        ):
            if series is None:
                continue
            if writer.is_full():
                await writer.wait_writable()
            _add(writer, series, index, point, accepted, failed)
    failed.sort(key=lambda item: item[0])
    errors.extend(error for _, error in failed)
    return accepted


def _add(
    writer: Writer,
    series: SeriesKey,
    index: int,
    point: DataPoint,
    accepted: list[tuple[DataPoint, Ack]],
    failed: list[tuple[int, PutError]],
) -> None:
    try:
        accepted.append((point, writer.add_to(series, point.timestamp, point.value)))
    except TsdError as exc:  # shutting down
        failed.append((index, _storage_error(exc, point)))


def _storage_error(exc: TsdError, point: DataPoint) -> PutError:
    return PutError(STORAGE_EXCEPTION.format(message=exc.message), datapoint_echo(point))


async def _reply_when_stored(
    writer: Writer,
    flags: PutFlags,
    points: int,
    accepted: list[tuple[DataPoint, Ack]],
    errors: list[PutError],
) -> web.Response:
    writer.flush_soon()
    pending = {ack for _, ack in accepted}
    timeout = flags.sync_timeout_ms / 1000 if flags.sync_timeout_ms > 0 else None
    if pending:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.wait(pending)
    good = failed = timeouts = 0
    refusal: StorageRefused | None = None
    for point, ack in accepted:
        if not ack.done():
            timeouts += 1
            if flags.details:
                errors.append(PutError(WRITE_TIMEDOUT, datapoint_echo(point)))
        elif ack.exception() is None:
            good += 1
        else:
            failed += 1
            exc = ack.exception()
            if isinstance(exc, StorageRefused):
                refusal = exc
            message = exc.message if isinstance(exc, TsdError) else str(exc)
            errors.append(
                PutError(STORAGE_EXCEPTION.format(message=message), datapoint_echo(point))
            )
    queued = len(accepted)
    if timeouts:
        status, body = put_timeout_response(
            flags,
            points=points,
            queued=queued,
            good_writes=good,
            failed_writes=failed,
            timeouts=timeouts,
            errors=errors,
        )
    else:
        status, body = put_response(
            flags,
            points=points,
            queued=queued,
            good_writes=good,
            failed_writes=failed,
            errors=errors,
            refusal=refusal,
        )
    return json_response(body, status)


ROUTES = {"api/put": Route(handle_put, modes=frozenset({"rw", "wo"}))}
