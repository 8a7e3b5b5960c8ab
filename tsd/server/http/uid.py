"""/api/uid (UniqueIdRpc): ``assign`` now; other sub-paths answer OpenTSDB's 501.

``assign`` takes ``?metric=a,b&tagk=..&tagv=..`` (GET) or ``{"metric": [..], ...}``
(POST). Each name is validated and assigned on its own; failures go to ``<type>_errors``
(``Name already exists with UID: 000001``) and make the status 400. Result maps are
TreeMaps (sorted by name); the top-level keys come in Java HashMap order.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tsd.codec import uid_to_hex
from tsd.errors import BadRequestError
from tsd.java_text import java_split
from tsd.protocol.names import java_hash_order, validate_string
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed, query_params
from tsd.server.http.uid_meta import UID_ENDPOINTS
from tsd.uid.service import UidService

ASSIGN_TYPES = ("metric", "tagk", "tagv")


async def handle_uid(request: web.Request, path: ApiPath) -> web.StreamResponse:
    endpoint = path.parts[1].lower() if len(path.parts) > 1 else ""
    if endpoint == "assign":
        return await handle_assign(request)
    if endpoint in UID_ENDPOINTS:
        return await UID_ENDPOINTS[endpoint](request)
    raise BadRequestError("Other UID endpoints have not been implemented yet", status=501)


async def handle_assign(request: web.Request) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    if request.method == "POST":
        source = _parse_body(await request.read())
    else:
        params = query_params(request)
        source = {kind: java_split(params[kind], ",") for kind in ASSIGN_TYPES if params.get(kind)}
    if not source:
        raise BadRequestError("Missing values to assign UIDs")
    response: dict[str, dict[str, str]] = {}
    error_count = 0
    for kind in java_hash_order(source):
        results, errors = await _assign_all(services.uids, kind, source[kind], services)
        response[kind] = dict(sorted(results.items()))
        if errors:
            response[f"{kind}_errors"] = dict(sorted(errors.items()))
            error_count += len(errors)
    ordered = {key: response[key] for key in java_hash_order(response)}
    return json_response(orjson.dumps(ordered), 400 if error_count else 200)


async def _assign_all(
    uids: UidService, kind: str, names: list[str], services: Any
) -> tuple[dict[str, str], dict[str, str]]:
    results: dict[str, str] = {}
    errors: dict[str, str] = {}
    special = services.rules.special_chars
    for name in names:
        try:
            validate_string(kind, name, special)
            results[name] = uid_to_hex(await uids.assign(kind, name))
        except BadRequestError as exc:  # OpenTSDB's IllegalArgumentException
            errors[name] = exc.message
    return results, errors


def _parse_body(body: bytes) -> dict[str, list[str]]:
    if not body:
        raise BadRequestError(
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequestError("Unable to parse the given JSON") from None
    if not isinstance(document, dict) or not all(
        isinstance(names, list) and all(isinstance(n, str) for n in names)
        for names in document.values()
    ):
        raise BadRequestError("Unable to parse the given JSON")
    return {kind: names for kind, names in document.items() if names is not None}


ROUTES = {"api/uid": Route(handle_uid, modes=frozenset({"rw", "wo"}))}
