"""/api/query and /api/query/last (QueryRpc): parse, run the QueryEngine, serialise.

GET reads the query string, POST the JSON body; the engine answers result objects and
:mod:`tsd.server.http.render` writes them (jsonp is the response middleware's); DELETE
(or ``?method_override=delete``) and a body's ``"delete": true`` need
``tsd.http.query.allow_delete``. ``arrays`` always comes from the query string.
``/api/query/exp`` and ``/gexp`` are :mod:`tsd.server.http.exp`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import time

from aiohttp import web

from tsd.errors import BadRequestError, StorageError, TsdError
from tsd.protocol.query_json import parse_output_options, parse_query_json, parse_query_params
from tsd.query.engine import QueryEngine
from tsd.query.last import parse_last_query_json, parse_last_query_params
from tsd.query.tracking import TrackedQuery
from tsd.server.credentials import Right
from tsd.server.http.access import require_right
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.exp import handle_exp, handle_gexp
from tsd.server.http.render import query_echo, render_last_points, render_query_result
from tsd.server.http.routing import ApiPath, Route, api_method, method_not_allowed
from tsd.server.http.streaming import emitted_points, is_large, stream_query_result

#: A query that may carry a regexp filter (type names are read in any case): it is read in
#: a worker thread, since checking a pattern compiles it (bounded by
#: tsd.protocol.m_syntax.MAX_REGEXP_LENGTH, about 20 ms at worst, once per pattern)
_PATTERNED = re.compile("regexp", re.IGNORECASE)
_PATTERNED_BYTES = re.compile(b"regexp", re.IGNORECASE)
#: A POST body larger than this is read in a worker thread too (a 4 MB query of literals
#: took about 1 s to read)
INLINE_BODY_BYTES = 64 * 1024

_DELETE_DISABLED = BadRequestError(
    "Bad request", "Deleting data is not enabled (tsd.http.query.allow_delete=false)"
)


async def handle_query(request: web.Request, path: ApiPath) -> web.StreamResponse:
    method = api_method(request)
    if method not in ("GET", "POST", "DELETE"):
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    allow_delete = services.config.http.allow_delete
    if method == "DELETE" and not allow_delete:
        raise _DELETE_DISABLED
    engine = services.engine
    endpoint = path.parts[1].lower() if len(path.parts) > 1 else ""
    if endpoint == "last":
        return await _handle_last(request, engine)
    if endpoint == "exp":
        return await handle_exp(request)
    if endpoint == "gexp":
        return await handle_gexp(request)
    registry = services.registry
    tracker = services.query_tracker
    tracked: TrackedQuery | None = None
    started = time.perf_counter()
    try:
        timezone = services.config.core.timezone or "UTC"
        if request.method == "POST":
            body = await request.read()
            parse = functools.partial(parse_query_json, body, default_timezone=timezone)
            patterned = len(body) > INLINE_BODY_BYTES or _PATTERNED_BYTES.search(body) is not None
        else:
            parse = functools.partial(parse_query_params, request.query, default_timezone=timezone)
            patterned = any(_PATTERNED.search(value) for value in request.query.values())
        query = await asyncio.to_thread(parse) if patterned else parse()
        if method == "DELETE":
            query = dataclasses.replace(query, delete=True)
        if query.delete:
            if not allow_delete:
                raise _DELETE_DISABLED
            require_right(request, Right.ADMIN)  # a body's "delete": true
        options = parse_output_options(request.query)
        # from here on, as QueryRpc creates its QueryStats
        tracked = tracker.start(_remote(request), query_echo(query), request.headers)
        result = await engine.execute(query)
    except TsdError as exc:
        # QueryRpc's counters: bad requests apart from failures.
        kind = "invalid_requests" if 400 <= exc.status < 500 else "exceptions"
        registry.counter(f"http.query.{kind}").inc()
        registry.histogram("http.query.latency", outcome=kind).observe(
            time.perf_counter() - started
        )
        answer: TsdError = exc
        if exc.status == 500 and not isinstance(exc, StorageError):
            # QueryRpc answers anything but storage trouble with a 400 (corrupt or
            # duplicate data, an infinite aggregate...), the message as is.
            answer = BadRequestError(exc.message)
        if tracked is not None:
            tracker.finish(tracked, answer.status, exception=answer.message)
        if answer is not exc:
            raise answer from exc
        raise
    except BaseException as exc:  # a bug or a cancelled request: never left "running"
        if tracked is not None:
            tracker.finish(tracked, 500, exception=repr(exc))
        raise
    registry.counter("http.query.success").inc()
    try:
        emitted = emitted_points(result)
        if is_large(result, emitted):
            response = await stream_query_result(
                request, engine, result, arrays=options.arrays, points=emitted
            )
        else:
            points = emitted + len(result.series)
            body = await engine.compute(
                render_query_result, result, arrays=options.arrays, work=points
            )
            response = json_response(body)
    except BaseException as exc:  # the client left while a large answer streamed...
        if tracked is not None:
            tracker.finish(tracked, 500, exception=repr(exc))
        raise
    registry.histogram("http.query.latency", outcome="success").observe(
        time.perf_counter() - started
    )
    if tracked is not None:
        tracker.finish(tracked, 200, stats={"emittedDPs": emitted})
    return response


def _remote(request: web.Request) -> str:
    """``<ip>:<port>`` of the client, as QueryStats' remote address."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return request.remote or ""


async def _handle_last(request: web.Request, engine: QueryEngine) -> web.StreamResponse:
    if request.method == "POST":
        query = parse_last_query_json(await request.read())
    else:
        params = {key: request.query.getall(key) for key in request.query}
        query = parse_last_query_params(params)
    points = await engine.last(query)
    return json_response(render_last_points(points))


ROUTES = {"api/query": Route(handle_query, modes=frozenset({"rw", "ro"}))}
