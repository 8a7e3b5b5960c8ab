"""Pure steps of the engine between the scan and the answer: the facts of each series
(tags, TSUIDs), running the kernels over every group, and annotations. Pure (numpy).

Theory of operation (OpenTSDB 2.4.1 src/core/SpanGroup.java, TsdbQuery.java,
HttpJsonSerializer.java for the annotation filter): these run in worker threads, called
by :class:`~tsd.query.engine.QueryEngine`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from tsd.codec import AnnotationCell, KeyLayout
from tsd.meta.annotations import annotation_json
from tsd.query.aggregate import Pipeline, aggregate_each_joined, aggregate_group
from tsd.query.limits import QueryControl
from tsd.query.series import AggregatedSeries, JoinedSeries, SeriesBatch
from tsd.query.spans import Spans
from tsd.query_spec import SubQuery, TSQuery
from tsd.storage.base import Row

__all__ = [
    "LazyRows",
    "SeriesFacts",
    "TagColumns",
    "column_facts",
    "column_group_tags",
    "tag_columns",
    "aggregate_groups",
    "group_annotations",
    "has_data",
    "in_range",
    "parse_note",
    "series_facts",
    "series_tag_uids",
]


Int64Array = npt.NDArray[np.int64]
T = TypeVar("T")


@dataclass(slots=True)
class TagColumns:
    """The tags of series whose keys have one length and, at each tag pair's position,
    one tag key (a dashboard's metric: every series tagged alike): per position (a
    column) its tag key UID, its distinct value UIDs in ascending order, and each
    series' value as an index into them. A group-by over 10,000 series then builds no
    dict per series: filters look at each distinct value once, names are looked up per
    distinct value, and a series' tags are built only when asked (:class:`LazyRows`)."""

    tagks: list[bytes]
    uniques: list[list[bytes]]
    inverse: list[Int64Array]

    def tagvs(self) -> set[bytes]:
        return {v for values in self.uniques for v in values}


