"""Pure steps of the engine between the scan and the answer: the facts of each series
(tags, TSUIDs), running the kernels over every group, and annotations. Pure (numpy).

Theory of operation (OpenTSDB 2.4.1 src/core/SpanGroup.java, TsdbQuery.java,
HttpJsonSerializer.java for the annotation filter): these run in worker threads, called
by :class:`~tsd.query.engine.QueryEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tsd.codec import AnnotationCell, KeyLayout
from tsd.meta.annotations import annotation_json
from tsd.query.aggregate import Pipeline, aggregate_each, aggregate_group
from tsd.query.limits import QueryControl
from tsd.query.series import AggregatedSeries, SeriesBatch
from tsd.query.spans import Spans
from tsd.query_spec import SubQuery, TSQuery
from tsd.storage.base import Row

__all__ = [
    "SeriesFacts",
    "aggregate_groups",
    "group_annotations",
    "has_data",
    "in_range",
    "parse_note",
    "series_facts",
    "series_tag_uids",
]


@dataclass(slots=True)
class SeriesFacts:
    """Per-series facts of a sub-query once its spans are read."""

    tag_uids: list[dict[bytes, bytes]]
    #: each series' tags, in name order
    tags: list[dict[str, str]]
    tsuids: list[str]
    notes: list[list[AnnotationCell]]
    has_points: list[bool] = field(default_factory=list)


def series_tag_uids(layout: KeyLayout, keys: Sequence[bytes]) -> list[dict[bytes, bytes]]:
    """Each series key's tag pairs, tagk UID -> tagv UID."""
    start = layout.salt_width + layout.metric_width
    pair, kw = layout.tag_pair_width, layout.tagk_width
    return [
        {key[i : i + kw]: key[i + kw : i + pair] for i in range(start, len(key), pair)}
        for key in keys
    ]


def series_facts(
    layout: KeyLayout,
    spans: Spans,
    tag_uids: list[dict[bytes, bytes]],
    tagk_names: dict[bytes, str],
    tagv_names: dict[bytes, str],
) -> SeriesFacts:
    # each series' tags in name order (a group of one takes them as they are): the order
    # worked out once per set of tag keys, not per series
    orders: dict[tuple[bytes, ...], list[tuple[str, bytes]]] = {}
    tags = []
    for t in tag_uids:
        shape = tuple(t)
        order = orders.get(shape)
        if order is None:
            order = orders[shape] = sorted((tagk_names[k], k) for k in shape)
        tags.append({name: tagv_names[t[k]] for name, k in order})
    tsuids = [key[layout.salt_width :].hex().upper() for key in spans.keys]
    has_points = (spans.point_lengths > 0).tolist()
    return SeriesFacts(tag_uids, tags, tsuids, spans.annotations, has_points)


def has_data(row: Row) -> bool:
    return any(len(c.qualifier) % 2 == 0 or c.qualifier[:1] == b"\x05" for c in row.cells)


def aggregate_groups(
    batch: SeriesBatch,
    groups: list[list[int]],
    sub: SubQuery,
    query: TSQuery,
    window: tuple[int, int],
    control: QueryControl | None = None,
) -> list[AggregatedSeries]:
    """Every group of a sub-query through the kernels (runs in a worker thread); the
    query's ``control`` is checked before each group (a cancelled query stops there).
    Groups of one series each (a group-by on a tag every series has its own value of)
    run through the kernels together, without a step per series."""
    pipeline: Pipeline = {
        "start_ms": window[0],
        "end_ms": window[1],
        "query_start_ms": query.start_ms,
        "query_end_ms": query.end_ms,
        "downsample_spec": sub.downsample_spec,
        "rate": sub.rate,
        "rate_options": sub.effective_rate_options,
    }
    if len(groups) > 1 and all(len(members) == 1 for members in groups):
        if control is not None:
            control.check()
        members = [m[0] for m in groups]
        whole = members == list(range(batch.series_count))
        trim = (query.start_ms, query.end_ms) if query.trim_to_range else None
        group = batch if whole else batch.select_series(members)
        return aggregate_each(group, sub.aggregator, trim, **pipeline)
    out = []
    for members in groups:
        if control is not None:
            control.check()
        # Members are increasing series indices: all of them is the batch as it is.
        whole = len(members) == batch.series_count
        group = batch if whole else batch.select_series(members)
        dps = aggregate_group(group, sub.aggregator, **pipeline)
        out.append(dps.trim(query.start_ms, query.end_ms) if query.trim_to_range else dps)
    return out


def parse_note(raw: bytes) -> dict[str, Any] | None:
    """A stored note cell as ``/api/query`` shows it (None when unreadable)."""
    return annotation_json(raw)


def in_range(note: dict[str, Any], query: TSQuery) -> bool:
    """The serializer's filter: the note's start (s or ms) within [start, end] in ms."""
    ts = note.get("startTime", 0)
    if not isinstance(ts, int):
        return False
    ts_ms = ts * 1000 if ts & 0xFFFFFFFF00000000 == 0 else ts
    return query.start_ms <= ts_ms <= query.end_ms


def group_annotations(
    facts: SeriesFacts, members: list[int], query: TSQuery
) -> list[dict[str, Any]] | None:
    """A group's notes (None when it has none), sorted by start, those in range kept."""
    cells = [note for i in members for note in facts.notes[i]]
    if not cells:
        return None
    notes = [n for n in (parse_note(c.json) for c in cells) if n is not None]
    notes.sort(key=lambda n: n.get("startTime", 0) if isinstance(n.get("startTime"), int) else 0)
    return [n for n in notes if in_range(n, query)]
