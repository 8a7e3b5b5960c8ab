"""/api/put: the JSON body (already inflated) to data points (replies: put_reply.py).

Theory of operation (behaviour doc §1.1; OpenTSDB 2.4.1 ``src/tsd/HttpJsonSerializer.java``
parsePutV1, ``src/tsd/PutDataPointRpc.java`` processDataPoint, ``src/core/IncomingDataPoint.java``
validate, ``src/utils/JSON.java``; Jackson 2.9.5 coercion rules):

* Body. Empty -> "Missing request content". OpenTSDB decodes it as UTF-8 (bad bytes become
  U+FFFD), trims it, requires ``{`` (one point) or ``[`` (a list), and gives any Jackson
  failure, syntax or type, as "Unable to parse the given JSON". Jackson runs with
  ALLOW_NON_NUMERIC_NUMBERS (``NaN``, ``Infinity``, ``-Infinity`` are numbers) and ignores
  whatever follows the first JSON value. An empty list -> "No datapoints found in content".
* Fields, as Jackson binds them into IncomingDataPoint. ``metric``, ``value``, ``tsuid`` and
  tag values are Strings: a JSON number keeps its source text (``1e3`` stays ``"1e3"``), a
  boolean becomes ``"true"``/``"false"``, an object or array fails the whole body.
  ``timestamp`` is a primitive long: missing or null is 0, a float is truncated (NaN is 0),
  a string is trimmed and parsed (empty or ``"null"`` is 0), anything out of range or of
  another type fails the body. Unknown fields are ignored.
* Points, in OpenTSDB's order: null element, "Metric name was empty", "Invalid timestamp"
  (<= 0), "Empty value", "Missing tags", value typing ("Unable to parse value to a number";
  ``tsd.codec.value.parse_value`` rules), then the IllegalArgument texts: NaN/Infinite,
  ``bad timestamp=...``, tag count, name characters (``tsd.protocol.names``).

Two parsers, one meaning. orjson loses a number's source text, which only matters in three
places: a number where a String is expected, an int beyond 64 bits (orjson returns a
float), and the ``datapoint`` echoed with an error. The fast path parses with orjson and
types a JSON int as ``int`` and a JSON float as ``float``, which is OpenTSDB's rule since an
int token has no ``.``/``e``/``E`` and a float token has one. Whenever it meets one of those
three cases, or the body is not strict JSON, the body is parsed again by the exact path:
the stdlib decoder with every number kept as its text, which also accepts what Jackson
accepts and orjson does not (trailing bytes, non-numeric numbers, invalid UTF-8).

The write hot path (:func:`parse_put_body_known`) adds, in front, a decoder of the usual
body only (msgspec, into typed structs that keep each point's tags as JSON text): when
every point is usual and of a series already seen, no dict is built per point and the
series is found by ``(metric, tags text)``. Anything else goes the ways above. Equal JSON
text is an equal document, and msgspec reads numbers as orjson and the exact path do
(correctly rounded; the tests compare them bit for bit), so the answer is the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Generic, TypeVar, cast

import msgspec
import orjson

import tsd.native as native
from tsd.codec.const import LONG_MAX, LONG_MIN
from tsd.codec.value import parse_value
from tsd.data_points import MAX_MS_TIMESTAMP, DataPoint, Tags
from tsd.errors import BadRequestError, IllegalValueError, NumberFormatError
from tsd.java_text import jackson_text
from tsd.protocol.names import (
    DEFAULT_NAME_RULES,
    NameRules,
    check_metric_and_tags,
    is_plain_name,
)
from tsd.protocol.names import java_hash_order as _java_hash_order
from tsd.protocol.put_reply import DatapointEcho, PutError, parse_java_integer
from tsd.protocol.telnet import check_timestamp

__all__ = [
    "EMPTY_BODY",
    "EMPTY_LIST",
    "NOT_OBJECT_OR_ARRAY",
    "UNPARSEABLE",
    "KnownPut",
    "PutResult",
    "parse_put_body",
    "parse_put_body_known",
    "parse_put_body_pieces",
    "series_key",
]

# --- OpenTSDB message texts ------------------------------------------------------------------

EMPTY_BODY: Final = "Missing request content"
NOT_OBJECT_OR_ARRAY: Final = "The JSON must start as an object or an array"
UNPARSEABLE: Final = "Unable to parse the given JSON"
EMPTY_LIST: Final = "No datapoints found in content"

NULL_DATAPOINT: Final = "Unexpected null datapoint encountered in set."
METRIC_EMPTY: Final = "Metric name was empty"
INVALID_TIMESTAMP: Final = "Invalid timestamp"
EMPTY_VALUE: Final = "Empty value"
MISSING_TAGS: Final = "Missing tags"
NOT_A_NUMBER: Final = "Unable to parse value to a number"
# --- Results ---------------------------------------------------------------------------------

PutResult = DataPoint | PutError


# --- Body parsing ----------------------------------------------------------------------------


class _NeedExact(Exception):
    """The fast path cannot answer exactly like OpenTSDB: use the exact parser."""


class _JsonNumber(str):
    """A JSON number token kept as its source text (exact path only)."""

    __slots__ = ()


def _unparseable() -> BadRequestError:
    return BadRequestError(UNPARSEABLE)


# What Java's String.trim() removes: every char up to U+0020.
_JAVA_WHITESPACE: Final = "".join(chr(c) for c in range(0x21))
_EXACT_DECODER: Final = json.JSONDecoder(
    parse_float=_JsonNumber, parse_int=_JsonNumber, parse_constant=_JsonNumber
)
_TWO_63: Final = float(2**63)


def parse_put_body(body: bytes, rules: NameRules = DEFAULT_NAME_RULES) -> list[PutResult]:
    """Parse an /api/put body into one result per element, in order.

    Raises BadRequestError (status 400) for the body-level errors. Per-point failures are
    ``PutError`` results.
    """
    if not body:
        raise BadRequestError(EMPTY_BODY)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _parse_exact(body, rules)
    try:
        return _parse_document(document, rules, exact=False)
    except _NeedExact:
        return _parse_exact(body, rules)


_Series = TypeVar("_Series")
#: A tsuid the fast checks let through: absent (or null) or a string.
_TSUID_TYPES: Final = (str, type(None))


@dataclass(slots=True)
class KnownPut(Generic[_Series]):
    """An /api/put body split for the write hot path (:func:`parse_put_body_known`).

    ``points`` are the points of series found in ``known``, in body order, as
    ``(series, timestamp, value)``. Every other element is in ``others`` as ``(index in
    the body, len(points) when it came, result, key)``: the result is what
    :func:`parse_put_body` gives for it, and ``key`` is its key in ``known`` when the
    point is valid and has one (remember the point's series under it). Together they are
    :func:`parse_put_body`'s answer, element for element.

    ``raw_keys``, when not None, holds a second key for each element (by body index):
    remember it too for every element that turns out valid, so that the next body of
    the same series takes the fastest path (see :func:`parse_put_body_known`).
    """

    count: int
    points: list[tuple[_Series, int, int | float]]
    others: list[tuple[int, int, PutResult, Hashable | None]]
    body: bytes
    rules: NameRules
    raw_keys: list[Hashable] | None = None
    #: the index, in the whole body, of this piece's first element (see
    #: :func:`parse_put_body_pieces`); indexes above are within the piece
    offset: int = 0
    _indexes: list[int] | None = None
    _results: list[PutResult] | None = None

    def point_indexes(self) -> list[int]:
        """The (piece) index of each of ``points`` (for error echoes; not the hot path)."""
        if self._indexes is None:
            other = {index for index, _, _, _ in self.others}
            self._indexes = [index for index in range(self.count) if index not in other]
        return self._indexes

    def results(self) -> list[PutResult]:
        """What :func:`parse_put_body` gives for the piece (for echoing points of ``points``
        whose write failed: parses the piece again, once)."""
        if self._results is None:
            self._results = parse_put_body(self.body, self.rules)
        return self._results


def series_key(metric: str, tags: Mapping[str, str]) -> Hashable:
    """A key :func:`parse_put_body_known` looks a point's series up by: its metric and
    its tags in the body's order (a client sends its series the same way each time)."""
    return (metric, *tags.items())


class _UsualPoint(msgspec.Struct, gc=False):
    """A point in the usual form, the only one the fastest path takes: a string metric,
    an int timestamp in OpenTSDB's range, an int64 or a float below 2**63 (never an int
    that stands for a float) and no tsuid other than a string. The tags stay JSON text:
    with the metric they are the key of the series. Anything else fails the decoding,
    and the body takes the orjson path. No GC tracking: a body makes thousands."""

    metric: str
    timestamp: Annotated[int, msgspec.Meta(gt=0, le=MAX_MS_TIMESTAMP)]
    value: (
        Annotated[int, msgspec.Meta(ge=LONG_MIN, le=LONG_MAX)]
        | Annotated[float, msgspec.Meta(gt=-_TWO_63, lt=_TWO_63)]
    )
    tags: msgspec.Raw
    tsuid: str | None = None


_USUAL_BODY: Final = msgspec.json.Decoder(list[_UsualPoint])


def usual_key(point: _UsualPoint) -> bytes:
    """The key a usual point's series is known under: its metric in UTF-8 (lone
    surrogates passed through), a 0xFF byte and its tags' JSON text. UTF-8 has no 0xFF
    byte, so the metric ends at the first one and each key names one (metric, text)
    pair; one bytes object is one allocation and one hash a point (the compiled lookup
    builds the same bytes)."""
    return point.metric.encode("utf-8", "surrogatepass") + b"\xff" + bytes(point.tags)


def python_known_usual_points(
    usual: list[_UsualPoint], known: Mapping[Any, _Series]
) -> list[tuple[_Series, int, int | float]] | None:
    """``(series, timestamp, value)`` of each usual point, its series looked up under
    :func:`usual_key`; None when one is not in ``known``."""
    get = known.get
    points: list[tuple[_Series, int, int | float]] = []
    append = points.append
    for point in usual:
        series = get(usual_key(point))
        if series is None:
            return None
        append((series, point.timestamp, point.value))
    return points


def _known_usual_points() -> Callable[..., Any]:
    """The C version (tsd/codec/_encode.c) where it is built and ``known`` is a dict:
    about half the Python loop's time when it came (160-180 against 270-370 ns a point,
    measured; 116-125 since :func:`usual_key`), the loop having been a third of a
    1,000-point body's CPU."""
    helper = native.load("tsd.codec._encode")
    if helper is None:
        return python_known_usual_points
    compiled = helper.known_usual_points

    def pick(usual: list[_UsualPoint], known: Mapping[Any, _Series]) -> Any:
        if isinstance(known, dict):  # the handler's RefCache: a dict
            return compiled(usual, known)
        return python_known_usual_points(usual, known)

    return pick


known_usual_points = _known_usual_points()


def parse_put_body_known(
    body: bytes, known: Mapping[Any, _Series], rules: NameRules = DEFAULT_NAME_RULES
) -> KnownPut[_Series]:
    """:func:`parse_put_body` for the write hot path: the usual points of series already
    seen come back without a DataPoint, as ``(series, timestamp, value)``.

    ``known`` maps keys this function handed out (the ``key`` of ``others``, and
    ``raw_keys``) for valid points to their series. Two paths, each exact:

    * the fastest: the body is a list of usual points (:class:`_UsualPoint`, decoded by
      msgspec into untracked structs), each of a series known under :func:`usual_key`
      (its metric and its tags as JSON text). Equal text is an equal document, so such
      a key means the same, valid, names; timestamp and value were checked by the
      decoder.
    * else orjson's document, each element looked up under :func:`series_key` (its
      names being JSON strings, equal keys mean equal names) and checked as
      :func:`_fast_point` does the fields the names do not cover; the rest gets
      :func:`parse_put_body`'s own answer. When the fastest path decoded the body but
      missed a series, ``raw_keys`` carries its keys for the handler to remember.

    Raises BadRequestError for the body-level errors.
    """
    if not body:
        raise BadRequestError(EMPTY_BODY)
    raw_keys: list[Hashable] | None = None
    try:
        usual = _USUAL_BODY.decode(body)
    except (msgspec.DecodeError, ValueError):  # not usual, or not UTF-8
        usual = []
    if usual:
        points = known_usual_points(usual, known)
        if points is not None:
            return KnownPut(len(usual), points, [], body, rules)
        raw_keys = [usual_key(point) for point in usual]
    split = _parse_known(body, known, rules)
    split.raw_keys = raw_keys
    return split


#: Elements per piece of a large body (:func:`parse_put_body_pieces`): each piece's
#: documents and objects are freed before the next is parsed.
PIECE_ELEMENTS: Final = 16_384

_ELEMENT_TEXTS: Final = msgspec.json.Decoder(list[msgspec.Raw])


def parse_put_body_pieces(
    body: bytes,
    known: Mapping[Any, _Series],
    rules: NameRules = DEFAULT_NAME_RULES,
    piece_elements: int = PIECE_ELEMENTS,
) -> list[KnownPut[_Series]]:
    """:func:`parse_put_body_known` for a large body, in pieces of ``piece_elements``
    elements (each piece's ``offset`` is the body index of its first element), so that
    parsing never holds the documents of the whole body at once: what it keeps is a
    multiple of the body's size (its element texts and each point's typed result).

    A body that is a strict JSON list is cut at its elements (msgspec, without building
    them) and each piece, a list of the same element texts, gets the answer the whole
    body gives its elements. Every piece is parsed before the caller writes anything,
    so a body-level error in the last piece still fails the whole body, as Jackson
    binds the whole body first. Any other body is parsed whole.

    Memory, measured (tracemalloc, 110-byte points): kept about 2x the body when the
    series are known, about 9x when every point is of a new series (a DataPoint each),
    plus one piece's documents at a time; parsing the whole body at once peaks at 21x.
    Pieces carry no ``raw_keys``: a large body does not teach the fastest path (the
    next one still finds its series by :func:`series_key`).
    """
    try:
        texts = _ELEMENT_TEXTS.decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError):  # not a strict JSON list
        return [parse_put_body_known(body, known, rules)]
    if len(texts) <= piece_elements:
        return [parse_put_body_known(body, known, rules)]
    pieces: list[KnownPut[_Series]] = []
    for start in range(0, len(texts), piece_elements):
        piece = parse_put_body_known(
            b"[" + b",".join(texts[start : start + piece_elements]) + b"]", known, rules
        )
        piece.offset = start
        piece.raw_keys = None
        pieces.append(piece)
    return pieces


