"""/api/uid/uidmeta, /api/uid/tsmeta and /api/uid/rename (OpenTSDB's UniqueIdRpc; behaviour
doc §1.8). ``tsd.server.http.uid`` hands these sub-paths to :data:`UID_ENDPOINTS`.

* ``uidmeta``: GET ``?uid=&type=``; POST/PUT a body or ``uid,type,display_name,description,
  notes`` (PUT replaces); DELETE -> 204. Unknown UID -> 404, nothing changed -> 304.
* ``tsmeta``: GET ``?tsuid=`` (404 when absent) or ``?m=metric{k=v}`` (a list); POST/PUT with
  a ``tsuid``, or ``?m=...`` (``&create=true`` to create); DELETE -> 204.
* ``rename``: GET ``?metric=old&name=new`` (or tagk, tagv); POST ``{"metric":"old",
  "name":"new"}`` -> ``{"result":"true"}``, or 400 ``{"result":"false","error":".."}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from tsd.codec import tsuid_from_parts
from tsd.errors import BadRequestError, NoSuchUniqueId, NoSuchUniqueName, NotModified
from tsd.meta.binding import loads, require_body
from tsd.meta.lookup import parse_lookup_m
from tsd.meta.service import MetaService
from tsd.meta.tsmeta import (
    TsMetaUpdate,
    parse_client_tsuid,
    tsmeta_update_from_json,
    tsmeta_update_from_params,
    tsuid_pairs_regex,
)
from tsd.meta.uidmeta import UidMetaUpdate, update_from_json, update_from_params
from tsd.protocol.names import java_hash_order
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import JSON_CONTENT_TYPE, json_response
from tsd.server.http.meta_support import body_of, meta_service, required_param
from tsd.server.http.routing import api_method, method_not_allowed, query_params


def _not_modified() -> web.Response:
    return web.Response(status=304, headers={"Content-Type": JSON_CONTENT_TYPE})


def _no_content() -> web.Response:
    return web.Response(status=204, headers={"Content-Type": JSON_CONTENT_TYPE})


# -- uidmeta ----------------------------------------------------------------------------------


async def handle_uidmeta(request: web.Request) -> web.StreamResponse:
    method = api_method(request)
    meta = meta_service(request)
    try:
        if method == "GET":
            params = query_params(request)
            uid = required_param(params, "uid")
            found = await meta.uid_metas.get(required_param(params, "type"), uid)
            return json_response(orjson.dumps(found.to_json()))
        if method in ("POST", "PUT"):
            update = await _uidmeta_update(request)
            try:
                saved = await meta.uid_metas.sync(update, overwrite=method == "PUT")
            except NotModified:
                return _not_modified()
            return json_response(orjson.dumps(saved.to_json()))
        if method == "DELETE":
            update = await _uidmeta_update(request)
            if not update.uid or not update.type:
                missing = "Missing UID" if not update.uid else "Missing type"
                raise BadRequestError("Unable to delete UIDMeta information", missing)
            await meta.uid_metas.delete(update.type, update.uid)
            return _no_content()
    except NoSuchUniqueId as exc:
        raise BadRequestError("Could not find the requested UID", exc.message, 404) from None
    raise method_not_allowed(method)


async def _uidmeta_update(request: web.Request) -> UidMetaUpdate:
    body = await body_of(request)
    if body:
        require_body(body)
        return update_from_json(loads(body))
    params = query_params(request)
    required_param(params, "uid")
    required_param(params, "type")
    return update_from_params(params)


# -- tsmeta -----------------------------------------------------------------------------------


async def handle_tsmeta(request: web.Request) -> web.StreamResponse:
    method = api_method(request)
    meta = meta_service(request)
    if method == "GET":
        return await _get_tsmeta(request, meta)
    if method in ("POST", "PUT"):
        update = await _tsmeta_update(request)
        try:
            return await _save_tsmeta(request, meta, update, overwrite=method == "PUT")
        except NotModified:
            return _not_modified()
        except (NoSuchUniqueName, NoSuchUniqueId) as exc:
            raise BadRequestError("Unable to find one or more UIDs", exc.message, 404) from None
    if method == "DELETE":
        update = await _tsmeta_update(request)
        if not update.tsuid:
            raise BadRequestError("Unable to delete TSMeta information", "Missing UID")
        await meta.tsmetas.delete(parse_client_tsuid(meta.layout, update.tsuid))
        return _no_content()
    raise method_not_allowed(method)


async def _get_tsmeta(request: web.Request, meta: MetaService) -> web.StreamResponse:
    params = query_params(request)
    try:
        if "tsuid" in params:
            tsuid = parse_client_tsuid(meta.layout, params["tsuid"])
            found = await meta.tsmetas.get(tsuid)
            if found is None:
                raise BadRequestError("Could not find Timeseries meta data", status=404)
            return json_response(orjson.dumps(found.to_json()))
        metric_uid, pairs = await _series_uids(meta, required_param(params, "m"))
        regex = tsuid_pairs_regex(meta.layout, pairs)
        metas = await meta.tsmetas.list_matching(metric_uid, regex)
        return json_response(orjson.dumps([m.to_json() for m in metas]))
    except (NoSuchUniqueName, NoSuchUniqueId) as exc:
        raise BadRequestError("Unable to find one of the UIDs", exc.message, 404) from None


async def _save_tsmeta(
    request: web.Request, meta: MetaService, update: TsMetaUpdate, overwrite: bool
) -> web.StreamResponse:
    store = meta.tsmetas
    if update.tsuid:
        tsuid = parse_client_tsuid(meta.layout, update.tsuid)
        saved = await store.sync(tsuid, update.changes, overwrite)
        return json_response(orjson.dumps(saved.to_json()))
    params = query_params(request)
    metric_uid, pairs = await _series_uids(meta, required_param(params, "m"))
    tsuid = tsuid_from_parts(meta.layout, metric_uid, pairs)
    if await store.exists(tsuid):
        saved = await store.sync(tsuid, update.changes, overwrite)
    elif params.get("create") == "true":
        saved = await store.create(tsuid, update.changes)
    else:
        raise BadRequestError('Could not find TSMeta, specify "create=true" to create a new one.')
    return json_response(orjson.dumps(saved.to_json()))


async def _series_uids(meta: MetaService, m: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """``metric{k=v,...}`` -> UIDs (Tags.parseWithMetric into a map: a later pair of the
    same key wins)."""
    metric, pairs = parse_lookup_m(m)
    if metric is None:
        raise BadRequestError("The metric cannot be empty")
    tags: dict[str, str] = {}
    for key, value in pairs:
        if key is None or value is None:
            raise BadRequestError(f"invalid tag: {key or ''}={value or ''}")
        tags[key] = value
    metric_uid = await meta.uids.metrics.get_id(metric)
    uid_pairs = [
        (await meta.uids.tagk.get_id(k), await meta.uids.tagv.get_id(v)) for k, v in tags.items()
    ]
    return metric_uid, uid_pairs


async def _tsmeta_update(request: web.Request) -> TsMetaUpdate:
    body = await body_of(request)
    if body:
        require_body(body)
        return tsmeta_update_from_json(loads(body))
    return tsmeta_update_from_params(query_params(request))


# -- rename -----------------------------------------------------------------------------------

RENAME_TYPES = ("metric", "tagk", "tagv", "name")


async def handle_rename(request: web.Request) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        raise BadRequestError(
            "Method not allowed",
            f"The HTTP method[{request.method}] is not permitted for this endpoint",
            status=405,
        )
    if request.method == "POST":
        body = await body_of(request)
        require_body(body)
        document = loads(body)
        if not isinstance(document, dict) or not all(isinstance(v, str) for v in document.values()):
            raise BadRequestError("Unable to parse the given JSON")
        source: dict[str, str] = document
    else:
        params = query_params(request)
        source = {key: params[key] for key in RENAME_TYPES if params.get(key)}
    kind = old_name = new_name = None
    for key in java_hash_order(source):  # OpenTSDB walks a HashMap: its last type wins
        if key == "name":
            new_name = source[key]
        else:
            kind, old_name = key, source[key]
    if kind is None or old_name is None or new_name is None:
        raise BadRequestError("Missing necessary values to rename UID")
    try:
        await request.app[SERVICES].uids.rename(kind, old_name, new_name)
    except BadRequestError as exc:
        reply = {"result": "false", "error": exc.message}
        ordered = {key: reply[key] for key in java_hash_order(reply)}
        return json_response(orjson.dumps(ordered), 400)
    return json_response(orjson.dumps({"result": "true"}))


#: sub-path of /api/uid -> handler
UID_ENDPOINTS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "uidmeta": handle_uidmeta,
    "tsmeta": handle_tsmeta,
    "rename": handle_rename,
}
