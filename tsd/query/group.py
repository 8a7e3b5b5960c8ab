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

import numpy as np
import numpy.typing as npt

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


def group_key_bytes(
    keys: Sequence[bytes],
    start: int,
    tagk_width: int,
    tagv_width: int,
    group_by: Sequence[bytes],
    kept: npt.NDArray[np.int64],
) -> list[list[int]] | None:
    """:func:`group_series` of the series ``kept`` (increasing indices into ``keys``),
    each keyed by its value UIDs of the ``group_by`` tag keys (concatenated; a series
    lacking one is dropped), worked out over the series keys' bytes at once: the tag pairs
    from ``start`` as a byte matrix, each group-by key's column found by comparison, the
    groups by one stable sort of the values as integers (a group-by over 10,000 series:
    no key per series in Python). None when the keys are not all of one length or a value
    does not fit 8 bytes: the caller then keys each series (the spec)."""
    n = len(keys)
    if not n or not len(kept):
        return []
    width = len(keys[0])
    pair = tagk_width + tagv_width
    if tagv_width > 8 or width < start or (width - start) % pair:
        return None
    if n <= FEW_SERIES:
        if any(len(k) != width for k in keys):
            return None
        return _group_few(keys, start, tagk_width, pair, group_by, kept.tolist())
    lengths = np.fromiter(map(len, keys), np.int64, n)
    if lengths.min() != width or lengths.max() != width:
        return None
    matrix = np.frombuffer(b"".join(keys), np.uint8).reshape(n, width)[kept]
    pairs = matrix[:, start:].reshape(len(kept), (width - start) // pair, pair)
    rows = np.arange(len(kept))
    valid = np.ones(len(kept), np.bool_)
    columns = []
    weights = np.uint64(256) ** np.arange(tagv_width - 1, -1, -1, dtype=np.uint64)
    for tagk in group_by:
        hit = (pairs[:, :, :tagk_width] == np.frombuffer(tagk, np.uint8)).all(axis=2)
        valid &= hit.any(axis=1)
        values = pairs[rows, hit.argmax(axis=1), tagk_width:].astype(np.uint64)
        columns.append(values @ weights)
    members = kept[valid]
    columns = [c[valid] for c in columns]
    if not len(members):
        return []
    order = np.lexsort(columns[::-1])  # the first key's values first; stable: members in order
    changed = np.zeros(len(members), np.bool_)
    changed[0] = True
    for column in columns:
        ordered = column[order]
        changed[1:] |= ordered[1:] != ordered[:-1]
    bounds = [*np.flatnonzero(changed).tolist(), len(members)]
    flat = members[order].tolist()
    return [flat[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


#: up to this many series, :func:`group_key_bytes` keys them one by one (numpy's fixed
#: cost per call is more than their work)
FEW_SERIES = 32


def _group_few(
    keys: Sequence[bytes],
    start: int,
    tagk_width: int,
    pair: int,
    group_by: Sequence[bytes],
    kept: list[int],
) -> list[list[int]]:
    """:func:`group_key_bytes` of a few series, a key at a time: the group-by values'
    bytes joined (big-endian, fixed width: they sort as the integers do), the groups
    sorted by them, members in order."""
    groups: dict[bytes, list[int]] = {}
    for i in kept:
        key = keys[i]
        values: dict[bytes, bytes] = {}
        for at in range(start, len(key), pair):
            values.setdefault(key[at : at + tagk_width], key[at + tagk_width : at + pair])
        try:
            joined = b"".join([values[tagk] for tagk in group_by])
        except KeyError:
            continue  # lacks a group-by key: dropped
        groups.setdefault(joined, []).append(i)
    return [groups[k] for k in sorted(groups)]


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
