"""POST /api/v1/read: Prometheus' remote read (SAMPLES responses) from OpenTSDB's tables.

Per query of the ``ReadRequest`` (:mod:`tsd.protocol.prom_wire`):

1. the metric names: the one an ``__name__="..."`` matcher gives, else every metric name
   of the UID table (the suggest index) that the ``__name__`` matchers select;
2. the series of each metric from the series index (the meta table, as
   ``/api/search/lookup`` reads it), their names mapped back to Prometheus labels
   (:func:`tsd.protocol.prom_labels.unmap_series`) and selected with Prometheus' matcher
   semantics (:mod:`tsd.protocol.prom_matchers`), not OpenTSDB's filters;
3. their raw points in [start, end] from the query engine: one sub-query per metric over
   the selected TSUIDs with the ``none`` aggregator (no grouping, no downsampling,
   millisecond timestamps), so the engine's limits (``tsd.query.limits.*``: 413), its
   timeout and its cancellation when the client goes away hold as for /api/query.

Only the SAMPLES response type is answered; a request that accepts only
STREAMED_XOR_CHUNKS gets a 400 (Prometheus' own client asks for SAMPLES).
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tsd.errors import BadRequestError, NoSuchUniqueName
from tsd.meta.lookup import LookupQuery
from tsd.meta.service import MetaService
from tsd.protocol.prom_labels import escape, unescape, unmap_series
from tsd.protocol.prom_matchers import Matcher, compile_matcher, matches_all, metric_matchers
from tsd.protocol.prom_wire import SAMPLES, decode_read_request, encode_read_response
from tsd.query.engine import QueryEngine
from tsd.query_spec import SubQuery, TSQuery
from tsd.server.http.context import SERVICES
from tsd.server.http.meta_support import meta_service
from tsd.server.http.routing import ApiPath, Route, method_not_allowed

#: Metric names listed at most when no ``__name__="..."`` matcher names one.
MAX_METRICS: Final = 1_000_000
#: Series one query may select at most (each becomes a result series).
MAX_SERIES: Final = 100_000

Series = tuple[bytes, list[tuple[str, str]]]
Samples = list[tuple[int, float]]


async def handle_read(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.registry.counter("rpc.received", type="prometheus_read").inc()
    message = decode_read_request(await request.read(), services.config.http.max_body_bytes)
    accepted = list(message.accepted_response_types)
    if accepted and SAMPLES not in accepted:
        raise BadRequestError(
            "Unsupported response type", "tsd answers remote read with SAMPLES only"
        )
    await services.ingest.writer.show_logged()  # every sample remote write acknowledged
    engine = services.engine
    meta = meta_service(request)
    special = services.rules.special_chars
    results: list[list[tuple[list[tuple[str, str]], Samples]]] = []
    points = 0
    for query in message.queries:
        matchers = [compile_matcher(m.type, m.name, m.value) for m in query.matchers]
        selected = await _select(meta, matchers, special)
        found = await _samples(engine, selected, query.start_timestamp_ms, query.end_timestamp_ms)
        points += sum(len(samples) for _, samples in found)
        results.append(found)
    body = await engine.compute(encode_read_response, results, work=points)
    return web.Response(
        body=body,
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
    )


async def _select(meta: MetaService, matchers: list[Matcher], special: str) -> list[list[Series]]:
    """The selected series, per metric: (TSUID, labels)."""
    on_name = metric_matchers(matchers)
    literal = next((m.literal for m in on_name if m.literal), None)
    if literal is not None:
        metrics = [literal]
    else:
        stored = await meta.uids.metrics.suggest("", MAX_METRICS)
        metrics = [
            name for name in map(unescape, stored) if matches_all(on_name, {"__name__": name})
        ]
    lookup = meta.lookup
    selected: list[list[Series]] = []
    count = 0
    for metric in metrics:
        try:
            found = await lookup.lookup(LookupQuery(escape(metric, special), (), limit=0))
        except NoSuchUniqueName:
            continue
        series: list[Series] = []
        for tsuid in found.tsuids:
            name, tags = await lookup.describe(tsuid)
            labels = unmap_series(name, tags.items())
            if matches_all(matchers, dict(labels)):
                series.append((tsuid, labels))
        count += len(series)
        if count > MAX_SERIES:
            raise BadRequestError(
                "Too many series",
                f"the query selects more than {MAX_SERIES} series; narrow its matchers",
                413,
            )
        if series:
            selected.append(series)
    return selected


async def _samples(
    engine: QueryEngine, selected: list[list[Series]], start_ms: int, end_ms: int
) -> list[tuple[list[tuple[str, str]], Samples]]:
    """The raw points of the selected series in [start_ms, end_ms]."""
    if not selected:
        return []
    start_ms = max(0, start_ms)
    end_ms = max(start_ms, end_ms)
    labels_of: dict[str, list[tuple[str, str]]] = {}
    subs: list[SubQuery] = []
    for index, series in enumerate(selected):
        hexes = []
        for tsuid, labels in series:
            text = tsuid.hex().upper()
            labels_of[text] = labels
            hexes.append(text)
        subs.append(SubQuery(aggregator="none", tsuids=tuple(hexes), index=index))
    query = TSQuery(
        start=str(start_ms),
        end=str(end_ms),
        start_ms=start_ms,
        end_ms=end_ms,
        queries=tuple(subs),
        ms_resolution=True,
        no_annotations=True,
    )
    result = await engine.execute(query)
    out: list[tuple[list[tuple[str, str]], Samples]] = []
    for series_result in result.series:
        if len(series_result.dps) == 0 or len(series_result.tsuids) != 1:
            continue
        found = labels_of.get(series_result.tsuids[0].upper())
        if found is None:
            continue
        dps: Any = series_result.dps
        out.append((found, list(zip(dps.timestamps.tolist(), dps.values.tolist(), strict=True))))
    return out


ROUTES = {"api/read": Route(handle_read, modes=frozenset({"rw", "ro"}))}
