"""How cells become LMDB keys, preserving HBase's order. Pure.

Each table is one LMDB named database. A cell (row, family, qualifier) is one
LMDB entry whose key is::

    +----------------------+-------+--------------+----+---------------------+
    | escape(row)          | 00 00 | family ASCII | 00 | qualifier (or head) |
    +----------------------+-------+--------------+----+---------------------+

``escape`` writes every row byte as itself except ``00``, which becomes
``00 FF``; ``00 00`` then ends the row. Inside an escaped row every ``00`` is
followed by ``FF``, so the first ``00 00`` is the terminator, and the encoding
sorts exactly as the raw rows do under memcmp: where two rows first differ the
escaped bytes differ the same way (``00 FF`` against a byte >= 01 still starts
lower), and a row that is a prefix of another meets the terminator ``00 00``
where the longer row has ``00 FF`` or a byte >= 01, so it sorts first. Family
names contain no ``00`` and end with one, so cells sort by (family, qualifier)
within a row, and qualifiers, last in the key, need no escaping.

LMDB keys are at most :data:`KEY_LIMIT` (511) bytes, but HBase qualifiers are
not bounded (OpenTSDB's compacted columns concatenate every qualifier of an
hour). So a key holds at most ``room = KEY_LIMIT - len(prefix)`` qualifier
bytes: a qualifier shorter than ``room`` is stored under its own key; all the
qualifiers of at least ``room`` bytes that share their first ``room`` bytes
share one *bucket* key of exactly ``KEY_LIMIT`` bytes, whose value lists them
(sorted by qualifier) as ``[u32 qualifier length][qualifier][u32 value
length][value]``. Every full-length key is a bucket and no other key is, and
buckets sort where their members would, so scans stay in order.

A row whose ``prefix`` (escaped row, terminator, family, separator) exceeds
``KEY_LIMIT`` cannot be stored: :func:`cell_prefix` raises.

*Packed* cells (:func:`is_packed`: the compacted data cells of family ``t``) are not
stored under their own keys: all of a row's packed cells of one family share the entry
``escape(row) 00 00 family 01`` (:func:`packed_key`), whose value is their compressed form
(:mod:`tsd.storage.embedded.packed`). That key sorts after every plain cell of the family
and before the next family, and it is told from a plain key by having no ``00`` after the
row terminator. Which home a cell has depends on its family and qualifier only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import add

from tsd.errors import StorageError

#: LMDB's compile-time maximum key size (MDB_MAXKEYSIZE) in the py-lmdb build.
KEY_LIMIT = 511
ROW_END = b"\x00\x00"
#: sorts after every key of the row it follows and before the next row's keys
ROW_AFTER = b"\x00\x01"
FAMILY_END = b"\x00"
PACKED_END = b"\x01"
#: the family whose compacted cells are packed (OpenTSDB's data family, TSDB.FAMILY)
PACKED_FAMILY = "t"
_LEN = struct.Struct(">I")


def escape_row(row: bytes) -> bytes:
    return row.replace(b"\x00", b"\x00\xff")


def unescape_row(escaped: bytes) -> bytes:
    return escaped.replace(b"\x00\xff", b"\x00")


def row_start(row: bytes) -> bytes:
    """The smallest key of ``row``: every cell key of the row starts with it."""
    return escape_row(row) + ROW_END


def row_after(row: bytes) -> bytes:
    """A key above every cell of ``row`` and below every cell of later rows."""
    return escape_row(row) + ROW_AFTER


def split_row(key: bytes) -> tuple[bytes, int]:
    """The row of a cell key and the offset where its family starts."""
    end = key.find(ROW_END)
    if end < 0:
        raise StorageError(f"corrupt embedded key (no row end): {key[:64]!r}")
    return unescape_row(key[:end]), end + 2


def cell_prefix(row: bytes, family: str) -> bytes:
    """``escape(row) 00 00 family 00``; raises StorageError when it leaves no room."""
    prefix = escape_row(row) + cell_tail(family)
    if len(prefix) > KEY_LIMIT:
        raise StorageError(
            f"row key too long for the embedded store ({len(row)} bytes, "
            f"{len(prefix)} encoded with family {family!r}; at most {KEY_LIMIT})"
        )
    return prefix


def cell_tail(family: str, suffix: bytes = b"") -> bytes:
    """What follows the escaped row in a cell key of ``family`` (``00 00 family 00``), then
    ``suffix`` (a qualifier)."""
    return ROW_END + family.encode("ascii") + FAMILY_END + suffix


def cell_prefixes(rows: Iterable[bytes], family: str, suffix: bytes = b"") -> Iterator[bytes]:
    """:func:`cell_prefix` of each of ``rows`` (unchecked: the caller checks the lengths),
    then ``suffix``, made at C speed: a batch's keys without a Python step per row."""
    tail = cell_tail(family, suffix)
    return map(add, map(bytes.replace, rows, repeat(b"\x00"), repeat(b"\x00\xff")), repeat(tail))


def cell_key(prefix: bytes, qualifier: bytes) -> tuple[bytes, bool]:
    """The LMDB key of a cell, and whether it is a bucket key (see the module docstring)."""
    room = KEY_LIMIT - len(prefix)
    if len(qualifier) < room:
        return prefix + qualifier, False
    return prefix + qualifier[:room], True


def is_bucket(key: bytes) -> bool:
    return len(key) == KEY_LIMIT


def decode_bucket(value: bytes) -> list[tuple[bytes, bytes]]:
    """The (qualifier, value) pairs of a bucket, sorted by qualifier."""
    pairs = []
    pos = 0
    try:
        while pos < len(value):
            (qlen,) = _LEN.unpack_from(value, pos)
            qualifier = value[pos + 4 : pos + 4 + qlen]
            pos += 4 + qlen
            (vlen,) = _LEN.unpack_from(value, pos)
            pairs.append((qualifier, value[pos + 4 : pos + 4 + vlen]))
            pos += 4 + vlen
    except struct.error:
        raise StorageError("corrupt embedded bucket value") from None
    return pairs


def encode_bucket(pairs: dict[bytes, bytes]) -> bytes:
    return b"".join(_LEN.pack(len(q)) + q + _LEN.pack(len(v)) + v for q, v in sorted(pairs.items()))


def is_packed(family: str, qualifier: bytes) -> bool:
    """Whether the cell lives in its row's packed entry: a data-family qualifier of two or
    more points (even length >= 4, not one millisecond point)."""
    size = len(qualifier)
    return (
        family == PACKED_FAMILY and size >= 4 and not size & 1 and (size > 4 or qualifier[0] < 0xF0)
    )


def packed_key(row: bytes, family: str) -> bytes:
    """The key of the row's packed entry for ``family``."""
    key = row_start(row) + family.encode("ascii") + PACKED_END
    if len(key) > KEY_LIMIT:
        cell_prefix(row, family)  # raises the too-long error
    return key
