"""Small endpoints: /api/aggregators, /api/config (+/filters), /api/dropcaches, /diediedie."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tsd.config import KEYS, Config, ignored_keys
from tsd.errors import BadRequestError
from tsd.log import HTTP, get_logger
from tsd.protocol.names import java_hash_order
from tsd.query.filters import FILTER_DESCRIPTIONS
from tsd.query.reducers import AGGREGATORS
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.server.peer import is_loopback

log = get_logger(HTTP)


async def handle_aggregators(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    # OpenTSDB serialises the key set of its HashMap: Java's bucket order, unsorted.
    return json_response(orjson.dumps(java_hash_order(AGGREGATORS)))


async def handle_config(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    if len(path.parts) > 1 and path.parts[1].lower() == "filters":
        return json_response(orjson.dumps(FILTER_DESCRIPTIONS))
    return json_response(orjson.dumps(config_values(request.app[SERVICES].config)))


#: The /api/config entry listing the keys set but ignored (comma-separated): a string value
#: like every other, so clients reading OpenTSDB's flat map keep working.
IGNORED_ENTRY = "tsd.config.ignored_keys"


def config_values(config: Config) -> dict[str, str]:
    """Every key tsd reads with its effective value, and the keys set in the file or on
    the command line, sorted; ``PASS`` keys masked. :data:`IGNORED_ENTRY` names those of
    them tsd ignores."""
    values: dict[str, str] = {}
    for key, (section, attr, _) in KEYS.items():
        raw = config.raw.get(key)
        values[key] = raw if raw is not None else _text(getattr(getattr(config, section), attr))
    for key, raw in config.raw.items():
        values.setdefault(key, raw)
    values[IGNORED_ENTRY] = ",".join(ignored_keys(config))
    return {k: ("********" if "PASS" in k.upper() else v) for k, v in sorted(values.items())}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


async def handle_dropcaches(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "DELETE"):
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.uids.drop_caches()
    services.ingest.drop_caches()
    return json_response(orjson.dumps({"status": "200", "message": "Caches dropped"}))


async def handle_diediedie(request: web.Request, path: ApiPath) -> web.StreamResponse:
    services = request.app[SERVICES]
    peer = request.remote or ""
    if services.config.core.diediedie_loopback_only and not is_loopback(peer):
        log.warning("http.diediedie_refused", peer=peer)
        raise BadRequestError("diediedie is only allowed from the loopback interface", status=403)
    log.warning("http.diediedie", peer=peer)
    services.request_shutdown()
    return web.Response(text="Cleaning up and exiting now.\n", content_type="text/plain")


ROUTES = {
    "api/aggregators": Route(handle_aggregators),
    "aggregators": Route(handle_aggregators, api=False),
    "api/config": Route(handle_config),
    "api/dropcaches": Route(handle_dropcaches),
    "diediedie": Route(handle_diediedie, api=False, needs_diediedie=True),
}