def _parse_known(body: bytes, known: Mapping[Any, _Series], rules: NameRules) -> KnownPut[_Series]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _known_others(_parse_exact(body, rules), [], body, rules)
    elements = document if type(document) is list else [document]
    if type(document) is list or type(document) is dict:
        split = _split_known(elements, known, body, rules)
        if split is not None:
            return split
    try:
        results = _parse_document(document, rules, exact=False)
    except _NeedExact:
        results = _parse_exact(body, rules)
    return _known_others(results, elements, body, rules)


def _known_others(
    results: list[PutResult], elements: Sequence[object], body: bytes, rules: NameRules
) -> KnownPut[Any]:
    """Every result as an "other", with the key of each valid point (see _string_key)."""
    others: list[tuple[int, int, PutResult, Hashable | None]] = []
    for index, result in enumerate(results):
        key: Hashable | None = None
        if isinstance(result, DataPoint) and index < len(elements):
            key = _string_key(elements[index])
        others.append((index, 0, result, key))
    return KnownPut(len(results), [], others, body, rules)


def _string_key(element: object) -> Hashable | None:
    """series_key of a valid point whose metric and tag values are JSON strings, else None:
    equal keys then mean equal names (no ``1 == True == 1.0`` confusion, no number whose
    source text orjson lost)."""
    if type(element) is not dict:
        return None
    metric, tags = element.get("metric"), element.get("tags")
    if type(metric) is str and type(tags) is dict and all(type(v) is str for v in tags.values()):
        return series_key(metric, tags)
    return None


