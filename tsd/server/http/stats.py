"""/api/stats (JSON records) and the legacy /stats (telnet lines, or ``?json`` a list of
them): the same counters as the telnet ``stats`` command."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from tsd.server.http.app import SERVICES, ApiPath, Route, method_not_allowed
from tsd.server.http.errors import json_response
from tsd.stats import format_lines, to_records


async def handle_stats(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    stats = services.registry.collect()
    now = int(time.time())
    if path.is_api:
        return json_response(orjson.dumps(to_records(stats, now, services.stats_tags)))
    text = format_lines(stats, now, services.stats_tags)
    if "json" in request.query:
        return json_response(orjson.dumps(text.splitlines(keepends=True)))
    return web.Response(text=text, content_type="text/plain")


ROUTES = {
    "api/stats": Route(handle_stats),
    "stats": Route(handle_stats, api=False),
}
