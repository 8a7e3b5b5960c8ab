"""Reading a data row's ``t`` cells, and OpenTSDB's compaction of them into one cell.

Theory of operation (behaviour doc §4.3, §4.4; OpenTSDB 2.4.1 ``src/core/Internal.java``
extractDataPoints / fixQualifierFlags / fixFloatingPointValue, ``src/core/CompactionQueue.java``
Compaction, ``src/core/ColumnDatapointIterator.java``, ``src/core/AppendDataPoints.java``):

A row's cells are told apart by their qualifier:

* even length 2: one point in seconds. Legacy fix-ups apply: a "4-byte float" on 8 bytes
  with 4 zero leading bytes is the last 4 bytes, and the flags' length is re-derived from
  the value's actual length.
* even length 4 with the ms marker (first byte & 0xF0 == 0xF0): one point in milliseconds.
* any other even length: a compacted cell, i.e. the concatenated qualifiers of its points
  (2- and 4-byte forms may mix) and the concatenated values plus **one trailing meta byte**
  (bit 0x01 = seconds and ms mixed). Every value byte but the last must be consumed.
* odd length: ``05 00 00`` append cell (:mod:`tsd.codec.append`); ``01``+offset annotation
  (value = JSON); anything else (histograms ``06``, unknown kinds) is skipped, as OpenTSDB
  skips it with a warning.

Merging (CompactionQueue's default mode) orders points by offset in ms. At equal offsets the
point from the most recently written cell comes first; tsd has no cell write times, so a
cell later in the input counts as newer (callers with HBase timestamps should pass cells
oldest first). A following point with identical value bytes is dropped; with different
bytes OpenTSDB raises "Duplicate timestamp ..." unless ``fix_duplicates``, which keeps the
first (newest) one. The compacted cell is the merged qualifiers, the merged values and, when
it holds more than one point, the meta byte.

This is the scalar reference decoder; a faster one must produce identical output.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

from tsd.codec.append import is_append_qualifier, parse_append_value
from tsd.codec.const import (
    ANNOTATION_PREFIX,
    APPEND_COLUMN_PREFIX,
    FLAG_BITS,
    FLAG_FLOAT,
    LENGTH_MASK,
    MS_BYTE_FLAG,
    MS_FLAG_BITS,
    MS_MIXED_COMPACT,
    MS_OFFSET_MASK,
)
from tsd.codec.qualifier import decode_annotation_qualifier
from tsd.codec.value import decode_value
from tsd.errors import IllegalDataError
from tsd.java_text import format_java_bytes

__all__ = [
    "DUPLICATE_TIMESTAMP",
    "AnnotationCell",
    "DecodedPoint",
    "DecodedRow",
    "compact_row",
    "decode_cells",
    "join_compacted",
    "split_cell",
]

#: CompactionQueue's IllegalDataException for two values at one time.
DUPLICATE_TIMESTAMP: Final = (
    "Duplicate timestamp for key={key}, ms_offset={offset_ms}, older={older}, newer={newer}"
    "; set tsd.storage.fix_duplicates=true to fix automatically or run Fsck"
)
#: Internal.extractDataPoints' IllegalDataException for a compacted cell that does not split.
CORRUPTED_COMPACTED: Final = (
    "Corrupted value: couldn't break down into individual values"
    " (consumed {consumed} bytes, but was expecting to consume {expected})"
)


class DecodedPoint(NamedTuple):
    """One data point of a row. ``qualifier`` is its own 2- or 4-byte qualifier (fixed up)."""

    timestamp_ms: int
    value: int | float
    qualifier: bytes
    value_bytes: bytes

    @property
    def is_ms(self) -> bool:
        """True when the point was written with a millisecond qualifier."""
        return len(self.qualifier) == 4

    @property
    def is_float(self) -> bool:
        return self.qualifier[-1] & FLAG_FLOAT != 0


class AnnotationCell(NamedTuple):
    """An annotation stored in a data row: its time and its raw JSON bytes."""

    timestamp_ms: int
    qualifier: bytes
    json: bytes


class DecodedRow(NamedTuple):
    """Everything in a row's ``t`` family: points sorted by time, annotations, skipped cells."""

    points: tuple[DecodedPoint, ...]
    annotations: tuple[AnnotationCell, ...]
    skipped: tuple[tuple[bytes, bytes], ...]


# (offset_ms, qualifier, value bytes) of one point, before merging.
_Entry = tuple[int, bytes, bytes]