def _bound_point(element: object, rules: NameRules) -> DataPoint | None:
    """A point the general path accepts without needing the exact parser (a value given
    as a string, say), or None: then the general path must answer for the whole body."""
    if element is None:
        return None
    try:
        result = _validate(_bind(element), rules)
    except (BadRequestError, _NeedExact):
        return None
    return result if isinstance(result, DataPoint) else None


def _split_known(
    elements: list[object], known: Mapping[Any, _Series], body: bytes, rules: NameRules
) -> KnownPut[_Series] | None:
    """The hot loop; None when an element needs the general path (which may fail the
    whole body, or need the exact parser)."""
    if not elements:
        return None
    points: list[tuple[_Series, int, int | float]] = []
    others: list[tuple[int, int, PutResult, Hashable | None]] = []
    get = known.get
    append = points.append
    max_tags = rules.max_tags
    index = -1
    try:
        element: Any  # no cast(): a call per element
        for element in elements:
            index += 1
            key: Hashable | None = None
            if type(element) is dict:
                # Subscripts, not get(): a point missing a field is an error, and errors
                # are the general path's to word (KeyError below).
                tags = element["tags"]
                if type(tags) is dict:
                    key = (element["metric"], *tags.items())  # series_key(); may raise
                    series = get(key)
                    if series is not None:
                        # The checks of _fast_point that the names' do not cover.
                        timestamp = element["timestamp"]
                        value = element["value"]
                        value_type = type(value)
                        if (
                            type(timestamp) is int
                            and 0 < timestamp <= MAX_MS_TIMESTAMP
                            and (
                                (value_type is float and -_TWO_63 < value < _TWO_63)
                                or (value_type is int and LONG_MIN <= value <= LONG_MAX)
                            )
                            # four fields are the four above: no tsuid
                            and (len(element) == 4 or type(element.get("tsuid")) in _TSUID_TYPES)
                        ):
                            append((series, timestamp, value))
                            continue
            point = _fast_point(element, max_tags)
            if point is None:
                point = _bound_point(element, rules)
                if point is None:
                    return None
                key = _string_key(element)
            others.append((index, len(points), point, key))
    except (TypeError, KeyError):  # unhashable names, missing fields: the general path
        return None
    return KnownPut(len(elements), points, others, body, rules)


