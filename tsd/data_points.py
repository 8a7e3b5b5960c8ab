"""Data points as clients send them (``DataPoint``, ``Tags``) and OpenTSDB's timestamp
rules: frozen value types shared by every layer. Pure.

Names follow OpenTSDB's domain words: metric, tagk, tagv, tags, timestamp.
"""

from __future__ import annotations

from typing import NamedTuple

#: Tags as a tuple of (tagk, tagv) pairs sorted by tagk name.
Tags = tuple[tuple[str, str], ...]

#: OpenTSDB treats a timestamp above this as milliseconds (TSDB.checkTimestampAndTags:
#: ``(timestamp & Const.SECOND_MASK) != 0``), not by digit count.
MAX_SECONDS_TIMESTAMP = 0xFFFFFFFF
#: The largest millisecond timestamp OpenTSDB accepts ("bad timestamp" above it).
MAX_MS_TIMESTAMP = 9_999_999_999_999


def make_tags(pairs: dict[str, str] | Tags) -> Tags:
    """Build a canonical Tags tuple (sorted by tagk) from a dict or pairs."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    return tuple(sorted(items))


def is_ms_timestamp(timestamp: int) -> bool:
    """True when OpenTSDB stores this timestamp with a millisecond qualifier."""
    return timestamp > MAX_SECONDS_TIMESTAMP


class DataPoint(NamedTuple):
    """One data point as a client sent it, already typed.

    ``timestamp`` is as given: seconds when <= 2**32-1, else milliseconds
    (OpenTSDB's rule). ``value`` is an int or a float per OpenTSDB's typing rule
    (a value with none of ``.``, ``e``, ``E`` is an integer).

    A NamedTuple (immutable as a frozen dataclass): every put line builds one, and a
    frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field) cost about a
    microsecond of a new series' twenty.
    """

    metric: str
    timestamp: int
    value: int | float
    tags: Tags

    @property
    def timestamp_ms(self) -> int:
        return self.timestamp if is_ms_timestamp(self.timestamp) else self.timestamp * 1000