def _fix_single_second_cell(qualifier: bytes, value: bytes) -> tuple[bytes, bytes]:
    """ColumnDatapointIterator.checkForFixup for a 2-byte cell: legacy float, then length."""
    last = qualifier[1]
    if last & FLAG_FLOAT and last & LENGTH_MASK == 0x3 and len(value) == 8:
        decode_value(last, value)  # raises on a non-zero prefix, with OpenTSDB's message
        value = value[4:]
    if not 1 <= len(value) <= 8:
        raise IllegalDataError(
            f"Value of a single cell must be 1 to 8 bytes: {format_java_bytes(value)}"
        )
    fixed = (last & ~LENGTH_MASK & 0xFF) | (len(value) - 1)
    if fixed != last:
        qualifier = bytes((qualifier[0], fixed))
    return qualifier, value


def split_cell(qualifier: bytes, value: bytes) -> list[_Entry]:
    """The points of one data cell (single or compacted) as ``(offset_ms, qualifier, value)``.

    Internal.extractDataPoints for one even-length column, in stored order.
    """
    length = len(qualifier)
    if length == 0:
        raise IllegalDataError("Empty qualifier")
    if length == 2:
        qualifier, value = _fix_single_second_cell(qualifier, value)
        offset_ms = (int.from_bytes(qualifier, "big") >> FLAG_BITS) * 1000
        return [(offset_ms, qualifier, value)]
    if length == 4 and qualifier[0] & MS_BYTE_FLAG == MS_BYTE_FLAG:
        raw = int.from_bytes(qualifier, "big")
        vlen = (raw & LENGTH_MASK) + 1
        if len(value) < vlen:
            raise IllegalDataError(CORRUPTED_COMPACTED.format(consumed=0, expected=vlen))
        return [((raw & MS_OFFSET_MASK) >> MS_FLAG_BITS, qualifier, value[:vlen])]
    entries: list[_Entry] = []
    q_idx = 0
    v_idx = 0
    expected = len(value) - 1  # the meta byte is not a value byte
    while q_idx < length:
        if qualifier[q_idx] & MS_BYTE_FLAG == MS_BYTE_FLAG:
            q_end = q_idx + 4
            if q_end > length:
                raise IllegalDataError(
                    "Detected a millisecond flag but qualifier length is too short"
                )
            raw = int.from_bytes(qualifier[q_idx:q_end], "big")
            offset_ms = (raw & MS_OFFSET_MASK) >> MS_FLAG_BITS
        else:
            q_end = q_idx + 2
            raw = int.from_bytes(qualifier[q_idx:q_end], "big")
            offset_ms = (raw >> FLAG_BITS) * 1000
        v_end = v_idx + (raw & LENGTH_MASK) + 1
        if v_end > len(value):
            raise IllegalDataError(CORRUPTED_COMPACTED.format(consumed=v_idx, expected=expected))
        entries.append((offset_ms, qualifier[q_idx:q_end], value[v_idx:v_end]))
        q_idx = q_end
        v_idx = v_end
    if v_idx != expected:
        raise IllegalDataError(CORRUPTED_COMPACTED.format(consumed=v_idx, expected=expected))
    return entries


def _merge(data_cells: list[list[_Entry]], fix_duplicates: bool, row_key: bytes) -> list[_Entry]:
    """CompactionQueue.defaultMergeDataPoints over the cells' entries."""
    if len(data_cells) == 1:
        # The common read: one compacted cell, already strictly ordered.
        entries = data_cells[0]
        if all(entries[i][0] < entries[i + 1][0] for i in range(len(entries) - 1)):
            return entries
    keyed = [
        (entry[0], -cell_index, position, entry)
        for cell_index, entries in enumerate(data_cells)
        for position, entry in enumerate(entries)
    ]
    keyed.sort(key=lambda k: k[:3])
    merged: list[_Entry] = []
    for offset_ms, _, _, entry in keyed:
        if merged and merged[-1][0] == offset_ms:
            kept = merged[-1][2]
            if kept != entry[2] and not fix_duplicates:
                raise IllegalDataError(
                    DUPLICATE_TIMESTAMP.format(
                        key=format_java_bytes(row_key),
                        offset_ms=offset_ms,
                        older=format_java_bytes(kept),
                        newer=format_java_bytes(entry[2]),
                    )
                )
            continue
        merged.append(entry)
    return merged


