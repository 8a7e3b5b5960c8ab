"""Group-by: splitting a sub-query's series into groups, and each group's tags. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.1 step 4 and §1.2
"Response"; OpenTSDB src/core/TsdbQuery.java ``GroupByAndAggregateCB``,
src/core/SpanGroup.java ``computeTags``):

* aggregator ``none``: every series is its own group (and nothing is aggregated);
* no group-by filter: one group with every series;
* otherwise a series' group is the tuple of its values of the group-by tag keys; a series
  lacking one of those keys is dropped. OpenTSDB orders groups by the tag value UIDs
  (in tag key UID order), so the caller passes keys that sort that way — the
  concatenated UID bytes — or tag value strings when UIDs are not at hand.

A group's ``tags`` are the tag pairs whose value is the same in every series of the group
that has the key (a key present in only some series still counts), and its
``aggregateTags`` are the keys whose values differ.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def group_series(keys: Sequence[K | None]) -> list[tuple[K, list[int]]]:
    """Series indices per distinct key, groups sorted by key, series kept in order.

    ``keys[i]`` is series ``i``'s group key or None to drop it. Use one constant key for
    "no group-by"; for aggregator ``none`` put every series in a group of its own.
    """
    groups: dict[K, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            groups.setdefault(key, []).append(i)
    return sorted(groups.items(), key=lambda item: item[0])  # type: ignore[arg-type,return-value]


def group_tags(series_tags: Sequence[Mapping[str, str]]) -> tuple[dict[str, str], list[str]]:
    """(tags, aggregateTags) of a group, as SpanGroup.computeTags works them out.

    ``aggregateTags`` is sorted by name (OpenTSDB's order comes from a hash set).
    """
    if len(series_tags) == 1:  # a group of one (a group-by on a tag of its own): its tags
        return dict(sorted(series_tags[0].items())), []
    common: dict[str, str] = {}
    aggregated: set[str] = set()
    for tags in series_tags:
        for tagk, tagv in tags.items():
            if tagk in aggregated:
                continue
            seen = common.get(tagk)
            if seen is None:
                common[tagk] = tagv
            elif seen != tagv:
                aggregated.add(tagk)
                del common[tagk]
    return dict(sorted(common.items())), sorted(aggregated)
