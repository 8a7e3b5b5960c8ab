"""POST /api/rollup (RollupDataPointRpc over PutDataPointRpc.processDataPoint).

The body is /api/put's (one object or a list) with ``interval``, ``aggregator`` and
``groupByAggregator``; the reply is /api/put's (204, or ``summary``/``details``). Points
are checked and stored one by one, in body order (:mod:`tsd.write.rollup_store`).
"""

from __future__ import annotations

from typing import cast

from aiohttp import web

from tsd.protocol.names import java_hash_order
from tsd.protocol.put_json import NOT_A_NUMBER
from tsd.protocol.put_reply import (
    STORAGE_EXCEPTION,
    UNEXPECTED_EXCEPTION,
    UNKNOWN_METRIC,
    DatapointEcho,
)
from tsd.protocol.rollup_json import parse_rollup_body
from tsd.protocol.rollup_put import (
    ILLEGAL_ARGUMENT,
    INVALID_VALUE,
    NO_SUCH_ROLLUP,
    STORAGE,
    RollupError,
    RollupPoint,
)
from tsd.protocol.rollup_put import UNKNOWN_METRIC as ROLLUP_UNKNOWN_METRIC
from tsd.server.http.cells import Failure, store_points
from tsd.server.http.context import SERVICES
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.write.ingest import IngestSession


async def handle_rollup(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    session: IngestSession[None] = request.app[SERVICES].ingest.session()

    async def store(point: RollupPoint, echo: DatapointEcho) -> Failure[RollupPoint] | None:
        try:
            await session.put_cell(point)
        except RollupError as exc:
            if exc.tags is not None:  # OpenTSDB echoes the tags it had added to
                shown = {key: exc.tags[key] for key in java_hash_order(exc.tags)}
                echo = cast(DatapointEcho, {**echo, "tags": shown})
            if exc.kind == STORAGE:  # failed in the write: queued, reported in details
                return Failure(STORAGE_EXCEPTION.format(message=exc.message), echo, queued=True)
            message = {
                INVALID_VALUE: NOT_A_NUMBER,
                NO_SUCH_ROLLUP: UNEXPECTED_EXCEPTION,
                ILLEGAL_ARGUMENT: exc.message,
                ROLLUP_UNKNOWN_METRIC: UNKNOWN_METRIC,
            }[exc.kind]
            return Failure(message, echo)
        return None

    return await store_points(request, parse_rollup_body(await request.read()), store)


ROUTES = {"api/rollup": Route(handle_rollup, modes=frozenset({"rw", "wo"}))}
