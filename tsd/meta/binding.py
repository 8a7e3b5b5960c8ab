"""Client JSON -> meta fields, as Jackson 2.9 binds them for OpenTSDB. Pure.

OpenTSDB parses the bodies of /api/uid/uidmeta, /api/uid/tsmeta, /api/annotation and
/api/search/lookup with Jackson into its POJOs (``UIDMeta``, ``TSMeta``, ``Annotation``,
``SearchQuery``, all ``@JsonIgnoreProperties(ignoreUnknown = true)``). Jackson coerces scalars
to the field's type: a number into a String field becomes its text, a numeric string into a
long field is parsed, ``null`` leaves a primitive at its default. These helpers reproduce that
much; anything else is OpenTSDB's "Unable to parse the given JSON" (400).

Stored meta JSON is written by OpenTSDB with Jackson's defaults, which quote non-finite
doubles (``"max":"NaN"``); :func:`as_double` reads both forms back. The text rules
themselves (a number bound into a String keeps its source text, a double written as
``Double.toString``) are :mod:`tsd.java_text`'s.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from tsd.errors import BadRequestError
from tsd.java_text import jackson_text, load_json_keeping_text

_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1

#: OpenTSDB's answer to a body it cannot bind (HttpJsonSerializer).
UNPARSEABLE = "Unable to parse the given JSON"


class BindError(BadRequestError):
    """A JSON body that does not fit the object it describes (400)."""

    def __init__(self, details: str) -> None:
        super().__init__(UNPARSEABLE, details)


def require_body(body: bytes) -> None:
    """OpenTSDB's check before parsing any request body."""
    if not body.strip():
        raise BadRequestError(
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        )


def loads(body: bytes) -> Any:
    """Parse a request body (after :func:`require_body`); BindError when it is not JSON.
    Floats keep their source text, which a String field binds (Jackson's rule)."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BindError(str(exc)) from None
    return load_json_keeping_text(body)


def as_object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BindError(f"Cannot deserialize {what} from {_kind(value)}")
    return value


def as_text(value: object, name: str) -> str | None:
    """A String field: text as is, numbers (their source text) and booleans as their
    text, null as None."""
    if value is None:
        return None
    try:
        return jackson_text(value)
    except TypeError:
        raise BindError(f"Cannot deserialize '{name}' as a string from {_kind(value)}") from None


def as_long(value: object, name: str, *, low: int = _LONG_MIN, high: int = _LONG_MAX) -> int:
    """A long (or int) field: integers, integral floats, numeric strings; null is 0."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise BindError(f"Cannot deserialize '{name}' as a number from a boolean")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BindError(f"Cannot deserialize '{name}' as a number from {value!r}")
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value.strip() or "0")
        except ValueError:
            raise BindError(f"Cannot deserialize '{name}' as a number from {value!r}") from None
    if not isinstance(value, int) or not low <= value <= high:
        raise BindError(f"Cannot deserialize '{name}' as a number from {_kind(value)}")
    return value


def as_int(value: object, name: str) -> int:
    return as_long(value, name, low=_INT_MIN, high=_INT_MAX)


def as_double(value: object, name: str) -> float:
    """A double field: numbers, and strings such as ``"NaN"`` or ``"1.5"``; null is NaN
    (the fields using this default to NaN in OpenTSDB)."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        raise BindError(f"Cannot deserialize '{name}' as a number from a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise BindError(f"Cannot deserialize '{name}' as a number from {value!r}") from None
    raise BindError(f"Cannot deserialize '{name}' as a number from {_kind(value)}")


def as_bool(value: object, name: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, int):
        return value != 0
    raise BindError(f"Cannot deserialize '{name}' as a boolean from {_kind(value)}")


def as_custom(value: object, name: str = "custom") -> dict[str, str] | None:
    """A ``Map<String, String>`` field (null stays None)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BindError(f"Cannot deserialize '{name}' from {_kind(value)}")
    return {str(k): as_text(v, name) or "" for k, v in value.items()}


def as_text_list(value: object, name: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BindError(f"Cannot deserialize '{name}' from {_kind(value)}")
    return [as_text(item, name) or "" for item in value]


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)
