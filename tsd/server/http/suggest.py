"""/api/suggest and the 1.x ``/suggest`` (OpenTSDB's SuggestRpc; behaviour doc §1.6).

``type`` is ``metrics``, ``tagk`` or ``tagv`` (exactly; anything else is 400 "Invalid 'type'
parameter:<type>"), ``q`` a prefix (default empty: every name), ``max`` the number of names
(default 25; 0 or less also means 25). Names come in byte order. Under ``/api`` a POST takes
its parameters from a JSON object body; elsewhere from the query string. Grafana's health
check is ``GET /api/suggest?q=cpu&type=metrics`` and needs exactly 200, which an empty store
answers with ``[]``.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from tsd.errors import BadRequestError
from tsd.meta.binding import as_object, as_text, loads, require_body
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.meta_support import body_of, required_param
from tsd.server.http.routing import ApiPath, Route, method_not_allowed, query_params
from tsd.uid.uniqueid import MAX_SUGGESTIONS

SUGGEST_TYPES = ("metrics", "tagk", "tagv")


async def handle_suggest(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise method_not_allowed(request.method)
    if path.is_api and request.method == "POST":
        fields = as_object(loads(await _required_body(request)), "the suggest query")
        kind = as_text(fields.get("type"), "type")
        if not kind:
            raise BadRequestError("Missing 'type' parameter")
        prefix = as_text(fields.get("q"), "q") or ""
        max_text = as_text(fields.get("max"), "max")
    else:
        params = query_params(request)
        kind = required_param(params, "type")
        prefix = params.get("q", "")
        max_text = params.get("max")
    max_results = _parse_max(max_text)
    if kind not in SUGGEST_TYPES:
        raise BadRequestError(f"Invalid 'type' parameter:{kind}")
    uids = request.app[SERVICES].uids.by_type(kind)
    names = await uids.suggest(prefix, max_results if max_results > 0 else MAX_SUGGESTIONS)
    return json_response(orjson.dumps(names))


async def _required_body(request: web.Request) -> bytes:
    body = await body_of(request)
    require_body(body)
    return body


def _parse_max(text: str | None) -> int:
    """Integer.parseInt of ``max``; absent or empty is 0 (the default)."""
    if not text:
        return 0
    digits = text[1:] if text[0] in "+-" else text
    if not digits.isascii() or not digits.isdigit():
        raise BadRequestError("Unable to parse 'max' as a number")
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise BadRequestError("Unable to parse 'max' as a number")
    return value


ROUTES = {
    "api/suggest": Route(handle_suggest, modes=frozenset({"rw", "ro"})),
    "suggest": Route(handle_suggest, modes=frozenset({"rw", "ro"}), api=False),
}
