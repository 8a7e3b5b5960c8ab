"""Data point values: typing the client's text, and the 1/2/4/8-byte cell encodings.

Theory of operation (behaviour doc §1.1 "Value typing rules" and §4.3; OpenTSDB 2.4.1
``src/core/Tags.java`` looksLikeInteger/parseLong/fitsInFloat, ``src/core/TSDB.java`` addPoint,
``src/core/RowSeq.java`` extract*Value, ``src/core/Internal.java`` fixFloatingPointValue):

* Typing. OpenTSDB keeps a value as text until it is stored. Text with none of ``.``, ``e``,
  ``E`` is an integer and goes through the strict ``Tags.parseLong`` (optional sign, ASCII
  digits, at most 19 digits, overflow checked), so ``NaN``, ``Infinity``, ``0x10``, ``1_000``
  and ``" 5"`` are refused. Anything else goes through Java's ``Double.parseDouble`` grammar
  (which is *not* Python's ``float()``: no underscores, no ``inf``/``nan`` spellings, no
  non-ASCII digits, but ``f``/``d`` suffixes and hex floats such as ``0x1.8p1`` are
  accepted). A result that is infinite is refused with "value is NaN or Infinite".
* Encoding. Integers take the smallest of 1, 2, 4, 8 signed big-endian bytes (flags = length
  - 1). Floats take 4 bytes (flags 0xB) when the double survives a round trip through float32
  unchanged (``0.5``), else 8 bytes (flags 0xF, ``0.1``).
* Decoding. The float bit of the flags picks int or float; the length comes from the actual
  value bytes, as OpenTSDB re-derives the flags' length from the value length of single
  cells. Legacy fix-up: a value flagged "4-byte float" but stored on 8 bytes whose first 4
  bytes are zero is the last 4 bytes (older OpenTSDB wrote floats that way).

The exact OpenTSDB message texts are module constants, so the protocol layer can pin them.
"""

from __future__ import annotations

import math
import operator
import re
import struct
from typing import Final, SupportsFloat, SupportsIndex

from tsd.codec.const import (
    FLAG_FLOAT,
    FLAGS_FLOAT32,
    FLAGS_FLOAT64,
    FLAGS_INT1,
    FLAGS_INT2,
    FLAGS_INT4,
    FLAGS_INT8,
    LENGTH_MASK,
    LONG_MAX,
    LONG_MIN,
)
from tsd.errors import CodecError, IllegalDataError, IllegalValueError, NumberFormatError
from tsd.java_text import format_java_bytes

__all__ = [
    "EMPTY_STRING",
    "FLOAT_EMPTY_STRING",
    "FLOAT_FOR_INPUT_STRING",
    "INVALID_CHARACTER",
    "JUST_A_SIGN",
    "NAN_OR_INFINITE",
    "NAN_OR_INFINITE_FULL",
    "OVERFLOW",
    "VALUE_TOO_LONG",
    "decode_value",
    "encode_value",
    "looks_like_integer",
    "parse_long",
    "parse_value",
]

# --- OpenTSDB / JDK message texts -----------------------------------------------------------

#: Tags.parseLong messages (NumberFormatException).
EMPTY_STRING: Final = "Empty string"
JUST_A_SIGN: Final = "Just a sign, no value: {text}"
VALUE_TOO_LONG: Final = "Value too long: {text}"
INVALID_CHARACTER: Final = "Invalid character '{char}' in {text}"
OVERFLOW: Final = "Overflow in {text}"
#: JDK 8 Double.parseDouble (FloatingDecimal.readJavaFormatString) messages; the text shown
#: is the input after Java's String.trim().
FLOAT_EMPTY_STRING: Final = "empty String"
FLOAT_FOR_INPUT_STRING: Final = 'For input string: "{text}"'
#: TSDB.addPoint(float|double) IllegalArgumentException; {value} is Java's Float.toString
#: of the parsed value ("Infinity" / "-Infinity").
NAN_OR_INFINITE: Final = "value is NaN or Infinite: {value}"
NAN_OR_INFINITE_FULL: Final = NAN_OR_INFINITE + " for metric={metric} timestamp={timestamp}"
#: RowSeq.extractIntegerValue / extractFloatingPointValue and
#: Internal.fixFloatingPointValue (IllegalDataException).
BAD_INTEGER_LENGTH: Final = "Integer value @ {index} not on 8/4/2/1 bytes in {values}"
BAD_FLOAT_LENGTH: Final = "Floating point value @ {index} not on 8 or 4 bytes in {values}"
CORRUPTED_FLOAT: Final = (
    "Corrupted floating point value: {values} flags=0x{flags}"
    " -- first 4 bytes are expected to be zeros."
)

