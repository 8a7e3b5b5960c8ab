"""What each HTTP request needs: the right (read, write, admin) its route and verb call for.

One table, used by the origin guard (:mod:`tsd.server.http.guard`: a request needing more
than ``read`` changes state, so a foreign browser origin may not make it) and by
authentication (:mod:`tsd.server.http.auth`: the caller's credential must carry the right).
OpenTSDB 2.4 has the same split in ``net.opentsdb.auth.Roles`` (READER = query, WRITER =
put, ADMINISTRATOR = everything) but checks it in each RPC; here it is decided before any
handler runs, so a handler cannot forget it.

The verb is the one the handler acts on: a GET with ``?method_override=delete`` deletes, so
it is classed as a DELETE (OpenTSDB's ``HttpQuery.getAPIMethod``). A route missing from the
table needs ``admin`` (fail closed); ``test_every_route_has_a_right`` keeps the table in
step with the routes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web

from tsd.errors import BadRequestError
from tsd.server.credentials import Right
from tsd.server.http.context import ROUTES
from tsd.server.http.routing import ApiPath, api_method, parse_api_path


def _read_on_get(method: str, path: ApiPath) -> Right:
    return Right.READ if method in ("GET", "HEAD") else Right.WRITE


def _uid(method: str, path: ApiPath) -> Right:
    endpoint = path.parts[1].lower() if len(path.parts) > 1 else ""
    if endpoint == "rename":
        return Right.ADMIN  # renaming a UID rewrites what every series is called
    if endpoint in ("uidmeta", "tsmeta"):
        return _read_on_get(method, path)
    return Right.WRITE  # assign, and anything else under /api/uid


def _query(method: str, path: ApiPath) -> Right:
    # A POST body's "delete": true is checked by the handler (require_right).
    return Right.ADMIN if method == "DELETE" else Right.READ


def _config(method: str, path: ApiPath) -> Right:
    # /api/config/filters is what Grafana's query editor reads; the settings themselves
    # (file paths, the credentials file among them) are the operator's.
    filters = len(path.parts) > 1 and path.parts[1].lower() == "filters"
    return Right.READ if filters else Right.ADMIN


def _always(right: Right) -> Callable[[str, ApiPath], Right]:
    return lambda method, path: right


#: route key (``ApiPath.route``) -> the right a verb on it needs
ROUTE_RIGHTS: Mapping[str, Callable[[str, ApiPath], Right]] = {
    "": _always(Right.READ),
    "s": _always(Right.READ),
    "api": _always(Right.READ),
    "version": _always(Right.READ),
    "api/version": _always(Right.READ),
    "stats": _always(Right.READ),
    "api/stats": _always(Right.READ),
    "metrics": _always(Right.READ),  # what Prometheus scrapes
    "api/serializers": _always(Right.READ),
    "aggregators": _always(Right.READ),
    "api/aggregators": _always(Right.READ),
    "suggest": _always(Right.READ),
    "api/suggest": _always(Right.READ),
    "api/search": _always(Right.READ),
    "api/query": _query,
    "api/put": _always(Right.WRITE),
    "api/write": _always(Right.WRITE),  # Prometheus' remote write
    "api/read": _always(Right.READ),  # Prometheus' remote read: a POST that only reads
    "api/rollup": _always(Right.WRITE),
    "api/histogram": _always(Right.WRITE),
    "api/uid": _uid,
    "api/annotation": _read_on_get,
    "api/annotations": _read_on_get,
    "api/config": _config,
    "api/dropcaches": _always(Right.ADMIN),
    "diediedie": _always(Right.ADMIN),
}


def required_right(request: web.Request) -> Right:
    """The right ``request`` needs; an unparseable path needs only ``read`` (it is answered
    with an error before any handler acts)."""
    try:
        path = parse_api_path(request.path)
    except BadRequestError:
        return Right.READ
    try:
        method = api_method(request)
    except BadRequestError:  # a bad method_override: some handlers ignore it and act on GET
        method = request.method
    rule = ROUTE_RIGHTS.get(path.route)
    if rule is None:  # a route missing from the table: admin, unless it is not served (404)
        return Right.ADMIN if path.route in request.app[ROUTES] else Right.READ
    return rule(method, path)


#: What the guard and authentication learnt about a request, for handlers that find out
#: late that it changes state (a query body with ``"delete": true``).
FOREIGN_ORIGIN = web.RequestKey("tsd.foreign_origin", str)
GRANTED = web.RequestKey("tsd.granted", Right)


def require_right(request: web.Request, right: Right) -> None:
    """Refuse (403) a request that turns out to need ``right``: from a foreign browser
    origin when it changes state, or with a credential short of it."""
    foreign = request.get(FOREIGN_ORIGIN, "")
    if foreign and right != Right.READ:
        raise cross_origin_refused(foreign)
    granted = request.get(GRANTED)
    if granted is not None and right not in granted:
        raise missing_right(right)


def cross_origin_refused(origin: str) -> BadRequestError:
    return BadRequestError(
        "Cross-origin request refused",
        f"A page from {origin!r} may not change this TSD's state; add its origin to "
        "tsd.http.request.cors_domains to allow it",
        status=403,
    )


def missing_right(right: Right) -> BadRequestError:
    return BadRequestError(
        "Forbidden", f"This credential lacks the {str(right.name).lower()!r} right", status=403
    )