def _parse_exact(body: bytes, rules: NameRules) -> list[PutResult]:
    """The exact path alone (the tests compare it with the fast path)."""
    return _parse_document(_load_exact(body), rules, exact=True)


def _load_exact(body: bytes) -> object:
    text = body.decode("utf-8", "replace").strip(_JAVA_WHITESPACE)
    if not text:
        # OpenTSDB fails here with a StringIndexOutOfBounds (500); tsd calls it empty.
        raise BadRequestError(EMPTY_BODY)
    if text[0] != "{" and text[0] != "[":
        raise BadRequestError(NOT_OBJECT_OR_ARRAY)
    try:
        document, _ = _EXACT_DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        raise _unparseable() from None
    return document


def _parse_document(document: object, rules: NameRules, *, exact: bool) -> list[PutResult]:
    if isinstance(document, dict):
        elements: list[object] = [document]
    elif isinstance(document, list):
        elements = document
    else:
        raise BadRequestError(NOT_OBJECT_OR_ARRAY)
    if not elements:
        raise BadRequestError(EMPTY_LIST)
    max_tags = rules.max_tags
    # Jackson binds the whole body before any point is looked at: a type error anywhere
    # fails the body even after points that would have been fine. Points taken by the
    # fast check cannot fail binding, so checking them first changes no outcome.
    staged: list[DataPoint | _Incoming | None] = [
        _fast_point(e, max_tags) or (None if e is None else _bind(e)) for e in elements
    ]
    results: list[PutResult] = []
    for item in staged:
        if isinstance(item, DataPoint):
            results.append(item)
            continue
        result = PutError(NULL_DATAPOINT, None) if item is None else _validate(item, rules)
        if not exact and isinstance(result, PutError):
            raise _NeedExact  # the echo needs the numbers' source text
        results.append(result)
    return results