# --- Parsing --------------------------------------------------------------------------------

_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
# Java's Double.valueOf grammar after trim(), without NaN/Infinity: those spellings contain
# no '.', 'e' or 'E', so they never reach the floating point path.
_JAVA_FLOAT_TEXT = re.compile(
    r"""
    (?P<sign>[+-]?)
    (?:
        (?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
      | (?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)
    )
    [fFdD]?
    """,
    re.VERBOSE,
)
# What Java's String.trim() removes: every char up to and including U+0020.
_JAVA_WHITESPACE: Final = "".join(chr(c) for c in range(0x21))

_B = struct.Struct(">b")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_F = struct.Struct(">f")
_D = struct.Struct(">d")


def looks_like_integer(text: str) -> bool:
    """OpenTSDB's Tags.looksLikeInteger: true when ``text`` has none of ``.``, ``e``, ``E``."""
    return "." not in text and "e" not in text and "E" not in text


def _java_length(text: str) -> int:
    """String.length() in Java: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def parse_long(text: str) -> int:
    """OpenTSDB's strict Tags.parseLong, with its NumberFormatException messages.

    Raises NumberFormatError.
    """
    if _INT_TEXT.fullmatch(text) is not None:
        value = int(text)
        if LONG_MIN <= value <= LONG_MAX:
            return value
        raise NumberFormatError(OVERFLOW.format(text=text))
    # Slow path: find which of Tags.parseLong's checks fails first, for its message.
    n = _java_length(text)
    if n == 0:
        raise NumberFormatError(EMPTY_STRING)
    start = 0
    if text[0] in "+-":
        if n == 1:
            raise NumberFormatError(JUST_A_SIGN.format(text=text))
        if n > 20:
            raise NumberFormatError(VALUE_TOO_LONG.format(text=text))
        start = 1
    elif n > 19:
        raise NumberFormatError(VALUE_TOO_LONG.format(text=text))
    for char in text[start:]:
        if not "0" <= char <= "9":
            raise NumberFormatError(INVALID_CHARACTER.format(char=char, text=text))
    raise AssertionError(f"unreachable: {text!r} is a valid long")  # pragma: no cover


def _parse_java_double(text: str) -> float:
    """Java's Double.parseDouble for the forms that contain '.', 'e' or 'E'."""
    trimmed = text.strip(_JAVA_WHITESPACE)
    if not trimmed:
        raise NumberFormatError(FLOAT_EMPTY_STRING)
    match = _JAVA_FLOAT_TEXT.fullmatch(trimmed)
    if match is None:
        raise NumberFormatError(FLOAT_FOR_INPUT_STRING.format(text=trimmed))
    sign = match["sign"]
    dec = match["dec"]
    if dec is not None:
        return float(sign + dec)  # correctly rounded, as Java's parser is
    try:
        return float.fromhex(sign + match["hex"])
    except OverflowError:
        return -math.inf if sign == "-" else math.inf


def parse_value(
    text: str, *, metric: str | None = None, timestamp: int | None = None
) -> int | float:
    """Type a data point value as OpenTSDB does (PutDataPointRpc + Tags + TSDB.addPoint).

    Returns an ``int`` (no ``.``/``e``/``E`` in ``text``) or a ``float``. Raises
    NumberFormatError (text is not a number; OpenTSDB's NumberFormatException message) or
    IllegalValueError ("value is NaN or Infinite: ..."; the message names the metric and
    timestamp when both are given, as OpenTSDB's does).
    """
    if looks_like_integer(text):
        return parse_long(text)
    value = _parse_java_double(text)
    if math.isinf(value):  # NaN cannot be spelled with '.', 'e' or 'E' in Java's grammar
        shown = "-Infinity" if value < 0 else "Infinity"
        if metric is not None and timestamp is not None:
            message = NAN_OR_INFINITE_FULL.format(value=shown, metric=metric, timestamp=timestamp)
        else:
            message = NAN_OR_INFINITE.format(value=shown)
        raise IllegalValueError(message)
    return value


