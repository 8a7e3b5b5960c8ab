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


@dataclass(frozen=True, slots=True)
class Stat:
    """One record: ``name`` without the ``tsd.`` prefix, at most one extra tag."""

    name: str
    value: int
    tag: tuple[str, str] | None


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
        self._order: list[_Key] = []

    def counter(self, name: str, **tags: str) -> Counter:
        """The counter for (name, tag), created on first use."""
        key = (name, _tag_of(tags))
        found = self._counters.get(key)
        if found is None:
            found = self._counters[key] = Counter()
            self._order.append(key)
        return found

    def gauge(self, name: str, read: Callable[[], int], **tags: str) -> None:
        """A value read when the stats are collected (replaces an earlier one)."""
        key = (name, _tag_of(tags))
        if key not in self._gauges and key not in self._counters:
            self._order.append(key)
        self._gauges[key] = read

    def collect(self) -> list[Stat]:
        stats = []
        for key in self._order:
            name, tag = key
            counter = self._counters.get(key)
            value = counter.value if counter is not None else self._gauges[key]()
            stats.append(Stat(name, int(value), tag))
        return stats


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