def _fast_point(element: object, max_tags: int) -> DataPoint | None:
    """The usual point, accepted in one pass, or None to take the general path.

    Accepts only what the general path accepts with the same result: string metric and
    tags made of plain name characters, a positive in-range int timestamp, an int64 or a
    float (below 2**63, so not an int that orjson turned into a float) value, and a tsuid
    that is absent or a string.
    """
    if type(element) is not dict:
        return None
    get = cast(dict[str, Any], element).get
    metric: Any = get("metric")
    timestamp: Any = get("timestamp")
    value: Any = get("value")
    tags: Any = get("tags")
    if (
        type(metric) is not str
        or type(timestamp) is not int
        or type(tags) is not dict
        or not 0 < timestamp <= MAX_MS_TIMESTAMP
        or not 0 < len(tags) <= max_tags
        or not is_plain_name(metric)
    ):
        return None
    value_type = type(value)
    if value_type is int:
        if not LONG_MIN <= value <= LONG_MAX:
            return None
    elif value_type is not float or not -_TWO_63 < value < _TWO_63:
        return None
    for key, tagv in tags.items():
        if type(tagv) is not str or not is_plain_name(key) or not is_plain_name(tagv):
            return None
    tsuid = get("tsuid")
    if tsuid is not None and type(tsuid) is not str:
        return None
    return DataPoint(metric, timestamp, value, tuple(sorted(tags.items())))