# --- Encoding -------------------------------------------------------------------------------


def encode_value(value: int | float | SupportsIndex | SupportsFloat) -> tuple[int, bytes]:
    """Encode a value as OpenTSDB stores it: ``(flags, value_bytes)``.

    Integers use the smallest of 1/2/4/8 signed big-endian bytes; floats use 4 bytes when
    exactly representable as float32, else 8. Raises CodecError for NaN, infinities and
    integers outside the signed 64-bit range.
    """
    if isinstance(value, int):
        if -0x80 <= value <= 0x7F:
            return FLAGS_INT1, _B.pack(value)
        if -0x8000 <= value <= 0x7FFF:
            return FLAGS_INT2, _H.pack(value)
        if -0x80000000 <= value <= 0x7FFFFFFF:
            return FLAGS_INT4, _I.pack(value)
        if LONG_MIN <= value <= LONG_MAX:
            return FLAGS_INT8, _Q.pack(value)
        raise CodecError(f"integer value out of the signed 64-bit range: {value!r}")
    if not isinstance(value, float):
        if isinstance(value, SupportsIndex):  # integer-likes such as numpy ints
            return encode_value(operator.index(value))
        value = float(value)
    if not math.isfinite(value):
        raise CodecError(f"cannot store a NaN or infinite value: {value!r}")
    try:
        single = _F.pack(value)
    except OverflowError:  # beyond float32's range: Java's (float) d == d is false
        return FLAGS_FLOAT64, _D.pack(value)
    if _F.unpack(single)[0] == value:
        return FLAGS_FLOAT32, single
    return FLAGS_FLOAT64, _D.pack(value)


# --- Decoding -------------------------------------------------------------------------------


def _java_hex(flags: int) -> str:
    """Integer.toHexString of a Java byte (sign-extended to 32 bits)."""
    flags &= 0xFF
    return f"{(flags - 256) & 0xFFFFFFFF if flags > 127 else flags:x}"


def decode_value(flags: int, data: bytes) -> int | float:
    """Decode one value given its qualifier flags (only the float bit and fix-up use them).

    ``flags`` may be the whole last qualifier byte (offset bits included): only its low
    nibble is read, and the whole byte appears in the corrupted-float message as in Java.

    The length is taken from ``data`` (OpenTSDB re-derives it for single cells; compacted
    and append cells are sliced by the flags' length, so both agree). Raises
    IllegalDataError for lengths OpenTSDB cannot read and for a corrupted legacy float.
    """
    n = len(data)
    if flags & FLAG_FLOAT:
        if n == 8 and flags & LENGTH_MASK == 0x3:
            # Legacy fix-up (Internal.fixFloatingPointValue): a 4-byte float on 8 bytes.
            if data[:4] != b"\x00\x00\x00\x00":
                raise IllegalDataError(
                    CORRUPTED_FLOAT.format(values=format_java_bytes(data), flags=_java_hex(flags))
                )
            return float(_F.unpack_from(data, 4)[0])
        if n == 4:
            return float(_F.unpack(data)[0])
        if n == 8:
            return float(_D.unpack(data)[0])
        raise IllegalDataError(BAD_FLOAT_LENGTH.format(index=0, values=format_java_bytes(data)))
    if n == 1 or n == 2 or n == 4 or n == 8:
        return int.from_bytes(data, "big", signed=True)
    raise IllegalDataError(BAD_INTEGER_LENGTH.format(index=0, values=format_java_bytes(data)))


def parse_java_double(text: str) -> float:
    """Double.parseDouble's grammar and value (NumberFormatError with Java's message)."""
    return _parse_java_double(text)
