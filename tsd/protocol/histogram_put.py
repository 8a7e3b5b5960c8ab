"""Histogram points: ``tsd.core.histograms.config``, the telnet ``histogram`` line and the
/api/histogram body, to the cell OpenTSDB 2.4.1 stores (src/tsd/HistogramDataPointRpc.java,
src/core/HistogramPojo.java, HistogramCodecManager.java, TSDB.addHistogramPoint). Pure.

The one codec tsd knows is OpenTSDB's ``net.opentsdb.core.SimpleHistogramDecoder``
(:mod:`tsd.codec.histogram`); the config maps codec class names to ids 0 to 255.

Telnet: ``histogram <metric> <timestamp> [<codec id>] <value> <tagk=tagv>...``. With an id,
the value is the codec's bytes in base64; without, SimpleHistogram's text
``<lower>,<upper>=<count>:...[:u=<underflow>][:o=<overflow>]``. The words are checked
first (those failures answer ``histogram: illegal argument: ...``); what fails later (the
value, the codec, the series) OpenTSDB reports from its write callback as ``histogram:
HBase error: <message>``.

/api/histogram: /api/put's body with ``id``, ``value`` (base64 codec bytes) or ``buckets``
(``{"<lower>,<upper>": count}``), ``underflow`` and ``overflow``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import orjson

from tsd.codec.histogram import (
    HistogramError,
    SimpleHistogram,
    decode_simple_histogram,
    encode_simple_histogram,
)
from tsd.codec.value import parse_java_double
from tsd.errors import BadRequestError, ConfigError, NumberFormatError, PutLineError
from tsd.protocol.names import parse_tag
from tsd.protocol.telnet_words import metric_and_timestamp

__all__ = [
    "DISABLED",
    "SIMPLE_HISTOGRAM",
    "HistogramCodecs",
    "HistogramFailure",
    "HistogramLine",
    "histogram_from_buckets",
    "histogram_from_text",
    "parse_histogram_config",
    "parse_histogram_line",
]

SIMPLE_HISTOGRAM: Final = "net.opentsdb.core.SimpleHistogramDecoder"
DISABLED: Final = (
    "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration."
)
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")


class HistogramFailure(BadRequestError):
    """A histogram OpenTSDB refuses once parsed: ``number`` marks a NumberFormatException
    (/api/histogram: "Unable to parse value to a number"), ``unexpected`` another runtime
    exception ("Unexpected exception")."""

    def __init__(self, message: str, *, number: bool = False, unexpected: bool = False) -> None:
        super().__init__(message)
        self.number = number
        self.unexpected = unexpected


@dataclass(frozen=True, slots=True)
class HistogramCodecs:
    """HistogramCodecManager: codec id -> class name (only SimpleHistogram's is known)."""

    ids: Mapping[int, str]

    def simple_id(self) -> int:
        """getCodec(SimpleHistogramDecoder.class)."""
        for codec_id, name in self.ids.items():
            if name == SIMPLE_HISTOGRAM:
                return codec_id
        raise HistogramFailure(f"No codec ID assigned to class class {SIMPLE_HISTOGRAM}")

    def check(self, codec_id: int) -> None:
        """getCodec(id)."""
        if codec_id not in self.ids:
            raise HistogramFailure(f"No codec found mapped to ID {codec_id}")

    def decode(self, codec_id: int, raw: bytes) -> SimpleHistogram:
        self.check(codec_id)
        try:
            return decode_simple_histogram(raw, False, codec_id)
        except HistogramError as exc:
            # "Byte array shorter..." is an IllegalArgumentException, Kryo's underflow not
            unexpected = exc.message == "Buffer underflow."
            raise HistogramFailure(exc.message, unexpected=unexpected) from None

    def encode(self, histogram: SimpleHistogram) -> bytes:
        """encode(id, histogram, true): the cell's value."""
        self.check(histogram.codec_id)
        return encode_simple_histogram(histogram, True)


def parse_histogram_config(text: str) -> HistogramCodecs:
    """The JSON map of ``tsd.core.histograms.config`` (the caller reads a ``.json`` file)."""
    try:
        mappings = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError("tsd.core.histograms.config", f"not valid JSON: {exc}") from None
    if not isinstance(mappings, dict):
        raise ConfigError("tsd.core.histograms.config", "must be a JSON object")
    ids: dict[int, str] = {}
    for name, codec_id in mappings.items():
        if not isinstance(codec_id, int) or not 0 <= codec_id <= 255:
            raise ConfigError(
                "tsd.core.histograms.config", f"ID for codec '{name}' must be from 0 to 255."
            )
        if codec_id in ids:
            raise ConfigError(
                "tsd.core.histograms.config", f"Duplicate ID found for codec '{name}': {codec_id}"
            )
        if name != SIMPLE_HISTOGRAM:
            raise ConfigError(
                "tsd.core.histograms.config", f"Unable to find a decoder named '{name}'"
            )
        ids[codec_id] = name
    return HistogramCodecs(ids)


def _java_long(text: str) -> int:
    """Long.parseLong (NumberFormatException 'For input string: "x"')."""
    if _JAVA_INT.fullmatch(text) is None or not -(2**63) <= int(text) < 2**63:
        raise HistogramFailure(f'For input string: "{text}"', number=True)
    return int(text)


def _java_float(text: str) -> float:
    """Float.parseFloat."""
    try:
        return parse_java_double(text)
    except NumberFormatError as exc:
        raise HistogramFailure(exc.message, number=True) from None


def histogram_from_text(text: str, codec_id: int) -> SimpleHistogram:
    """HistogramDataPointRpc.parseTelnet."""
    histogram = SimpleHistogram(codec_id)
    for bucket in text.split(":"):
        kv = bucket.split("=")
        if len(kv) != 2:
            raise HistogramFailure(f"Improperly formatted bucket: {bucket}")
        key = kv[0].lower()
        if key == "u":
            histogram.underflow = _java_long(kv[1])
        elif key == "o":
            histogram.overflow = _java_long(kv[1])
        else:
            bounds = key.split(",")
            if len(bounds) != 2:
                raise HistogramFailure(f"Improperly formatted bounds: {bucket}")
            histogram.add_bucket(_java_float(bounds[0]), _java_float(bounds[1]), _java_long(kv[1]))
    return histogram


def histogram_from_buckets(
    buckets: Mapping[str, int | None], underflow: int, overflow: int, codec_id: int
) -> SimpleHistogram:
    """HistogramPojo.toSimpleHistogram."""
    if not buckets:
        raise HistogramFailure("Buckets cannot be empty when creating a simple histogram.")
    histogram = SimpleHistogram(codec_id, underflow=underflow, overflow=overflow)
    for key, count in buckets.items():
        bounds = key.split(",")
        if len(bounds) != 2:
            raise HistogramFailure(f"Unable to parse bucket bounds: {key}")
        histogram.add_bucket(_java_float(bounds[0]), _java_float(bounds[1]), count or 0)
    return histogram


def base64_bytes(text: str) -> bytes:
    """DatatypeConverter.parseBase64Binary, which skips what is not base64."""
    kept = "".join(c for c in text if c.isascii() and (c.isalnum() or c in "+/"))
    try:
        return base64.b64decode(kept + "=" * (-len(kept) % 4))
    except binascii.Error:
        return base64.b64decode(kept[: len(kept) - len(kept) % 4])


@dataclass(frozen=True, slots=True)
class HistogramLine:
    """A parsed ``histogram`` line: its words checked, its value not yet."""

    metric: str
    timestamp: int
    codec_id: int | None
    value: str
    tags: dict[str, str]


def _illegal(message: str) -> PutLineError:
    return PutLineError(PutLineError.ILLEGAL_ARGUMENT, message, "histogram")


def parse_histogram_line(words: list[str], enabled: bool) -> HistogramLine:
    """HistogramDataPointRpc.importDataPoint up to its ``try``: raises PutLineError with
    the reply line."""
    if not enabled:
        raise _illegal(DISABLED)
    if len(words) < 5:
        raise _illegal(f"not enough arguments (need least 5, got {len(words) - 1})")
    metric, timestamp = metric_and_timestamp(words[1], words[2], "histogram")
    codec_id: int | None = None
    if _JAVA_INT.fullmatch(words[3]) and -(2**31) <= int(words[3]) < 2**31:
        codec_id = int(words[3])
    value = words[4] if codec_id is not None else words[3]
    if not value:
        raise _illegal("empty histogram value")
    tags: dict[str, str] = {}
    try:
        for word in words[5 if codec_id is not None else 4 :]:
            if word:
                parse_tag(tags, word)
    except BadRequestError as exc:
        raise _illegal(exc.message) from None
    return HistogramLine(metric, timestamp, codec_id, value, tags)


def line_histogram(line: HistogramLine, codecs: HistogramCodecs) -> SimpleHistogram:
    """The line's histogram (inside OpenTSDB's ``try``: failures are HistogramFailure)."""
    if line.codec_id is not None:
        return codecs.decode(line.codec_id, base64_bytes(line.value))
    return histogram_from_text(line.value, codecs.simple_id())