@dataclass(slots=True)
class _Incoming:
    """IncomingDataPoint after Jackson's binding. ``value`` is text, or already typed by
    the fast path (an int or float JSON number)."""

    metric: str | None
    timestamp: int
    value: str | int | float | None
    tags: dict[str, str | None] | None
    tsuid: str | None


def _bind(element: object) -> _Incoming:
    if not isinstance(element, dict):
        raise _unparseable()
    get = element.get
    return _Incoming(
        metric=_bind_string(get("metric")),
        timestamp=_bind_timestamp(get("timestamp")),
        value=_bind_value(get("value")),
        tags=_bind_tags(get("tags")),
        tsuid=_bind_string(get("tsuid")),
    )


def _bind_string(raw: object) -> str | None:
    """Jackson's StringDeserializer (exact path numbers are str, holding their text)."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        raise _NeedExact  # the fast path lost the number's text
    try:
        return jackson_text(raw)
    except TypeError:
        raise _unparseable() from None


def _bind_value(raw: object) -> str | int | float | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, float):
        if abs(raw) >= _TWO_63:
            raise _NeedExact  # orjson turns ints beyond 64 bits into floats
        return raw
    return _bind_string(raw)


def _bind_timestamp(raw: object) -> int:
    """Jackson 2.9's LongDeserializer for a primitive ``long``."""
    if raw is None:
        return 0
    if isinstance(raw, _JsonNumber):
        return _timestamp_from_token(raw)
    if isinstance(raw, str):
        text = raw.strip(_JAVA_WHITESPACE)
        if not text or text == "null":
            return 0
        value = parse_java_integer(text, LONG_MIN, LONG_MAX)
        if value is None:
            raise _unparseable()
        return value
    if isinstance(raw, bool):
        raise _unparseable()
    if isinstance(raw, int):
        return _check_long(raw)
    if isinstance(raw, float):
        if raw == -_TWO_63:
            raise _NeedExact  # an int token just below the long range rounds to this
        return _truncate_double(raw)
    raise _unparseable()


def _timestamp_from_token(token: str) -> int:
    if token[-1] == "N":  # NaN: (long) NaN is 0 in Java
        return 0
    if token[-1] == "y":  # Infinity, -Infinity: out of the long range
        raise _unparseable()
    if "." in token or "e" in token or "E" in token:
        return _truncate_double(float(token))
    if len(token) > 20:  # cheap guard before int() on a huge token
        raise _unparseable()
    return _check_long(int(token))


def _check_long(value: int) -> int:
    if LONG_MIN <= value <= LONG_MAX:
        return value
    raise _unparseable()


