"""/api/uid (UniqueIdRpc): ``assign`` now; other sub-paths answer OpenTSDB's 501.

``assign`` takes ``?metric=a,b&tagk=..&tagv=..`` (GET) or ``{"metric": [..], ...}``
(POST). Each name is validated on its own, then the valid ones are assigned in batches
(the UID paths writes use, in request order); failures go to ``<type>_errors``
(``Name already exists with UID: 000001``) and make the status 400. At most
``MAX_ASSIGN_NAMES`` names a request (400 beyond). Result maps are
TreeMaps (sorted by name); the top-level keys come in Java HashMap order.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tsd.codec import uid_to_hex
from tsd.errors import BadRequestError, UidAlreadyExists
from tsd.java_text import java_split
from tsd.protocol.names import java_hash_order, validate_string
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed, query_params
from tsd.server.http.uid_meta import UID_ENDPOINTS
from tsd.uid.service import UidService

ASSIGN_TYPES = ("metric", "tagk", "tagv")
#: Names one request may assign (OpenTSDB has no limit; 100,000 names take a few seconds
#: in batches, and the body limit alone would admit millions).
MAX_ASSIGN_NAMES = 100_000


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
    count = sum(map(len, source.values()))
    if count > MAX_ASSIGN_NAMES:
        raise BadRequestError(
            f"Too many names to assign: {count}",
            f"At most {MAX_ASSIGN_NAMES} names per request (metric, tagk and tagv together)",
        )
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
    """Every name of one kind, validated, then assigned in batches; a name's failure
    (OpenTSDB's IllegalArgumentException: invalid, or a UID already) is its error alone.
    A name given twice is, the second time, one that exists."""
    results: dict[str, str] = {}
    errors: dict[str, str] = {}
    special = services.rules.special_chars
    valid: list[str] = []
    for name in names:
        try:
            validate_string(kind, name, special)
        except BadRequestError as exc:
            errors[name] = exc.message
        else:
            valid.append(name)
    outcomes = await uids.assign_many(kind, valid)
    seen: set[str] = set()
    for name in valid:
        outcome = outcomes[name]
        if name in seen and isinstance(outcome, bytes):
            outcome = UidAlreadyExists(kind, name, outcome)
        seen.add(name)
        if isinstance(outcome, BadRequestError):
            errors[name] = outcome.message
        elif isinstance(outcome, BaseException):
            raise outcome  # a storage failure: the request's 500, as one name's was
        else:
            results[name] = uid_to_hex(outcome)
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
