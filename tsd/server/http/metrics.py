"""GET /metrics: tsd's own figures in Prometheus' text exposition format.

A custom prometheus-client Collector reads the same :class:`~tsd.stats.StatsRegistry` as
``/api/stats`` at scrape time, so every counter, gauge and latency histogram tsd keeps is
exposed without a second set of counters to keep in step. Names: ``tsd.`` + the stat name
with dots and dashes as underscores (``uid.cache-hit`` -> ``tsd_uid_cache_hit``), counters
with prometheus-client's ``_total``; the stat's one tag becomes a label. The ``host`` tag
of ``/api/stats`` is left out: Prometheus labels a target itself. Process figures (CPU,
memory, open files) come from prometheus-client's own process collector.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from tsd.server.http.context import SERVICES
from tsd.server.http.routing import ApiPath, Route, method_not_allowed
from tsd.stats import PREFIX, StatsRegistry

#: Help text of the families whose meaning the name does not carry.
HELP = {
    "ingest.points": "Data points received, by protocol",
    "ingest.errors": "Data points refused (bad input, unknown metric, storage), by protocol",
    "datapoints.added": "Data points buffered by the writer",
    "datapoints.stored": "Data point cells the store acknowledged",
    "writer.batch.latency": "Seconds to write one batch to storage, retries included",
    "http.query.latency": "Seconds to answer /api/query, by outcome",
    "storage.calls": "Storage calls, by operation",
    "storage.errors": "Storage calls that failed, by operation",
    "storage.latency": "Seconds per storage call, by operation",
    "storage.check_and_puts": "Check-and-puts, one per checked cell (HBase: one checkAndPut each)",
    "uid.cache-hit": "UID cache hits, by kind",
    "uid.cache-miss": "UID cache misses, by kind",
    "uid.cache-size": "Entries in the UID cache, by kind",
    "spool.backlog": "Data points waiting in the write-ahead log for HBase, by unit",
    "spool.backlog_age_s": "Seconds the oldest data point has waited in the log for HBase",
    "spool.active": "1 while batches wait in the write-ahead log for HBase",
    "spool.drained": "Records and cells stored into HBase from the log after an outage",
    "spool.errors": "Failed attempts to store the oldest waiting record",
    "spool.refused": "Data points refused because the log held tsd.storage.wal.max_bytes",
    "prometheus.write.skipped": "Remote write samples not stored: NaN, stale or infinite",
    "prometheus.write.refused": "Remote write samples refused (their series), by reason",
    "native.helpers.loaded": "Compiled helpers loaded (setup.py's extensions; the rest: Python)",
    "native.helper.loaded": "1 if this compiled helper loaded, 0 if its Python fallback runs",
}


def prometheus_name(stat_name: str) -> str:
    """``rpc.received`` -> ``tsd_rpc_received`` (dots and dashes are not allowed)."""
    return f"{PREFIX}_{stat_name}".replace(".", "_").replace("-", "_")


class StatsCollector(Collector):
    """Translates a StatsRegistry into metric families at each scrape."""

    def __init__(self, registry: StatsRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        families: dict[tuple[str, bool], list[tuple[dict[str, str], int]]] = {}
        for stat in self._registry.collect():
            labels = {stat.tag[0]: stat.tag[1]} if stat.tag is not None else {}
            families.setdefault((stat.name, stat.monotonic), []).append((labels, stat.value))
        names = [name for name, _ in families]
        for (name, monotonic), samples in families.items():
            family_name = prometheus_name(name)
            if not monotonic and names.count(name) > 1:
                # One stat name with both kinds (connectionmgr.connections: open is a
                # gauge, total and rejected count): a family has one type.
                family_name += "_current"
            help_text = HELP.get(name, f"tsd.{name}")
            label_names = _label_names(labels for labels, _ in samples)
            family: CounterMetricFamily | GaugeMetricFamily
            if monotonic:
                family = CounterMetricFamily(family_name, help_text, labels=label_names)
            else:
                family = GaugeMetricFamily(family_name, help_text, labels=label_names)
            for labels, value in samples:
                family.add_metric([labels.get(key, "") for key in label_names], value)
            yield family
        yield from self._histograms()

    def _histograms(self) -> Iterator[Metric]:
        grouped: dict[str, list[tuple[dict[str, str], list[tuple[str, float]], float]]] = {}
        for stat in self._registry.collect_histograms():
            labels = {stat.tag[0]: stat.tag[1]} if stat.tag is not None else {}
            buckets = [
                ("+Inf" if bound == float("inf") else repr(bound), float(count))
                for bound, count in stat.histogram.cumulative()
            ]
            grouped.setdefault(stat.name, []).append((labels, buckets, stat.histogram.sum))
        for name, samples in grouped.items():
            label_names = _label_names(labels for labels, _, _ in samples)
            family = HistogramMetricFamily(
                prometheus_name(name) + "_seconds",
                HELP.get(name, f"tsd.{name}"),
                labels=label_names,
            )
            for labels, buckets, total in samples:
                values = [labels.get(key, "") for key in label_names]
                family.add_metric(values, buckets, total)
            yield family


def _label_names(label_sets: Iterable[dict[str, str]]) -> list[str]:
    """Every label of a family's samples (a sample without one has it empty)."""
    return sorted({key for labels in label_sets for key in labels})


def exposition_registry(registry: StatsRegistry) -> CollectorRegistry:
    """A prometheus-client registry holding tsd's stats and the process collector."""
    exposed = CollectorRegistry(auto_describe=False)
    exposed.register(StatsCollector(registry))
    exposed.register(ProcessCollector(registry=None))
    return exposed


async def handle_metrics(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method)
    # Built per scrape (two small objects): collectors read everything at collect time.
    exposed = exposition_registry(request.app[SERVICES].registry)
    response = web.Response(body=generate_latest(exposed))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


ROUTES = {"metrics": Route(handle_metrics, api=False)}