def _classify(
    base_time_s: int, cells: Iterable[tuple[bytes, bytes]]
) -> tuple[list[list[_Entry]], list[AnnotationCell], list[tuple[bytes, bytes]], int]:
    """Sort cells into data entries per cell, annotations and skipped cells."""
    data_cells: list[list[_Entry]] = []
    annotations: list[AnnotationCell] = []
    skipped: list[tuple[bytes, bytes]] = []
    single_untouched = -1  # index of a data cell that is one point needing no fix-up
    for qualifier, value in cells:
        if len(qualifier) % 2 == 0:
            entries = split_cell(qualifier, value)
            if len(entries) == 1 and entries[0][1] == qualifier and entries[0][2] == value:
                single_untouched = len(data_cells)
            data_cells.append(entries)
        elif qualifier[0] == APPEND_COLUMN_PREFIX:
            if not is_append_qualifier(qualifier):
                raise IllegalDataError(
                    f"Can not parse cell, it is not an appended cell: {qualifier.hex()!r}"
                )
            data_cells.append(parse_append_value(value))
        elif qualifier[0] == ANNOTATION_PREFIX and len(qualifier) in (3, 5):
            offset_ms = decode_annotation_qualifier(qualifier)
            annotations.append(AnnotationCell(base_time_s * 1000 + offset_ms, qualifier, value))
        else:
            skipped.append((qualifier, value))
    return data_cells, annotations, skipped, single_untouched


def decode_cells(
    base_time_s: int,
    cells: Iterable[tuple[bytes, bytes]],
    *,
    fix_duplicates: bool = False,
    row_key: bytes = b"",
) -> DecodedRow:
    """Decode every cell of a row's ``t`` family, as OpenTSDB's read path compacts a row.

    ``cells`` are ``(qualifier, value)`` pairs, oldest first when write order is known.
    Points come back sorted by time with duplicates resolved as in compaction: identical
    ones dropped, conflicting ones raise IllegalDataError (message naming ``row_key``)
    unless ``fix_duplicates``.
    """
    data_cells, annotations, skipped, _ = _classify(base_time_s, cells)
    base_ms = base_time_s * 1000
    points = tuple(
        DecodedPoint(base_ms + offset_ms, decode_value(qualifier[-1], value), qualifier, value)
        for offset_ms, qualifier, value in _merge(data_cells, fix_duplicates, row_key)
    )
    annotations.sort(key=lambda a: a.timestamp_ms)
    return DecodedRow(points, tuple(annotations), tuple(skipped))


def compact_row(
    cells: Iterable[tuple[bytes, bytes]],
    fix_duplicates: bool = False,
    *,
    row_key: bytes = b"",
) -> tuple[bytes, bytes] | None:
    """OpenTSDB's compacted cell ``(qualifier, value)`` for a row's cells, or None if no point.

    Non-data cells (annotations, unknown kinds) are left out: OpenTSDB never merges them.
    A row holding a single one-point cell that needs no fix-up compacts to that cell as is.
    Raises IllegalDataError for corrupt cells and, unless ``fix_duplicates``, for two
    different values at one time.
    """
    data_cells, _, _, single_untouched = _classify(0, cells)
    if len(data_cells) == 1 and single_untouched == 0:
        _, qualifier, value = data_cells[0][0]
        decode_value(qualifier[-1], value)
        return qualifier, value
    merged = _merge(data_cells, fix_duplicates, row_key)
    if not merged:
        return None
    has_ms = False
    has_s = False
    for _, qualifier, value in merged:
        decode_value(qualifier[-1], value)  # the same validation a reader applies
        if len(qualifier) == 4:
            has_ms = True
        else:
            has_s = True
    return join_compacted(
        b"".join(e[1] for e in merged), b"".join(e[2] for e in merged), len(merged), has_ms, has_s
    )


def join_compacted(
    qualifiers: bytes, values: bytes, count: int, has_ms: bool, has_s: bool
) -> tuple[bytes, bytes]:
    """The compacted cell of ``count`` points already merged: strictly increasing offsets,
    canonical flags (as the writer encodes them, and as :func:`compact_row` leaves them),
    their qualifiers and values joined in that order. One point is its own cell; more get
    the meta byte (bit 0x01: seconds and milliseconds mixed)."""
    if count > 1:
        values += bytes((MS_MIXED_COMPACT if has_ms and has_s else 0,))
    return qualifiers, values
