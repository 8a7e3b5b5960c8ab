"""The head's clean rows (:class:`tsd.head.HeadRuns`) straight to decoded arrays. Pure.

A clean row of seconds points is, by construction, what one compacted cell would hold:
2-byte qualifiers strictly increasing in time, each value as long as its flags say. So
no cell is classified, split or merged: the qualifiers of every row, end to end, give the
offsets and flags at once, and the values are read with the decoder's own typed reads
(:func:`tsd.query.decode._values`), which is what :func:`tsd.query.decode.decode_rows`
would compute for the same rows as compacted cells (tests/head checks the answers). Where
the C helper is built (:mod:`tsd.query._decode`, ``decode_runs``) it walks the runs once
instead: at 8.64 M points the numpy path's dozen passes over per-point arrays were most of
a fresh query (tests/query/test_head_rows.py checks both against each other).

Runs from a snapshot carry the rows' own bytes (:class:`tsd.head.head.RowBytes`: packed
parts, then raw tails): the C helper then reads those as they are (``head_points``,
``head_buckets``), so a fresh query's points are neither unpacked into plain rows nor
joined first (the joined qualifiers and values, above, are the specification and the
fallback), and :func:`decode_head_parts` cuts a big read into parts that run on every
core (:func:`tsd.query.compute.spread`: the C walks without the GIL).
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from tsd.codec import KeyLayout
from tsd.head import HeadRuns
from tsd.query import decode
from tsd.query.compute import spread, spread_parts
from tsd.query.decode import (
    RowPoints,
    _values,
    bucket_args,
    compiled_buckets,
    compiled_points,
    key_times,
    reduce_rows,
)
from tsd.query.downsample import RowBuckets

__all__ = ["decode_head_parts", "decode_head_runs"]


def decode_head_parts(
    runs: HeadRuns, layout: KeyLayout, buckets: RowBuckets | None = None
) -> list[tuple[list[bytes], RowPoints]]:
    """:func:`decode_head_runs` of ``runs`` as (keys, points) parts of about equal points,
    decoded at once on the machine's cores (:func:`tsd.query.compute.spread_parts`: one
    part unless the read is big, or the runs carry no rows' bytes)."""
    n = spread_parts(runs.points) if runs.rows is not None and len(runs.keys) > 1 else 1
    if n <= 1:
        return [(runs.keys, decode_head_runs(runs, layout, buckets))]
    ends = np.cumsum(runs.counts)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) // n, side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [len(runs.keys)]])).tolist()
    parts = [runs.part(slice(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]
    found = spread([functools.partial(decode_head_runs, p, layout, buckets) for p in parts])
    return [(p.keys, points) for p, points in zip(parts, found, strict=True)]


def decode_head_runs(
    runs: HeadRuns, layout: KeyLayout, buckets: RowBuckets | None = None
) -> RowPoints:
    """The points of ``runs``' rows, row after row; with ``buckets``, each row reduced to
    its buckets (:func:`tsd.query.decode.decode_buckets`' answer)."""
    key_lengths, bases = key_times(layout, runs.keys)
    base_ms = bases * 1000
    stored = _stored_bytes(runs, key_lengths)
    compiled = decode._C
    rows = runs.rows
    if compiled is not None and runs.keys and rows is not None:
        numbers = (rows.packed, rows.q_lens, rows.v_lens, runs.counts, base_ms)
        own = (rows.bufs, *(np.ascontiguousarray(a, dtype=np.int64) for a in numbers))
        if buckets is not None:
            reduced = compiled.head_buckets(*own, *bucket_args(buckets))
            if reduced is not None:
                return compiled_buckets(reduced, stored)
        else:
            found = compiled.head_points(*own)
            if found is not None:
                return compiled_points(found, stored)
    if compiled is not None and runs.keys:
        arrays = (
            runs.qualifiers,
            runs.values,
            np.ascontiguousarray(runs.counts, dtype=np.int64),
            np.ascontiguousarray(base_ms, dtype=np.int64),
        )
        if buckets is not None:
            reduced = compiled.runs_buckets(*arrays, *bucket_args(buckets))
            if reduced is not None:
                return compiled_buckets(reduced, stored)
        found = compiled.decode_runs(*arrays)
        if found is not None:
            points = compiled_points(found, stored)
            return points if buckets is None else reduce_rows(points, runs.keys, layout, buckets)
    units = np.frombuffer(runs.qualifiers, dtype=">u2").astype(np.int64)
    flags = units & 0xF
    lengths = (flags & 0x7) + 1
    starts = np.cumsum(lengths) - lengths
    buffer = np.frombuffer(runs.values + bytes(8), dtype=np.uint8)
    doubles, ints, is_int = _values(buffer, starts, flags)
    row_offsets = np.zeros(len(runs.keys) + 1, dtype=np.int64)
    np.cumsum(runs.counts, out=row_offsets[1:])
    timestamps = np.repeat(base_ms, runs.counts) + (units >> 4) * 1000
    points = RowPoints(row_offsets, timestamps, doubles, ints, is_int, (), stored)
    return points if buckets is None else reduce_rows(points, runs.keys, layout, buckets)


def _stored_bytes(runs: HeadRuns, key_lengths: npt.NDArray[np.int64]) -> int:
    """What the rows would take as single cells (each point with its key): the query
    limits' count."""
    key_bytes = int(np.dot(key_lengths, runs.counts))
    return key_bytes + runs.plain_bytes
