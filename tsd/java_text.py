"""Java's and Jackson's text rules, once, for every protocol and meta path. Pure.

Theory of operation: OpenTSDB 2.4.1 is Java; wherever its answers contain text made by
the JDK or by Jackson 2.9, tsd must make the same text. The rules (JDK and Jackson
documentation; OpenTSDB's callers named per function):

* :func:`java_double_to_string` is ``Double.toString(double)`` as its javadoc specifies it
  (JDK 19+ wording, which pins down what JDK 8 meant): ``NaN``, ``Infinity``,
  ``-Infinity``, ``0.0`` / ``-0.0``; plain ``ddd.ddd`` for 1e-3 <= |x| < 1e7, else
  computerized scientific notation ``d.dddE<n>``; at least one digit after the point,
  and beyond it only as many digits as uniquely distinguish the value (the shortest
  decimal that rounds back, the closest one to x when several have that length; a
  one-digit decimal is widened to the closest two-digit one, so ``Double.MIN_VALUE`` is
  ``4.9E-324``). JDK 8's FloatingDecimal, which OpenTSDB ran on, sometimes printed one
  digit more than that (JDK-4511638); tsd follows the specification.
* Jackson writes a ``double`` with ``Double.toString`` (``NumberOutput.toString``) and
  quotes the non-finite ones (``"NaN"``): :func:`jackson_double` gives that JSON text.
* Jackson's ``StringDeserializer`` binds a JSON scalar into a ``String`` field as its
  source text: a number keeps the client's digits (``1e-4`` stays ``1e-4``), booleans are
  ``true``/``false``. :func:`load_json_keeping_text` parses a body keeping each float's
  source text (:class:`JsonFloat`), and :func:`jackson_text` applies the rule; a float
  whose text is lost (parsed by orjson) falls back to Python's shortest round-trip repr,
  which is the client's text whenever the client wrote the shortest form.
* :func:`java_split` is ``String.split`` with a one-character literal separator: no
  separator gives the whole string (even ``""``), else trailing empty strings go.
* :func:`format_java_bytes` is ``Arrays.toString(byte[])``: signed decimal bytes.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Final

import orjson

__all__ = [
    "JsonFloat",
    "format_java_bytes",
    "jackson_double",
    "jackson_text",
    "java_double_to_string",
    "java_float_to_string",
    "java_split",
    "load_json_keeping_text",
]

_F32: Final = struct.Struct(">f")
#: Double.toString switches to scientific notation outside [1e-3, 1e7).
_PLAIN_LOW: Final = 1e-3
_PLAIN_HIGH: Final = 1e7


def java_double_to_string(value: float) -> str:
    """Java's ``Double.toString`` (see the module docstring for the rule)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    digits, exponent = _java_digits(abs(value))
    return _java_layout(value < 0, abs(value), digits, exponent)


def _java_layout(negative: bool, magnitude: float, digits: str, exponent: int) -> str:
    """Double.toString's (and Float.toString's) layout of significant ``digits`` whose
    first has decimal ``exponent``: plain in [1e-3, 1e7), else ``d.dddE<n>``."""
    sign = "-" if negative else ""
    if _PLAIN_LOW <= magnitude < _PLAIN_HIGH:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            whole = "0"
            fraction = "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def java_float_to_string(value: float) -> str:
    """Java's ``Float.toString`` of ``value`` rounded to a float: the shortest decimal that
    reads back as the same float, in Double.toString's layout."""
    as_float = _F32.unpack(_F32.pack(value))[0] if math.isfinite(value) else value
    if not math.isfinite(as_float) or as_float == 0:
        return java_double_to_string(as_float)
    text = repr(abs(as_float))
    for precision in range(1, 10):
        text = f"{abs(as_float):.{precision}g}"
        if _F32.unpack(_F32.pack(float(text)))[0] == abs(as_float):
            break
    digits, exponent = _digits_of(text)
    return _java_layout(as_float < 0, abs(as_float), digits, exponent)


def _java_digits(magnitude: float) -> tuple[str, int]:
    """(significant digits, decimal exponent of the first) of Java's choice of decimal."""
    # repr: the shortest decimal that round-trips, the closest of that length.
    digits, exponent = _digits_of(repr(magnitude))
    if len(digits) == 1:
        # Javadoc: when the shortest has one digit, take the closest two-digit decimal.
        digits, exponent = _digits_of(f"{magnitude:.1e}")
    return digits, exponent


def _digits_of(text: str) -> tuple[str, int]:
    """Significant digits (trailing zeros dropped, at least one) and the exponent of the
    first, from Python's float text (``1e-05``, ``0.001``, ``123.5``, ``1.0e+16``)."""
    mantissa, _, exp_text = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    exponent = int(exp_text) if exp_text else 0
    stripped = whole.lstrip("0")
    if stripped:
        exponent += len(stripped) - 1
        raw = stripped + fraction
    else:
        zeros = len(fraction) - len(fraction.lstrip("0"))
        exponent -= zeros + 1
        raw = fraction[zeros:]
    return raw.rstrip("0") or "0", exponent


def jackson_double(value: float) -> orjson.Fragment | str:
    """A ``double`` property as Jackson writes it: the number as ``Double.toString`` (an
    orjson fragment, so ``orjson.dumps`` writes the text as is), non-finite quoted."""
    text = java_double_to_string(value)
    if math.isfinite(value):
        return orjson.Fragment(text)
    return text


class JsonFloat(float):
    """A JSON number with a fraction or exponent, carrying its source text."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JsonFloat:
        number = super().__new__(cls, text)
        number.text = text
        return number


_KEEPING_TEXT: Final = json.JSONDecoder(parse_float=JsonFloat)


def load_json_keeping_text(body: bytes) -> object:
    """Parse JSON that orjson has already accepted, keeping each float's source text.

    Callers validate with ``orjson.loads`` first (its errors are the ones reported); this
    second parse only recovers what Jackson would keep.
    """
    return _KEEPING_TEXT.decode(body.decode("utf-8"))


def jackson_text(value: object) -> str:
    """The text Jackson's StringDeserializer gives a JSON scalar (not null).

    Raises TypeError for an object or an array (each caller words its own 400).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, JsonFloat):
        return value.text
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"not a JSON scalar: {type(value).__name__}")


def java_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` in Java for a one-character literal ``sep``."""
    parts = text.split(sep)
    if len(parts) > 1:
        while parts and not parts[-1]:
            parts.pop()
    return parts


def format_java_bytes(data: bytes) -> str:
    """Java's ``Arrays.toString(byte[])``: signed decimal bytes, e.g. ``[1, -2]``."""
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in data) + "]"
