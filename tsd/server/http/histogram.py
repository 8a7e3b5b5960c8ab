"""POST /api/histogram (HistogramDataPointRpc over PutDataPointRpc.processDataPoint).

503 while ``tsd.core.histograms.config`` is unset (before the method is looked at, as in
OpenTSDB); the body is /api/put's with histogram fields (:mod:`tsd.protocol.histogram_json`)
and the reply /api/put's.
"""

from __future__ import annotations

from aiohttp import web

from tsd.errors import BadRequestError, NoSuchUniqueName, TsdError
from tsd.protocol.histogram_json import HistogramPoint, parse_histogram_body
from tsd.protocol.histogram_put import (
    DISABLED,
    HistogramFailure,
    base64_bytes,
    histogram_from_buckets,
)
from tsd.protocol.put_json import NOT_A_NUMBER
from tsd.protocol.put_reply import (
    STORAGE_EXCEPTION,
    UNEXPECTED_EXCEPTION,
    UNKNOWN_METRIC,
    DatapointEcho,
)
from tsd.server.http.cells import Failure, store_points
from tsd.server.http.context import SERVICES
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.write.histogram_store import HistogramCell
from tsd.write.ingest import IngestSession


async def handle_histogram(request: web.Request, path: ApiPath) -> web.StreamResponse:
    services = request.app[SERVICES]
    codecs = services.histogram_codecs
    if codecs is None:
        raise BadRequestError(DISABLED, status=503)
    if request.method != "POST":
        raise method_not_allowed(request.method)
    session: IngestSession[None] = services.ingest.session()

    async def store(point: HistogramPoint, echo: DatapointEcho) -> Failure[HistogramPoint] | None:
        try:
            if point.value:
                histogram = codecs.decode(point.codec_id, base64_bytes(point.value))
            else:
                assert point.buckets is not None
                histogram = histogram_from_buckets(
                    point.buckets, point.underflow, point.overflow, codecs.simple_id()
                )
            await session.put_cell(
                HistogramCell(point.metric, point.timestamp, histogram, point.tags)
            )
        except HistogramFailure as exc:
            if exc.number:
                return Failure(NOT_A_NUMBER, echo)
            return Failure(UNEXPECTED_EXCEPTION if exc.unexpected else exc.message, echo)
        except NoSuchUniqueName:
            return Failure(UNKNOWN_METRIC, echo)
        except TsdError as exc:  # storage: queued, then failed
            return Failure(STORAGE_EXCEPTION.format(message=exc.message), echo, queued=True)
        return None

    return await store_points(request, parse_histogram_body(await request.read()), store)


ROUTES = {"api/histogram": Route(handle_histogram, modes=frozenset({"rw", "wo"}))}
