"""Append columns: one cell per row collecting ``qualifier‖value`` entries.

(Written when ``tsd.storage.enable_appends`` is true.)

Theory of operation (behaviour doc §4.3 "Append column"; OpenTSDB 2.4.1
``src/core/AppendDataPoints.java`` getBytes / parseKeyValue, ``src/core/TSDB.java``
addPointInternal, ``src/core/Internal.java`` extractQualifier / getValueLengthFromQualifier):

* The column qualifier is ``05 00 00``. Each write is an HBase Append of one entry: the point's
  usual 2- or 4-byte qualifier followed by its value bytes, so entries accumulate in arrival
  order. There is no meta byte.
* Reading walks the entries (qualifier length from the ms marker, value length from the
  flags), keys them by offset in milliseconds, and keeps the *later* entry of a duplicate
  offset, then sorts by offset. All bytes must be consumed.
* With ``tsd.storage.repair_appends`` OpenTSDB rewrites an unsorted or duplicated cell older
  than an hour with the sorted, de-duplicated entries (:func:`repair_append_value`).
"""

from __future__ import annotations

from typing import Final

from tsd.codec.const import (
    APPEND_COLUMN_PREFIX,
    APPEND_COLUMN_QUALIFIER,
    FLAG_BITS,
    LENGTH_MASK,
    MS_BYTE_FLAG,
    MS_FLAG_BITS,
    MS_OFFSET_MASK,
)
from tsd.errors import CodecError, IllegalDataError

__all__ = [
    "APPEND_COLUMN_QUALIFIER",
    "compact_append_value",
    "encode_append_entry",
    "is_append_qualifier",
    "parse_append_value",
    "repair_append_value",
]

#: AppendDataPoints' IllegalDataException text for a cell that does not split cleanly.
CORRUPTED_APPEND: Final = (
    "Corrupted value: couldn't break down into individual values"
    " (consumed {consumed} bytes, but was expecting to consume {expected})"
)


def is_append_qualifier(qualifier: bytes) -> bool:
    """AppendDataPoints.isAppendDataPoints: a 3-byte qualifier starting with 0x05."""
    return len(qualifier) == 3 and qualifier[0] == APPEND_COLUMN_PREFIX


def encode_append_entry(qualifier: bytes, value: bytes) -> bytes:
    """The bytes one point appends to the ``05 00 00`` cell (AppendDataPoints.getBytes)."""
    if not qualifier:
        raise CodecError("Qualifier cannot be null or empty")
    if not value:
        raise CodecError("Value cannot be null or empty")
    return qualifier + value


def parse_append_value(value: bytes) -> list[tuple[int, bytes, bytes]]:
    """Split an append cell into ``(offset_ms, qualifier, value)`` entries.

    Entries come back sorted by offset; of two entries at the same offset (in ms, whatever
    the qualifier form) the one appended later wins. Raises IllegalDataError when the bytes
    do not split into whole entries.
    """
    entries: dict[int, tuple[int, bytes, bytes]] = {}
    idx = 0
    end = len(value)
    while idx < end:
        first = value[idx]
        if first & MS_BYTE_FLAG == MS_BYTE_FLAG:
            q_end = idx + 4
            if q_end > end:
                raise IllegalDataError(CORRUPTED_APPEND.format(consumed=idx, expected=end))
            raw = int.from_bytes(value[idx:q_end], "big")
            offset_ms = (raw & MS_OFFSET_MASK) >> MS_FLAG_BITS
        else:
            q_end = idx + 2
            if q_end > end:
                raise IllegalDataError(CORRUPTED_APPEND.format(consumed=idx, expected=end))
            raw = int.from_bytes(value[idx:q_end], "big")
            offset_ms = (raw >> FLAG_BITS) * 1000
        v_end = q_end + (raw & LENGTH_MASK) + 1
        if v_end > end:
            raise IllegalDataError(CORRUPTED_APPEND.format(consumed=q_end, expected=end))
        entries[offset_ms] = (offset_ms, value[idx:q_end], value[q_end:v_end])
        idx = v_end
    return [entries[k] for k in sorted(entries)]


def compact_append_value(value: bytes) -> tuple[bytes, bytes]:
    """AppendDataPoints.qualifier()/value(): sorted, de-duplicated qualifiers and values."""
    entries = parse_append_value(value)
    return b"".join(e[1] for e in entries), b"".join(e[2] for e in entries)


def repair_append_value(value: bytes) -> bytes:
    """The healed append cell OpenTSDB writes back when repairing: sorted, de-duplicated."""
    return b"".join(q + v for _, q, v in parse_append_value(value))
