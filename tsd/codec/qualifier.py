"""Column qualifiers of data points and annotations: offset and flags in, bytes out, and back.

Theory of operation (behaviour doc §4.3 and §4.7; OpenTSDB 2.4.1 ``src/core/Internal.java``
buildQualifier / getOffsetFromQualifier / getQualifierLength / getFlagsFromQualifier,
``src/core/Const.java``, ``src/meta/Annotation.java`` getQualifier / timeFromQualifier):

* Seconds qualifier, 2 bytes: ``offset_s << 4 | flags`` with the offset 0..3599 from the
  row's base time. Its first byte is at most 0xE0.
* Millisecond qualifier, 4 bytes: ``0xF0000000 | offset_ms << 6 | flags``: the top nibble
  ``1111`` marks it, 22 offset bits (0..3599999), 2 reserved zero bits, 4 flag bits.
* Flags: bit 3 float, bits 0-2 value length - 1 (see ``tsd.codec.value``).
* A timestamp is milliseconds when it does not fit in 32 bits (``Const.SECOND_MASK``), not
  by digit count; the row's base time is always in seconds.
* Annotation qualifier: ``0x01`` then the plain (unshifted, flagless) offset on 2 bytes in
  seconds or on 4 bytes in milliseconds. A start time that is a multiple of 1000 is divided
  by 1000 first (see :func:`encode_annotation_qualifier` for the quirk this causes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, cast

import tsd.native as native
from tsd.codec.const import (
    ANNOTATION_PREFIX,
    FLAG_BITS,
    FLAGS_FLOAT32,
    FLAGS_FLOAT64,
    FLAGS_INT1,
    FLAGS_INT2,
    FLAGS_INT4,
    FLAGS_MASK,
    MAX_MS_OFFSET,
    MAX_SECONDS_OFFSET,
    MAX_TIMESPAN,
    MS_BYTE_FLAG,
    MS_FLAG,
    MS_FLAG_BITS,
    MS_OFFSET_MASK,
    SECOND_MASK,
)
from tsd.codec.value import encode_value
from tsd.errors import CodecError, IllegalDataError

if TYPE_CHECKING:
    from tsd.codec.rowkey import SeriesKey

__all__ = [
    "build_qualifier",
    "decode_annotation_qualifier",
    "decode_qualifier",
    "encode_annotation_qualifier",
    "encode_ms_qualifier",
    "encode_point",
    "ENCODER_TABLES",
    "encode_points_into",
    "python_encode_points_into",
    "encode_seconds_qualifier",
    "is_ms_qualifier",
    "is_ms_timestamp",
    "qualifier_length",
    "reference_encode_point",
    "split_timestamp",
]

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_PACK_SHORT = struct.Struct(">h").pack
_PACK_INT = struct.Struct(">i").pack
_PACK_FLOAT = struct.Struct(">f").pack
_UNPACK_FLOAT = struct.Struct(">f").unpack
_PACK_DOUBLE = struct.Struct(">d").pack
#: One-byte values by their unsigned byte (index ``value & 0xFF``).
_INT1_BYTES: Final = tuple(bytes((b,)) for b in range(256))

# the compiled helper (setup.py); the Python loop below is its fallback and spec
_c_encode_into: Any = native.attribute("tsd.codec._encode", "encode_into")
#: Every 2-byte seconds qualifier, indexed by ``offset_s << 4 | flags`` (57,600 entries,
#: about 2.5 MB: a tuple index is several times cheaper than packing on the hot path).
_SECONDS_QUALIFIERS: Final = tuple(map(_H.pack, range((MAX_SECONDS_OFFSET + 1) << FLAG_BITS)))

#: Internal.validateQualifier's IllegalDataException text.
OFFSET_OUT_OF_BOUNDS: Final = (
    "Offset of [{offset}] is out of bounds for the qualifier length of [{length}]"
)


def is_ms_timestamp(timestamp: int) -> bool:
    """True when OpenTSDB reads ``timestamp`` as milliseconds: any bit above 32 is set."""
    return timestamp & SECOND_MASK != 0


def is_ms_qualifier(qualifier: bytes, offset: int = 0) -> bool:
    """True when the data point qualifier at ``offset`` is the 4-byte millisecond form."""
    return qualifier[offset] & MS_BYTE_FLAG == MS_BYTE_FLAG


def encode_seconds_qualifier(offset_s: int, flags: int) -> bytes:
    """The 2-byte qualifier for a point ``offset_s`` (0..3599) seconds into its row."""
    if not 0 <= offset_s <= MAX_SECONDS_OFFSET:
        raise CodecError(f"seconds offset out of range 0..{MAX_SECONDS_OFFSET}: {offset_s!r}")
    return _H.pack(offset_s << FLAG_BITS | (flags & FLAGS_MASK))


def encode_ms_qualifier(offset_ms: int, flags: int) -> bytes:
    """The 4-byte qualifier for a point ``offset_ms`` (0..3599999) ms into its row."""
    if not 0 <= offset_ms <= MAX_MS_OFFSET:
        raise CodecError(f"millisecond offset out of range 0..{MAX_MS_OFFSET}: {offset_ms!r}")
    return _I.pack(MS_FLAG | offset_ms << MS_FLAG_BITS | (flags & FLAGS_MASK))


def split_timestamp(timestamp: int) -> tuple[int, int, bool]:
    """``(base_time_s, offset, is_ms)``: the offset is in the timestamp's own unit.

    Internal.baseTime(long): ms timestamps (beyond 32 bits) are cut to seconds first.
    """
    if timestamp < 0:
        raise CodecError(f"negative timestamp: {timestamp!r}")
    if timestamp & SECOND_MASK:
        seconds = timestamp // 1000
        base_time_s = seconds - seconds % MAX_TIMESPAN
        return base_time_s, timestamp - base_time_s * 1000, True
    base_time_s = timestamp - timestamp % MAX_TIMESPAN
    return base_time_s, timestamp - base_time_s, False


def build_qualifier(timestamp: int, flags: int) -> bytes:
    """Internal.buildQualifier: the 2- or 4-byte qualifier of an absolute timestamp."""
    _, offset, is_ms = split_timestamp(timestamp)
    if is_ms:
        return _I.pack(MS_FLAG | offset << MS_FLAG_BITS | (flags & FLAGS_MASK))
    return _H.pack(offset << FLAG_BITS | (flags & FLAGS_MASK))


def encode_point(timestamp: int, value: int | float) -> tuple[int, bytes, bytes]:
    """Encode one data point as OpenTSDB writes it: ``(base_time_s, qualifier, value_bytes)``.

    ``timestamp`` is seconds when it fits in 32 bits, else milliseconds (ms qualifier).
    Raises CodecError as :func:`tsd.codec.value.encode_value` does, and for a negative
    timestamp.

    The ingest hot path calls this once per point, so the usual cases are inline: an int
    of 1 to 8 bytes, a float (one call to the float encoder), a seconds timestamp whose
    qualifier comes from a table; :func:`reference_encode_point` is the plain composition
    of :func:`encode_value` and :func:`build_qualifier`, which the tests compare it with.
    """
    if type(value) is int:
        if -0x80 <= value <= 0x7F:
            flags = FLAGS_INT1
            value_bytes = _INT1_BYTES[value & 0xFF]
        elif -0x8000 <= value <= 0x7FFF:
            flags = FLAGS_INT2
            value_bytes = _PACK_SHORT(value)
        elif -0x80000000 <= value <= 0x7FFFFFFF:
            flags = FLAGS_INT4
            value_bytes = _PACK_INT(value)
        else:
            flags, value_bytes = encode_value(value)  # 8 bytes, or out of range
    elif type(value) is float and value - value == 0.0:  # finite (inf - inf and NaN are NaN)
        try:
            single = _PACK_FLOAT(value)
        except OverflowError:  # beyond float32's range
            flags, value_bytes = FLAGS_FLOAT64, _PACK_DOUBLE(value)
        else:
            if _UNPACK_FLOAT(single)[0] == value:
                flags, value_bytes = FLAGS_FLOAT32, single
            else:
                flags, value_bytes = FLAGS_FLOAT64, _PACK_DOUBLE(value)
    else:
        flags, value_bytes = encode_value(value)  # errors, numpy scalars and the like
    if 0 <= timestamp <= 0xFFFFFFFF:
        base_time_s = timestamp - timestamp % MAX_TIMESPAN
        return (
            base_time_s,
            _SECONDS_QUALIFIERS[(timestamp - base_time_s) << FLAG_BITS | flags],
            value_bytes,
        )
    if timestamp < 0:
        raise CodecError(f"negative timestamp: {timestamp!r}")
    seconds = timestamp // 1000
    base_time_s = seconds - seconds % MAX_TIMESPAN
    qualifier = _I.pack(MS_FLAG | (timestamp - base_time_s * 1000) << MS_FLAG_BITS | flags)
    return base_time_s, qualifier, value_bytes


#: What the compiled encoder needs besides the points (tsd/codec/_encode.c): the seconds
#: qualifiers, the one-byte values and the general encoder for the rest.
ENCODER_TABLES: Final = (_SECONDS_QUALIFIERS, _INT1_BYTES, encode_point)


def encode_points_into(
    rows: dict[bytes, dict[bytes, bytes]],
    points: Iterable[tuple[SeriesKey, int, int | float]],
) -> int:
    """Encode ``(series, timestamp, value)`` points into ``rows``: see
    :func:`python_encode_points_into`, the specification; the compiled helper
    (``tsd/codec/_encode.c``) does the same when it is built."""
    if _c_encode_into is not None:
        return cast(
            int, _c_encode_into(rows, points, _SECONDS_QUALIFIERS, _INT1_BYTES, encode_point)
        )
    return python_encode_points_into(rows, points)


def python_encode_points_into(
    rows: dict[bytes, dict[bytes, bytes]],
    points: Iterable[tuple[SeriesKey, int, int | float]],
) -> int:
    """Encode ``(series, timestamp, value)`` points into ``rows`` (row key -> qualifier ->
    value bytes), in order, a later point replacing an earlier one's cell; the number of
    cells added. Raises CodecError as :func:`encode_point` does (the points before the bad
    one are in ``rows``).

    The bulk form of :func:`encode_point` for the ingest hot path (every put of one socket
    read or request body): the common cases are inline, without a call per point.
    """
    added = 0
    qualifiers = _SECONDS_QUALIFIERS
    int1 = _INT1_BYTES
    pack_short = _PACK_SHORT
    pack_int = _PACK_INT
    pack_float = _PACK_FLOAT
    unpack_float = _UNPACK_FLOAT
    pack_double = _PACK_DOUBLE
    value: Any  # narrowed by type() checks, which mypy does not follow
    for series, timestamp, value in points:
        value_type = type(value)
        if value_type is int and -0x80000000 <= value <= 0x7FFFFFFF:
            if -0x80 <= value <= 0x7F:
                qualifier_flags = FLAGS_INT1
                value_bytes = int1[value & 0xFF]
            elif -0x8000 <= value <= 0x7FFF:
                qualifier_flags = FLAGS_INT2
                value_bytes = pack_short(value)
            else:
                qualifier_flags = FLAGS_INT4
                value_bytes = pack_int(value)
        elif value_type is float and value - value == 0.0:  # finite
            try:
                value_bytes = pack_float(value)
            except OverflowError:  # beyond float32's range
                qualifier_flags = FLAGS_FLOAT64
                value_bytes = pack_double(value)
            else:
                if unpack_float(value_bytes)[0] == value:
                    qualifier_flags = FLAGS_FLOAT32
                else:
                    qualifier_flags = FLAGS_FLOAT64
                    value_bytes = pack_double(value)
        else:
            qualifier_flags = -1  # 8-byte ints and errors: encode_point below
            value_bytes = b""
        if qualifier_flags >= 0 and 0 <= timestamp <= 0xFFFFFFFF:
            base_time_s = timestamp - timestamp % MAX_TIMESPAN
            qualifier = qualifiers[(timestamp - base_time_s) << FLAG_BITS | qualifier_flags]
        else:
            base_time_s, qualifier, value_bytes = encode_point(timestamp, value)
        row = series.row_key(base_time_s)
        cells = rows.get(row)
        if cells is None:
            rows[row] = {qualifier: value_bytes}
            added += 1
        elif qualifier in cells:
            cells[qualifier] = value_bytes
        else:
            cells[qualifier] = value_bytes
            added += 1
    return added


def reference_encode_point(timestamp: int, value: int | float) -> tuple[int, bytes, bytes]:
    """:func:`encode_point` written plainly (the tests check that both agree)."""
    flags, value_bytes = encode_value(value)
    base_time_s, _, _ = split_timestamp(timestamp)
    return base_time_s, build_qualifier(timestamp, flags), value_bytes


def _validate(qualifier: bytes, offset: int) -> None:
    if offset < 0 or offset >= len(qualifier) - 1:
        raise IllegalDataError(OFFSET_OUT_OF_BOUNDS.format(offset=offset, length=len(qualifier)))


def qualifier_length(qualifier: bytes, offset: int = 0) -> int:
    """Length (2 or 4) of the data point qualifier starting at ``offset``."""
    _validate(qualifier, offset)
    if qualifier[offset] & MS_BYTE_FLAG == MS_BYTE_FLAG:
        if offset + 4 > len(qualifier):
            raise IllegalDataError("Detected a millisecond flag but qualifier length is too short")
        return 4
    return 2


def decode_qualifier(qualifier: bytes, offset: int = 0) -> tuple[int, int, bool]:
    """Decode the data point qualifier at ``offset``: ``(offset_ms, flags, is_ms)``."""
    length = qualifier_length(qualifier, offset)
    if length == 4:
        raw: int = _I.unpack_from(qualifier, offset)[0]
        return (raw & MS_OFFSET_MASK) >> MS_FLAG_BITS, raw & FLAGS_MASK, True
    raw = _H.unpack_from(qualifier, offset)[0]
    return (raw >> FLAG_BITS) * 1000, raw & FLAGS_MASK, False


# --- Annotations -----------------------------------------------------------------------------


def encode_annotation_qualifier(start_time: int) -> bytes:
    """Annotation.getQualifier: the 3- or 5-byte qualifier of an annotation start time.

    OpenTSDB first divides any start time that is a multiple of 1000 by 1000 (meant for ms
    times on a whole second), *also* when it is already in seconds, while the row key keeps
    the undivided time (Annotation.getRowKey). So a seconds time such as 1328140000 gets a
    qualifier computed from 1328140. tsd reproduces this for byte-identical storage; compute
    the row's base time from the undivided time with :func:`split_timestamp`. Raises
    CodecError for a time below 1, as OpenTSDB does.
    """
    if start_time < 1:
        raise CodecError("The start timestamp has not been set")
    timestamp = start_time // 1000 if start_time % 1000 == 0 else start_time
    _, offset, is_ms = split_timestamp(timestamp)
    if is_ms:
        return bytes((ANNOTATION_PREFIX,)) + _I.pack(offset)
    return bytes((ANNOTATION_PREFIX,)) + _H.pack(offset)


def decode_annotation_qualifier(qualifier: bytes) -> int:
    """Offset in milliseconds of an annotation (or other prefixed object) qualifier.

    3 bytes: prefix + unsigned seconds offset; 5 bytes: prefix + unsigned ms offset
    (Annotation.timeFromQualifier).
    """
    if len(qualifier) == 3:
        return int(_H.unpack_from(qualifier, 1)[0]) * 1000
    if len(qualifier) == 5:
        return int(_I.unpack_from(qualifier, 1)[0])
    raise CodecError(f"Quantifier is not valid: {qualifier.hex()!r}")
