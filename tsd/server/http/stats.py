"""/api/stats (JSON records) and the legacy /stats (telnet lines, or ``?json`` a list of
them): the same counters as the telnet ``stats`` command. Under /api, the sub-paths
``query``, ``threads``, ``jvm`` and ``region_clients`` (:mod:`.stats_detail`); any other
sub-path is 404 (OpenTSDB answers the plain list there)."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from tsd.errors import BadRequestError
from tsd.server.http.context import SERVICES, Services
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.server.http.stats_detail import process_stats, region_client_stats, thread_stats
from tsd.stats import format_lines, to_records


async def handle_stats(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    if path.is_api and len(path.parts) > 1:
        return _detail(services, path.parts[1].lower())
    stats = services.registry.collect()
    now = int(time.time())
    if path.is_api:
        return json_response(orjson.dumps(to_records(stats, now, services.stats_tags)))
    text = format_lines(stats, now, services.stats_tags)
    if "json" in request.query:
        return json_response(orjson.dumps(text.splitlines(keepends=True)))
    return web.Response(text=text, content_type="text/plain")


def _detail(services: Services, endpoint: str) -> web.StreamResponse:
    body: object
    if endpoint == "query":
        body = services.query_tracker.snapshot()
    elif endpoint == "threads":
        body = thread_stats()
    elif endpoint == "jvm":
        body = process_stats()
    elif endpoint == "region_clients":
        body = region_client_stats(services.config, services.storage_calls)
    else:
        raise BadRequestError("Endpoint not found", status=404)
    return json_response(orjson.dumps(body))


ROUTES = {
    "api/stats": Route(handle_stats),
    "stats": Route(handle_stats, api=False),
}
