"""Packed rows straight to points, for the query path.

:func:`tsd.storage.embedded.packed.unpack_many` gives a packed row's exact cells; a query
then decoded those bytes again. For a batch of rows that are each one packed entry,
:func:`decode` reads every entry's columns straight into points instead (the C helper
``_points.c``): no cell bytes, no per-entry Python. It takes the entries whose points are
exactly what :mod:`tsd.query.decode` finds in the cells (one fast cell of two or more
points, readable flags, offsets increasing; docs/format/embedded.md) and gives up on the
whole batch otherwise, or when the helper is not built: the caller then unpacks the cells.

zstd-compressed entries (a small share: only payloads that shrink by a tenth) are
decompressed together first, one call for all whose size the header tells
(``multi_decompress_to_buffer``), one each for the others (raw values under a flags column).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import zstandard

import tsd.native as native
from tsd.storage.base import CellBlock, PointBlock
from tsd.storage.embedded import packed
from tsd.storage.embedded.keys import ROW_END, unescape_row

_C: Any = native.load("tsd.storage.embedded._points")

__all__ = ["available", "decode", "packed_rows"]


def available() -> bool:
    """Whether the C helper is built (without it every batch takes the cells path)."""
    return _C is not None


def packed_rows(
    entries: list[tuple[bytes, bytes]], suffix: bytes
) -> tuple[list[bytes], list[bytes]] | None:
    """The rows and values of ``(key, value)`` entries read from a packed database: each
    key's escaped row (before its first ``00 00``, keys.py) unescaped, when what follows is
    ``suffix`` (the family and ``PACKED_END``) and its value is not empty; None when any
    entry is not so."""
    if _C is not None:
        found: tuple[list[bytes], list[bytes]] | None = _C.packed_rows(entries, suffix)
        return found
    rows, values = [], []
    for key, value in entries:
        end = key.find(ROW_END)
        if end < 0 or key[end + 2 :] != suffix or not value:
            return None
        rows.append(unescape_row(key[:end]))
        values.append(value)
    return rows, values


def decode(
    keys: list[bytes], entries: list[bytes], cells: Callable[[], CellBlock]
) -> PointBlock | None:
    """The points of rows ``keys``, each holding only the packed entry of the same index;
    None when any entry is not one :func:`decode` takes. ``cells`` builds the same rows'
    CellBlock (:meth:`PointBlock.cells`)."""
    if _C is None:
        return None
    found = _C.points(entries, None)
    if found is not None and len(found) == 3:
        try:
            payloads = _payloads(len(entries), *found)
        except zstandard.ZstdError:
            return None  # the cells path raises the corrupt entry's error
        found = _C.points(entries, payloads)
    if found is None:
        return None
    counts, qlen, vlen, offsets, doubles, ints, is_int = found
    key_lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    # one cell per row: its key, qualifier and value bytes
    stored = int(key_lengths.sum()) + int(np.frombuffer(qlen, np.int64).sum())
    stored += int(np.frombuffer(vlen, np.int64).sum())
    return PointBlock(
        keys,
        np.frombuffer(counts, np.int64),
        np.frombuffer(offsets, np.int64),
        np.frombuffer(doubles, np.float64),
        None if ints is None else np.frombuffer(ints, np.int64),
        None if is_int is None else np.frombuffer(is_int, np.bool_),
        len(keys),
        stored,
        cells,
    )


def _payloads(
    count: int, indices: list[int], frames: list[bytes], sizes: bytearray
) -> list[object | None]:
    """The decompressed payloads of the entries at ``indices`` (None elsewhere)."""
    found: list[object | None] = [None] * count
    known = np.frombuffer(sizes, np.uint64)
    sized = np.flatnonzero(known > 0).tolist()
    if sized:
        together = packed.decompress_many(
            [frames[i] for i in sized], known[sized].astype(np.uint64).tobytes()
        )
        for i, payload in zip(sized, together, strict=True):
            found[indices[i]] = payload
    for i in np.flatnonzero(known == 0).tolist():
        found[indices[i]] = packed.decompress(frames[i])
    return found
