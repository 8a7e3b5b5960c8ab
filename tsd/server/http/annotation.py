"""/api/annotation, /api/annotations and /api/annotation/bulk (OpenTSDB's AnnotationRpc;
behaviour doc §1.9). Storage and JSON shapes: :mod:`tsd.meta.annotations`.

* ``/api/annotation``: GET one note (``?tsuid=&start_time=``, or a body) -> 404 when missing;
  POST merges, PUT replaces (304 when nothing was set); DELETE -> 204. No tsuid = global.
* ``/api/annotations``: GET the global notes of ``start_time``..``end_time`` (end default now).
* ``/api/annotation/bulk``: POST/PUT an array (the saved notes back; unchanged ones left
  out); DELETE ``{"tsuids":[..],"startTime":..,"endTime":..,"global":bool}`` or the same in
  the query string -> the request echoed with ``totalDeleted``.

Query-string times go through OpenTSDB's time parser and are then cut to seconds, as
``AnnotationRpc.parseQS`` does.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from tsd.errors import BadRequestError, NotModified
from tsd.meta.annotations import AnnotationUpdate, annotation_update_from_json
from tsd.meta.binding import as_bool, as_object, as_text, as_text_list, loads, require_body
from tsd.meta.tsmeta import parse_client_tsuid
from tsd.protocol.timespec import parse_datetime
from tsd.server.http.errors import JSON_CONTENT_TYPE, json_response
from tsd.server.http.meta_support import body_of, meta_service, required_param
from tsd.server.http.routing import ApiPath, Route, api_method, method_not_allowed, query_params


async def handle_annotation(request: web.Request, path: ApiPath) -> web.StreamResponse:
    method = api_method(request)
    endpoint = path.parts[1] if len(path.parts) > 1 else ""
    if endpoint.lower().endswith("bulk"):
        return await _bulk(request, method)
    body = await body_of(request)
    update = _update_from_body(body) if body else _update_from_params(request)
    store = meta_service(request).annotations
    if method == "GET":
        if path.parts[0].lower() == "annotations":
            end_s = _note_end(update) or int(time.time())
            notes = await store.global_in_range(update.start_time, end_s)
            return json_response(orjson.dumps([n.to_json() for n in notes]))
        note = await store.get(update.tsuid, update.start_time)
        if note is None:
            raise BadRequestError("Unable to locate annotation in storage", status=404)
        return json_response(orjson.dumps(note.to_json()))
    if method in ("POST", "PUT"):
        try:
            saved = await store.sync(update, overwrite=method == "PUT")
        except NotModified:
            return web.Response(status=304, headers={"Content-Type": JSON_CONTENT_TYPE})
        return json_response(orjson.dumps(saved.to_json()))
    if method == "DELETE":
        if update.start_time < 1:
            raise BadRequestError(
                "Unable to delete Annotation information", "The start timestamp has not been set"
            )
        await store.delete(update.tsuid, update.start_time)
        return web.Response(status=204, headers={"Content-Type": JSON_CONTENT_TYPE})
    raise method_not_allowed(method)


def _note_end(update: AnnotationUpdate) -> int:
    end = update.changes.get("end_time", 0)
    return end if isinstance(end, int) else 0


def _update_from_body(body: bytes) -> AnnotationUpdate:
    require_body(body)
    return annotation_update_from_json(loads(body))


def _update_from_params(request: web.Request) -> AnnotationUpdate:
    """AnnotationRpc.parseQS: times parsed, then divided to seconds."""
    params = query_params(request)
    start_ms = parse_datetime(params.get("start_time", ""))
    if start_ms < 1:
        raise BadRequestError("Missing start time")
    changes: dict[str, Any] = {}
    end_ms = parse_datetime(params.get("end_time", ""))
    if end_ms >= 1000:  # absent is -1, which Java's division turns into 0
        changes["end_time"] = end_ms // 1000
    for key in ("description", "notes"):
        if params.get(key):
            changes[key] = params[key]
    return AnnotationUpdate(params.get("tsuid", ""), start_ms // 1000, changes)


# -- bulk -------------------------------------------------------------------------------------


async def _bulk(request: web.Request, method: str) -> web.StreamResponse:
    if method in ("POST", "PUT"):
        return await _bulk_update(request, overwrite=method == "PUT")
    if method == "DELETE":
        return await _bulk_delete(request)
    raise method_not_allowed(request.method)


async def _bulk_update(request: web.Request, overwrite: bool) -> web.StreamResponse:
    body = await body_of(request)
    require_body(body)
    document = loads(body)
    if not isinstance(document, list):
        raise BadRequestError("Unable to parse the given JSON", "expected an array of annotations")
    updates = [annotation_update_from_json(item) for item in document]
    store = meta_service(request).annotations
    for update in updates:  # validate them all before writing any
        try:
            store.cell_address(update.tsuid, update.start_time)
        except BadRequestError as exc:
            raise BadRequestError(
                exc.message, f"Annotation error: {_describe(update)}", 400
            ) from None
    saved = await store.sync_many(updates, overwrite)
    return json_response(orjson.dumps([note.to_json() for note in saved]))


def _describe(update: AnnotationUpdate) -> str:
    """Annotation.toString."""
    description = update.changes.get("description", "")
    return f"TSUID: {update.tsuid} Start: {update.start_time}  Description: {description}"


async def _bulk_delete(request: web.Request) -> web.StreamResponse:
    body = await body_of(request)
    if body:
        require_body(body)
        fields = as_object(loads(body), "AnnotationBulkDelete")
        start_text = as_text(fields.get("startTime"), "startTime")
        end_text = as_text(fields.get("endTime"), "endTime")
        tsuids = as_text_list(fields.get("tsuids"), "tsuids")
        is_global = as_bool(fields.get("global"), "global")
    else:
        params = query_params(request)
        start_text = required_param(params, "start_time")
        end_text = params.get("end_time")
        tsuids = [t.strip() for t in params["tsuids"].split(",")] if "tsuids" in params else None
        is_global = "global" in params
    if not start_text:
        raise BadRequestError("Missing the start time value")
    if not is_global and not tsuids:
        raise BadRequestError("Missing the TSUIDs or global annotations flag")
    start_ms = parse_datetime(start_text)
    end_ms = parse_datetime(end_text) if end_text else int(time.time() * 1000)
    meta = meta_service(request)
    total = 0
    if is_global:
        total += await meta.annotations.delete_range(None, start_ms, end_ms)
    for text in tsuids or ():
        tsuid = parse_client_tsuid(meta.layout, text)
        total += await meta.annotations.delete_range(tsuid, start_ms, end_ms)
    reply = {
        "startTime": start_ms,
        "endTime": end_ms,
        "tsuids": tsuids,
        "global": is_global,
        "totalDeleted": total,
    }
    return json_response(orjson.dumps(reply))


ROUTES = {
    "api/annotation": Route(handle_annotation, modes=frozenset({"rw", "wo"})),
    "api/annotations": Route(handle_annotation, modes=frozenset({"rw", "wo"})),
}
