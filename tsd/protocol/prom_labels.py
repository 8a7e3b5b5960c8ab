"""Prometheus series <-> OpenTSDB series: the mapping of remote write and remote read. Pure.

A Prometheus series is a set of labels, one of them ``__name__``; an OpenTSDB series is a
metric and 1 to ``tsd.storage.max_tags`` tags, every name made of ``a-z A-Z 0-9 - _ . /``,
letters and the characters of ``tsd.core.tag.allow_specialchars``, and stored as
ISO-8859-1 (a character outside it becomes ``?``). The rules (README "From Prometheus"):

* metric = ``__name__``; every other label is a tag, its name the tag key, its value the
  tag value.
* Escaping. A character a name cannot hold (``:`` of ``instance="host:9090"``, ``+`` of
  ``le="+Inf"``, a space, a character outside ISO-8859-1) is written as ``_.`` and two
  upper-case hex digits per byte of its UTF-8 form (``:`` -> ``_.3A``); so is the ``_`` of
  a ``_.`` already in the text, so that the mapping is reversible. Anything else, a name
  already valid in particular, is kept as is. Characters of
  ``tsd.core.tag.allow_specialchars`` (ISO-8859-1 ones) are kept. :func:`unescape` undoes
  it exactly; a stored name that holds no well-formed escape is read as it is.
* An empty label value is no label (Prometheus' own meaning: ``label=""`` matches series
  without it), so it is dropped. An empty label name, a series without ``__name__`` or
  without any other label (OpenTSDB needs a tag), or with more labels than
  ``tsd.storage.max_tags`` besides ``__name__``, is refused: counted and logged by the
  caller, the rest of the request stored.
* Samples: the timestamp in milliseconds, the value a double. NaN (Prometheus' staleness
  markers included), and infinities are not stored (OpenTSDB 2.4.1 refuses them, and
  reads what tsd stores), only counted. A timestamp OpenTSDB would read as seconds
  (before 1970-02-19) or after year 2286 is refused.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tsd.data_points import MAX_MS_TIMESTAMP, MAX_SECONDS_TIMESTAMP, Tags

__all__ = [
    "ESCAPE",
    "METRIC_LABEL",
    "LabelMapper",
    "MappedSeries",
    "RefusedSeries",
    "classify_nonfinite",
    "is_storable_timestamp",
    "unescape",
    "unmap_series",
]

#: The label whose value is the metric.
METRIC_LABEL: Final = "__name__"
#: The escape's lead-in: both characters are valid names, and rare together.
ESCAPE: Final = "_."
#: Prometheus' staleness marker: a NaN with this bit pattern (value.StaleNaN).
STALE_NAN_BITS: Final = 0x7FF0000000000002

_ESCAPED: Final = re.compile(r"(?:_\.[0-9A-F]{2})+")


def _is_kept(char: str, special_chars: str) -> bool:
    """True when ``char`` is stored as itself: valid in an OpenTSDB name and in ISO-8859-1."""
    if "a" <= char <= "z" or "A" <= char <= "Z" or "0" <= char <= "9" or char in "-_./":
        return True
    if char > "\xff":
        return False
    return char.isalpha() or char in special_chars


def escape(text: str, special_chars: str = "") -> str:
    """``text`` as an OpenTSDB name (see the module's docstring): valid text without
    ``_.`` comes back unchanged."""
    if ESCAPE not in text and all(_is_kept(char, special_chars) for char in text):
        return text
    out: list[str] = []
    last = len(text) - 1
    for index, char in enumerate(text):
        if char == "_":
            escaped = index < last and text[index + 1] == "."
        else:
            escaped = not _is_kept(char, special_chars)
        if escaped:
            out.extend(f"_.{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        else:
            out.append(char)
    return "".join(out)


def unescape(name: str) -> str:
    """A stored name -> the Prometheus text :func:`escape` made it from. Runs of escapes
    that are not UTF-8 are left as they are (a name tsd did not write)."""
    if ESCAPE not in name:
        return name

    def one_run(match: re.Match[str]) -> str:
        run = match.group(0)
        raw = bytes(int(run[i + 2 : i + 4], 16) for i in range(0, len(run), 4))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return run

    return _ESCAPED.sub(one_run, name)


@dataclass(frozen=True, slots=True)
class MappedSeries:
    """A series as OpenTSDB stores it."""

    metric: str
    tags: Tags


@dataclass(frozen=True, slots=True)
class RefusedSeries:
    """A series that cannot be stored: the reason (a counter's label) and a message."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class LabelMapper:
    """Maps label sets under one configuration (``allow_specialchars``, ``max_tags``)."""

    special_chars: str = ""
    max_tags: int = 8

    def map_series(self, labels: Iterable[tuple[str, str]]) -> MappedSeries | RefusedSeries:
        """Prometheus labels -> the OpenTSDB series, or why it cannot be stored."""
        metric: str | None = None
        tags: dict[str, str] = {}
        special = self.special_chars
        for name, value in labels:
            if name == METRIC_LABEL:
                metric = value
                continue
            if not name:
                return RefusedSeries("empty_label_name", "a label has an empty name")
            if not value:
                continue  # Prometheus' meaning: no such label
            key = escape(name, special)
            if key in tags:
                return RefusedSeries("duplicate_label", f"duplicate label {name!r}")
            tags[key] = escape(value, special)
        if not metric:
            return RefusedSeries("no_metric_name", "the series has no __name__ label")
        if not tags:
            return RefusedSeries(
                "no_labels",
                f"series {metric!r} has no label besides __name__ (OpenTSDB needs a tag)",
            )
        if len(tags) > self.max_tags:
            return RefusedSeries(
                "too_many_labels",
                f"series {metric!r} has {len(tags)} labels besides __name__, more than"
                f" tsd.storage.max_tags ({self.max_tags})",
            )
        return MappedSeries(escape(metric, special), tuple(sorted(tags.items())))


def unmap_series(metric: str, tags: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """A stored series -> its Prometheus labels, sorted by name (as Prometheus sorts them)."""
    labels = [(METRIC_LABEL, unescape(metric))]
    labels.extend((unescape(key), unescape(value)) for key, value in tags)
    labels.sort()
    return labels


def classify_nonfinite(value: float) -> str | None:
    """None for a finite value, else why it is not stored: ``stale`` (Prometheus'
    staleness marker), ``nan`` or ``inf``."""
    if value - value == 0.0:
        return None
    if math.isinf(value):
        return "inf"
    if struct.unpack("<Q", struct.pack("<d", value))[0] == STALE_NAN_BITS:
        return "stale"
    return "nan"


def is_storable_timestamp(timestamp_ms: int) -> bool:
    """True when OpenTSDB stores ``timestamp_ms`` as the millisecond timestamp it is."""
    return MAX_SECONDS_TIMESTAMP < timestamp_ms <= MAX_MS_TIMESTAMP