def _truncate_double(value: float) -> int:
    # ParserBase.convertNumberToLong: range-checked against (double) Long.MIN/MAX_VALUE,
    # then Java's (long) cast, which truncates and saturates at 2**63 - 1.
    if value < -_TWO_63 or value > _TWO_63:
        raise _unparseable()
    return min(int(value), LONG_MAX)


def _bind_tags(raw: object) -> dict[str, str | None] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _unparseable()
    return {key: _bind_string(value) for key, value in raw.items()}


def _validate(point: _Incoming, rules: NameRules) -> PutResult:
    """IncomingDataPoint.validate, then the value typing and TSDB.addPoint's checks."""
    metric = point.metric
    if not metric:
        return _error(METRIC_EMPTY, point)
    timestamp = point.timestamp
    if timestamp <= 0:
        return _error(INVALID_TIMESTAMP, point)
    raw = point.value
    if raw is None or raw == "":
        return _error(EMPTY_VALUE, point)
    tags = point.tags
    if not tags:
        return _error(MISSING_TAGS, point)
    value: int | float
    if isinstance(raw, str):
        try:
            value = parse_value(raw, metric=metric, timestamp=timestamp)
        except NumberFormatError:
            return _error(NOT_A_NUMBER, point)
        except IllegalValueError as exc:
            return _error(exc.message, point)
    elif isinstance(raw, int) and not LONG_MIN <= raw <= LONG_MAX:
        return _error(NOT_A_NUMBER, point)  # Tags.parseLong: "Value too long"
    else:
        value = raw
    try:
        check_timestamp(metric, timestamp, value, tags)
        check_metric_and_tags(metric, tags, rules)
    except BadRequestError as exc:
        return _error(exc.message, point)
    # check_metric_and_tags refused any None tag value.
    pairs: Tags = tuple(sorted((k, v) for k, v in tags.items() if v is not None))
    return DataPoint(metric, timestamp, value, pairs)


def _error(message: str, point: _Incoming) -> PutError:
    # Jackson writes IncomingDataPoint's non-null properties in declaration order.
    echo: dict[str, Any] = {}
    if point.metric is not None:
        echo["metric"] = point.metric
    echo["timestamp"] = point.timestamp
    if point.value is not None:
        echo["value"] = str(point.value)
    if point.tags is not None:
        echo["tags"] = {k: point.tags[k] for k in _java_hash_order(point.tags)}
    if point.tsuid is not None:
        echo["tsuid"] = point.tsuid
    return PutError(message, cast(DatapointEcho, echo))


# --- Shared with /api/rollup (tsd.protocol.rollup_put) -----------------------------------
# RollUpDataPoint extends IncomingDataPoint: the same body rules, binding and echo.

Incoming = _Incoming


def load_put_elements(body: bytes) -> list[object]:
    """The body's elements, numbers kept as their text; raises BadRequestError with
    OpenTSDB's body-level messages (empty, not an object or array, unparseable, empty)."""
    document = _load_exact(body)
    elements: list[object] = (
        [document] if isinstance(document, dict) else cast(list[object], document)
    )
    if not isinstance(document, dict | list):
        raise BadRequestError(NOT_OBJECT_OR_ARRAY)
    if not elements:
        raise BadRequestError(EMPTY_LIST)
    return elements


def bind_incoming(element: object) -> Incoming:
    """Jackson's binding of one element (raises "Unable to parse the given JSON")."""
    return _bind(element)


def bind_string(raw: object) -> str | None:
    """Jackson's binding of a String property."""
    return _bind_string(raw)


def incoming_error(message: str, point: Incoming) -> PutError:
    """A failure with the point's echo (IncomingDataPoint's NON_NULL properties)."""
    return _error(message, point)


def missing_field(point: Incoming, *, value: bool) -> str | None:
    """IncomingDataPoint.validate's first failure (metric, timestamp, value, tags); with
    ``value=False`` the value is left to the caller (HistogramPojo checks it last)."""
    if not point.metric:
        return METRIC_EMPTY
    if point.timestamp <= 0:
        return INVALID_TIMESTAMP
    if value and (point.value is None or point.value == ""):
        return EMPTY_VALUE
    if not point.tags:
        return MISSING_TAGS
    return None
