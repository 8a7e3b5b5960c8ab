"""POST /api/put (PutDataPointRpc): parse with protocol.put_json, hand points to the writer.

Bodies may be gzip or deflate (aiohttp inflates them), chunked or not, of any or no
Content-Type, up to ``tsd.http.request.max_body`` bytes once inflated (OpenTSDB refuses
anything over about 8 KiB: "Chunked request not supported"). With ``sync`` the reply
waits until storage holds every accepted point (``sync_timeout`` ms at most); without it
a point counts as a success once buffered, as OpenTSDB counts it once queued.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from tsd.codec import SeriesKey
from tsd.errors import NoSuchUniqueName, TsdError
from tsd.model import DataPoint
from tsd.protocol.put_json import (
    STORAGE_EXCEPTION,
    UNKNOWN_METRIC,
    WRITE_TIMEDOUT,
    PutError,
    PutFlags,
    datapoint_echo,
    parse_put_body,
    parse_put_flags,
    put_response,
    put_timeout_response,
)
from tsd.server.http.app import SERVICES, ApiPath, Route, method_not_allowed, query_params
from tsd.server.http.errors import json_response
from tsd.write.writer import Ack, Writer

#: UID lookups one request runs at once. 1: new names get their UIDs in the order of the
#: body, as OpenTSDB hands them out, so that a body always assigns the same UIDs. (Several
#: at once would be faster for bodies full of new series, but the UID layer does not order
#: concurrent assignments.)
MISS_WINDOW = 1


async def handle_put(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.registry.counter("rpc.received", type="put").inc()
    flags = parse_put_flags(query_params(request))
    results = parse_put_body(await request.read(), services.rules)
    errors: list[PutError] = []
    accepted = await _add_points(services.writer, results, errors)
    if not flags.sync:
        status, body = put_response(flags, points=len(results), queued=len(accepted), errors=errors)
        return json_response(body, status)
    return await _reply_when_stored(services.writer, flags, len(results), accepted, errors)


async def _add_points(
    writer: Writer, results: list[DataPoint | PutError], errors: list[PutError]
) -> list[tuple[DataPoint, Ack]]:
    """Buffer every valid point; invalid ones and those the writer refuses go to ``errors``,
    in the order of the body. Series not cached yet are resolved after the cached ones."""
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
        slots = asyncio.Semaphore(MISS_WINDOW)

        async def resolve(index: int, point: DataPoint) -> None:
            async with slots:
                try:
                    series = await writer.series_of(point.metric, point.tags)
                except NoSuchUniqueName:
                    failed.append((index, PutError(UNKNOWN_METRIC, datapoint_echo(point))))
                    return
                except TsdError as exc:
                    failed.append((index, _storage_error(exc, point)))
                    return
            if writer.is_full():
                await writer.wait_writable()
            _add(writer, series, index, point, accepted, failed)

        await asyncio.gather(*(resolve(index, point) for index, point in misses))
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
        )
    return json_response(body, status)


ROUTES = {"api/put": Route(handle_put, modes=frozenset({"rw", "wo"}))}
