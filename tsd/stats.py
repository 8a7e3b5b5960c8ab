"""In-process counters and gauges behind telnet ``stats`` and ``/api/stats``. Pure and sync.

OpenTSDB's StatsCollector emits one record per (name, extra tag): ``tsd.<name> <unix s>
<value> [<xtratag>] host=<hostname>`` on telnet, and on ``/api/stats`` the same records as
``{"metric": "tsd.<name>", "timestamp": s, "value": "<string>", "tags": {...}}``. We keep
its names (``rpc.received type=put``, ``datapoints.added type=all``...) so dashboards built
on OpenTSDB's self-metrics keep working.

Counters are plain objects with an integer ``value``; hot paths do ``counter.value += n``
(no locks: one event loop owns them).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: prefix of every stat name, as OpenTSDB's ``new StatsCollector("tsd")``.
PREFIX = "tsd"


class Counter:
    """A monotonically growing count."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


#: Upper bounds (seconds) of latency histograms: 1 ms to 30 s, as Prometheus' defaults
#: stretched down to the sub-millisecond writes of the embedded store.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class Histogram:
    """Observations counted in fixed buckets (cumulative when read), with their sum.

    Kept here rather than as prometheus-client objects so that hot paths stay free of its
    locks and the registry stays the one source for every exposition format.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with (inf, count)."""
        total = 0
        buckets = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            buckets.append((bound, total))
        return buckets


@dataclass(frozen=True, slots=True)
class Stat:
    """One record: ``name`` without the ``tsd.`` prefix, at most one extra tag.

    ``monotonic``: the value only grows (a counter, or a gauge reading one), which
    exporters that type their samples (Prometheus) need to know.
    """

    name: str
    value: int
    tag: tuple[str, str] | None
    monotonic: bool = True


@dataclass(frozen=True, slots=True)
class HistogramStat:
    """A histogram as collected: ``name`` without the prefix, at most one extra tag."""

    name: str
    tag: tuple[str, str] | None
    histogram: Histogram


_Key = tuple[str, tuple[str, str] | None]


def _tag_of(tags: dict[str, str]) -> tuple[str, str] | None:
    if len(tags) > 1:
        raise ValueError("a stat carries at most one extra tag, as OpenTSDB's xtratag")
    return next(iter(tags.items()), None)


class StatsRegistry:
    """Named counters and gauges, collected in registration order."""

    def __init__(self) -> None:
        self._counters: dict[_Key, Counter] = {}
        self._gauges: dict[_Key, Callable[[], int]] = {}
        self._monotonic_gauges: set[_Key] = set()
        self._histograms: dict[_Key, Histogram] = {}
        self._order: list[_Key] = []

    def counter(self, name: str, **tags: str) -> Counter:
        """The counter for (name, tag), created on first use."""
        key = (name, _tag_of(tags))
        found = self._counters.get(key)
        if found is None:
            found = self._counters[key] = Counter()
            self._order.append(key)
        return found

    def gauge(
        self, name: str, read: Callable[[], int], *, monotonic: bool = False, **tags: str
    ) -> None:
        """A value read when the stats are collected (replaces an earlier one);
        ``monotonic`` when it reads a count that only grows (kept elsewhere)."""
        key = (name, _tag_of(tags))
        if key not in self._gauges and key not in self._counters:
            self._order.append(key)
        self._gauges[key] = read
        if monotonic:
            self._monotonic_gauges.add(key)
        else:
            self._monotonic_gauges.discard(key)

    def histogram(self, name: str, **tags: str) -> Histogram:
        """The latency histogram (seconds) for (name, tag), created on first use. Histograms
        are not part of :meth:`collect` (OpenTSDB's stats have no such records)."""
        key = (name, _tag_of(tags))
        found = self._histograms.get(key)
        if found is None:
            found = self._histograms[key] = Histogram()
        return found

    def collect(self) -> list[Stat]:
        stats = []
        for key in self._order:
            name, tag = key
            counter = self._counters.get(key)
            if counter is not None:
                stats.append(Stat(name, int(counter.value), tag))
            else:
                value = int(self._gauges[key]())
                stats.append(Stat(name, value, tag, key in self._monotonic_gauges))
        return stats

    def collect_histograms(self) -> list[HistogramStat]:
        return [HistogramStat(name, tag, h) for (name, tag), h in self._histograms.items()]


def host_tag(hostname: str, canonical: bool = False) -> tuple[str, str]:
    """``host=<name>``, or ``fqdn=<name>`` with ``tsd.stats.canonical``."""
    return ("fqdn" if canonical else "host", hostname)


def format_lines(stats: Iterable[Stat], timestamp_s: int, extra: Iterable[tuple[str, str]]) -> str:
    """The telnet ``stats`` reply: one line per stat, each ending in a newline."""
    tail = "".join(f" {k}={v}" for k, v in extra)
    lines = []
    for stat in stats:
        tag = f" {stat.tag[0]}={stat.tag[1]}" if stat.tag is not None else ""
        lines.append(f"{PREFIX}.{stat.name} {timestamp_s} {stat.value}{tag}{tail}\n")
    return "".join(lines)


def to_records(
    stats: Iterable[Stat], timestamp_s: int, extra: Iterable[tuple[str, str]]
) -> list[dict[str, object]]:
    """The ``/api/stats`` body: values as strings, as OpenTSDB's IncomingDataPoint has them."""
    extra_tags = dict(extra)
    records: list[dict[str, object]] = []
    for stat in stats:
        tags = dict(extra_tags)
        if stat.tag is not None:
            tags[stat.tag[0]] = stat.tag[1]
        records.append(
            {
                "metric": f"{PREFIX}.{stat.name}",
                "timestamp": timestamp_s,
                "value": str(stat.value),
                "tags": tags,
            }
        )
    return records