def tag_columns(layout: KeyLayout, keys: Sequence[bytes]) -> TagColumns | None:
    """The series keys' :class:`TagColumns`, worked out over their bytes at once; None
    when they are not of one length and one tag key per position (then each series'
    tags are read from its key: :func:`series_tag_uids`, the spec)."""
    n = len(keys)
    start = layout.salt_width + layout.metric_width
    kw, vw = layout.tagk_width, layout.tagv_width
    pair = kw + vw
    if not n or kw > 8 or vw > 8:
        return None
    width = len(keys[0])
    if width < start or (width - start) % pair:
        return None
    if n <= FEW_COLUMN_SERIES:
        return _few_tag_columns(keys, width, start, kw, pair)
    lengths = np.fromiter(map(len, keys), np.int64, n)
    if lengths.min() != width or lengths.max() != width:
        return None
    pairs = np.frombuffer(b"".join(keys), np.uint8).reshape(n, width)[:, start:]
    pairs = pairs.reshape(n, (width - start) // pair, pair)
    k_weights = np.uint64(256) ** np.arange(kw - 1, -1, -1, dtype=np.uint64)
    v_weights = np.uint64(256) ** np.arange(vw - 1, -1, -1, dtype=np.uint64)
    out = TagColumns([], [], [])
    for j in range(pairs.shape[1]):
        tagk = pairs[:, j, :kw].astype(np.uint64) @ k_weights
        if (tagk != tagk[0]).any():
            return None
        values = pairs[:, j, kw:].astype(np.uint64) @ v_weights
        uniques, inverse = np.unique(values, return_inverse=True)
        out.tagks.append(pairs[0, j, :kw].tobytes())
        out.uniques.append([v.to_bytes(vw, "big") for v in uniques.tolist()])
        out.inverse.append(inverse.reshape(n).astype(np.int64))
    return out


#: up to this many series, :func:`tag_columns` reads the keys one by one (numpy's fixed
#: cost per call is more than their work)
FEW_COLUMN_SERIES = 32


def _few_tag_columns(
    keys: Sequence[bytes], width: int, start: int, kw: int, pair: int
) -> TagColumns | None:
    """:func:`tag_columns` of a few keys: the distinct values of each position sorted
    by their bytes (big-endian and of one width: as the integers sort)."""
    if any(len(k) != width for k in keys):
        return None
    out = TagColumns([], [], [])
    for at in range(start, width, pair):
        tagk = keys[0][at : at + kw]
        if any(k[at : at + kw] != tagk for k in keys):
            return None
        values = [k[at + kw : at + pair] for k in keys]
        uniques = sorted(set(values))
        index = {v: i for i, v in enumerate(uniques)}
        out.tagks.append(tagk)
        out.uniques.append(uniques)
        out.inverse.append(np.fromiter((index[v] for v in values), np.int64, len(values)))
    return out


class LazyRows(Sequence[T]):
    """A per-series fact built only when a series is asked for (``make(i)``): the
    columnar facts' stand-in for a list of one object per series."""

    __slots__ = ("_count", "_make")

    def __init__(self, count: int, make: Any) -> None:
        self._count = count
        self._make = make

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._make(k) for k in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        result: T = self._make(i)
        return result

    def __iter__(self) -> Iterator[T]:
        return map(self._make, range(self._count))


@dataclass(slots=True)
class SeriesFacts:
    """Per-series facts of a sub-query once its spans are read."""

    tag_uids: Sequence[dict[bytes, bytes]]
    #: each series' tags, in name order
    tags: Sequence[dict[str, str]]
    tsuids: Sequence[str]
    notes: list[list[AnnotationCell]]
    has_points: list[bool] = field(default_factory=list)
    #: the tags by column (:class:`TagColumns`), when the keys allow: tag name -> (the
    #: distinct value names, each series' index into them), in name order
    columns: dict[str, tuple[list[str], Int64Array]] | None = None


def column_facts(
    layout: KeyLayout,
    spans: Spans,
    columns: TagColumns,
    tagk_names: dict[bytes, str],
    tagv_names: dict[bytes, str],
) -> SeriesFacts:
    """:func:`series_facts` of series whose tags are :class:`TagColumns`: the same facts,
    each series' tags, tag UIDs and TSUID built only when asked."""
    order = sorted(range(len(columns.tagks)), key=lambda j: tagk_names[columns.tagks[j]])
    by_name = {
        tagk_names[columns.tagks[j]]: (
            [tagv_names[v] for v in columns.uniques[j]],
            columns.inverse[j],
        )
        for j in order
    }
    named = list(by_name.items())
    uids = [(columns.tagks[j], columns.uniques[j], columns.inverse[j]) for j in range(len(order))]

    def tags_of(i: int) -> dict[str, str]:
        return {name: values[int(inverse[i])] for name, (values, inverse) in named}

    def tag_uids_of(i: int) -> dict[bytes, bytes]:
        return {tagk: values[int(inverse[i])] for tagk, values, inverse in uids}

    keys, salt = spans.keys, layout.salt_width

    def tsuid_of(i: int) -> str:
        return keys[i][salt:].hex().upper()

    n = spans.series_count
    has_points = (spans.point_lengths > 0).tolist()
    return SeriesFacts(
        LazyRows(n, tag_uids_of),
        LazyRows(n, tags_of),
        LazyRows(n, tsuid_of),
        spans.annotations,
        has_points,
        by_name,
    )


def column_group_tags(
    columns: dict[str, tuple[list[str], Int64Array]], members: Sequence[int]
) -> tuple[dict[str, str], list[str]]:
    """:func:`~tsd.query.group.group_tags` of the series ``members`` whose tags are
    :attr:`SeriesFacts.columns` (every series has every key there): a tag whose value is
    the same in every member is the group's, the others are aggregated; one comparison
    per tag key, not a dict per series (a sum over 1,000 series)."""
    if not members:
        return {}, []
    picked = np.asarray(members, dtype=np.int64)
    tags: dict[str, str] = {}
    aggregated: list[str] = []
    for name, (values, inverse) in columns.items():
        chosen = inverse[picked]
        if bool((chosen == chosen[0]).all()):
            tags[name] = values[int(chosen[0])]
        else:
            aggregated.append(name)
    return dict(sorted(tags.items())), sorted(aggregated)


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
) -> list[AggregatedSeries] | JoinedSeries:
    """Every group of a sub-query through the kernels (runs in a worker thread); the
    query's ``control`` is checked before each group (a cancelled query stops there).
    Groups of one series each (a group-by on a tag every series has its own value of,
    or one series alone: a raw query's) run through the kernels together, without a step
    per series, and come back joined (:class:`JoinedSeries`)."""
    pipeline: Pipeline = {
        "start_ms": window[0],
        "end_ms": window[1],
        "query_start_ms": query.start_ms,
        "query_end_ms": query.end_ms,
        "downsample_spec": sub.downsample_spec,
        "rate": sub.rate,
        "rate_options": sub.effective_rate_options,
    }
    if groups and all(len(members) == 1 for members in groups):
        if control is not None:
            control.check()
        members = [m[0] for m in groups]
        whole = members == list(range(batch.series_count))
        trim = (query.start_ms, query.end_ms) if query.trim_to_range else None
        group = batch if whole else batch.select_series(members)
        return aggregate_each_joined(group, sub.aggregator, trim, **pipeline)
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
