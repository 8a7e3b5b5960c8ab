"""Data table row keys: ``[salt][metric uid][base_time][tagk uid tagv uid]*``.

Theory of operation (behaviour doc §4.1, §4.2, §3.6 and §4.7; OpenTSDB 2.4.1
``src/core/RowKey.java`` prefixKeyWithSalt / getSaltBytes / rowKeyFromTSUID,
``src/core/IncomingDataPoints.java`` rowKeyTemplate, ``src/core/Internal.java`` baseTime,
``src/core/TsdbQuery.java`` getScanStartTimeSeconds / getScanEndTimeSeconds,
``src/query/QueryUtil.java`` getMetricScanner):

* The base time is the hour-aligned time in seconds, 4 bytes big-endian. Java writes it with
  ``(int) base_time``, so only its low 32 bits are kept.
* Tag pairs are sorted by their tagk UID bytes (memcmp).
* Salt (``salt_width`` > 0): Java's ``Arrays.hashCode`` over the metric UID followed by the
  tag bytes (signed bytes, h = 31*h + b, 32-bit wrap, starting at 1), Java ``%`` by the
  number of buckets, negated if negative; written big-endian on ``salt_width`` bytes. A row
  whose metric UID is all zero bytes (the global annotation row) is never salted.
* Scans: start ``[salt][metric][scan start]`` inclusive, stop ``[salt][metric][scan end]``
  exclusive, with the start aligned down to the hour and the end pushed to the next hour
  boundary strictly after it (with downsampling, first to the next interval boundary). One
  scan per salt bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple, Protocol

import tsd.native as native
from tsd.codec.const import (
    MAX_SALT_WIDTH,
    MAX_TIMESPAN,
    MAX_UID_WIDTH,
    METRIC_WIDTH,
    MIN_UID_WIDTH,
    SALT_BUCKETS,
    SALT_WIDTH,
    SECOND_MASK,
    TAGK_WIDTH,
    TAGV_WIDTH,
    TIMESTAMP_BYTES,
)
from tsd.errors import CodecError

__all__ = [
    "KeyLayout",
    "RowKeyParts",
    "SeriesKey",
    "base_time_for",
    "decode_row_key",
    "encode_row_key",
    "encode_tags",
    "java_bytes_hash",
    "make_series_key",
    "salt_bucket",
    "salt_bytes",
    "salt_prefix",
    "scan_bounds",
    "scan_end_time_s",
    "scan_start_time_s",
    "series_keys",
    "series_name_key",
    "series_tsuids",
]

TagPairs = Sequence[tuple[bytes, bytes]]


class _StorageWidths(Protocol):
    @property
    def metric_width(self) -> int: ...
    @property
    def tagk_width(self) -> int: ...
    @property
    def tagv_width(self) -> int: ...
    @property
    def salt_width(self) -> int: ...
    @property
    def salt_buckets(self) -> int: ...


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Widths of the row key parts (tsd.storage.uid.width.*, tsd.storage.salt.*)."""

    metric_width: int = METRIC_WIDTH
    tagk_width: int = TAGK_WIDTH
    tagv_width: int = TAGV_WIDTH
    salt_width: int = SALT_WIDTH
    salt_buckets: int = SALT_BUCKETS

    def __post_init__(self) -> None:
        for name in ("metric_width", "tagk_width", "tagv_width"):
            width = getattr(self, name)
            if not MIN_UID_WIDTH <= width <= MAX_UID_WIDTH:
                raise CodecError(f"Invalid width: {width} ({name})")
        if not 0 <= self.salt_width <= MAX_SALT_WIDTH:
            raise CodecError("Salt width must be between 0 and 8")
        if self.salt_buckets < 1:
            raise CodecError("Salt buckets must be greater than 0")

    @classmethod
    def from_storage_config(cls, cfg: _StorageWidths) -> KeyLayout:
        """Build from anything with the StorageConfig attribute names."""
        return cls(
            metric_width=cfg.metric_width,
            tagk_width=cfg.tagk_width,
            tagv_width=cfg.tagv_width,
            salt_width=cfg.salt_width,
            salt_buckets=cfg.salt_buckets,
        )

    @property
    def tag_pair_width(self) -> int:
        return self.tagk_width + self.tagv_width

    @property
    def tags_start(self) -> int:
        """Index of the first tagk byte in a row key."""
        return self.salt_width + self.metric_width + TIMESTAMP_BYTES

    @property
    def is_salted(self) -> bool:
        return self.salt_width > 0


class RowKeyParts(NamedTuple):
    """A decoded row key. ``tags`` are (tagk uid, tagv uid) pairs in key order."""

    salt: bytes
    metric_uid: bytes
    base_time_s: int
    tags: tuple[tuple[bytes, bytes], ...]


def base_time_for(timestamp_s: int) -> int:
    """The row's base time for a time in seconds: aligned down to the hour."""
    return timestamp_s - timestamp_s % MAX_TIMESPAN


def java_bytes_hash(data: bytes) -> int:
    """Java's ``Arrays.hashCode(byte[])`` as a signed 32-bit int."""
    h = 1
    for b in data:
        h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
    return h - 0x100000000 if h > 0x7FFFFFFF else h


def salt_bucket(layout: KeyLayout, metric_uid: bytes, tag_bytes: bytes) -> int:
    """RowKey.prefixKeyWithSalt's bucket: Arrays.hashCode(metric + tags) % buckets, made >= 0.

    ``tag_bytes`` is the concatenation of the (sorted) tag pairs as they appear in the key.
    """
    h = java_bytes_hash(metric_uid + tag_bytes)
    # Java's % truncates toward zero; a negative remainder is then negated.
    return abs(h) % layout.salt_buckets


def salt_bytes(layout: KeyLayout, bucket: int) -> bytes:
    """RowKey.getSaltBytes: the bucket number big-endian on ``salt_width`` bytes."""
    width = layout.salt_width
    return (bucket & ((1 << (8 * width)) - 1)).to_bytes(width, "big") if width else b""


def _check_uid(uid: bytes, width: int, what: str) -> None:
    if len(uid) != width:
        raise CodecError(f"{what} uid must be {width} bytes, got {len(uid)}: {uid.hex()!r}")


def encode_tags(layout: KeyLayout, tags: TagPairs) -> bytes:
    """The tag part of a row key or TSUID: pairs checked, sorted by tagk uid, concatenated.

    Raises CodecError for a uid of the wrong width or a tagk uid given twice.
    """
    for tagk, tagv in tags:
        _check_uid(tagk, layout.tagk_width, "tagk")
        _check_uid(tagv, layout.tagv_width, "tagv")
    ordered = sorted(tags)
    for i in range(1, len(ordered)):
        if ordered[i][0] == ordered[i - 1][0]:
            raise CodecError(f"duplicate tagk uid in row key: {ordered[i][0].hex()!r}")
    return b"".join(tagk + tagv for tagk, tagv in ordered)


def salt_prefix(layout: KeyLayout, metric_uid: bytes, tag_bytes: bytes) -> bytes:
    """The salt bytes of a row (empty when unsalted; zeros for the global annotation row)."""
    if not layout.salt_width:
        return b""
    if not any(metric_uid):  # the global annotation row keeps zero salt bytes
        return bytes(layout.salt_width)
    return salt_bytes(layout, salt_bucket(layout, metric_uid, tag_bytes))


def _time_bytes(base_time_s: int) -> bytes:
    return (base_time_s & 0xFFFFFFFF).to_bytes(TIMESTAMP_BYTES, "big")


def encode_row_key(layout: KeyLayout, metric_uid: bytes, base_time_s: int, tags: TagPairs) -> bytes:
    """The row key of a series at a base time; tag pairs are sorted by tagk uid here.

    An all-zero ``metric_uid`` with no tags is the global annotation row (never salted).
    """
    _check_uid(metric_uid, layout.metric_width, "metric")
    tag_bytes = encode_tags(layout, tags)
    salt = salt_prefix(layout, metric_uid, tag_bytes)
    return salt + metric_uid + _time_bytes(base_time_s) + tag_bytes


def decode_row_key(layout: KeyLayout, key: bytes) -> RowKeyParts:
    """Split a row key into its parts. Raises CodecError when the length does not fit."""
    start = layout.tags_start
    tags_length = len(key) - start
    pair = layout.tag_pair_width
    if tags_length < 0 or tags_length % pair:
        raise CodecError(f"Row key is missing tags or it is corrupted: {key.hex()!r}")
    salt_width = layout.salt_width
    metric_end = salt_width + layout.metric_width
    tagk_width = layout.tagk_width
    tags = tuple(
        (key[i : i + tagk_width], key[i + tagk_width : i + pair])
        for i in range(start, len(key), pair)
    )
    return RowKeyParts(
        salt=key[:salt_width],
        metric_uid=key[salt_width:metric_end],
        base_time_s=int.from_bytes(key[metric_end:start], "big"),
        tags=tags,
    )


#: the row base times series keep (:meth:`SeriesKey.row_key`), one object per hour
_BASES: dict[int, int] = {}
_MAX_BASES = 4096


class SeriesKey:
    """A per-series row key template, built once by :func:`make_series_key`.

    The salt depends only on the metric and tags, so a row key is the fixed prefix, 4 time
    bytes and the fixed tag suffix. The last key is cached: consecutive points of a series
    mostly fall in the same hour. The tag suffix is kept as the TSUID (the metric UID and
    the suffix, one object): meta tracking's set of series written keeps that same object
    (:attr:`tsuid`) rather than a copy of its own.

    Four slots, no more (an object of 64 bytes with its collector header, where six took
    80: there is one per series, millions of them): an unsalted key's prefix is its metric
    UID and its salt empty; ``SeriesKey(salt, ...)`` with a salt makes a
    :class:`_SaltedSeriesKey`, which keeps both.
    """

    __slots__ = ("_last_base", "_last_key", "_tsuid", "metric_uid")

    def __new__(cls, salt: bytes, metric_uid: bytes, tag_bytes: bytes) -> SeriesKey:
        return object.__new__(_SaltedSeriesKey if salt and cls is SeriesKey else cls)

    def __init__(self, salt: bytes, metric_uid: bytes, tag_bytes: bytes) -> None:
        self.metric_uid = metric_uid
        self._tsuid = metric_uid + tag_bytes
        self._last_base = -1
        self._last_key = b""

    @property
    def salt(self) -> bytes:
        """The salt bytes of every row of this series (empty when unsalted)."""
        return b""

    @property
    def _prefix(self) -> bytes:
        """What a row key starts with: the salt, then the metric UID."""
        return self.metric_uid

    @property
    def tsuid(self) -> bytes:
        """metric uid + sorted tag pairs (no salt, no time): the template's own object."""
        return self._tsuid

    def row_key(self, base_time_s: int) -> bytes:
        """The row key of this series for the row starting at ``base_time_s``."""
        if base_time_s == self._last_base:
            return self._last_key
        suffix = self._tsuid[len(self.metric_uid) :]
        key = self._prefix + (base_time_s & 0xFFFFFFFF).to_bytes(4, "big") + suffix
        # one int object per hour shared by every series, not one each (32 bytes a series:
        # the compiled encoders hand each series a base of its own)
        shared = _BASES.get(base_time_s)
        if shared is None:
            if len(_BASES) >= _MAX_BASES:
                _BASES.clear()
            shared = _BASES[base_time_s] = base_time_s
        self._last_base = shared
        self._last_key = key
        return key

    def __repr__(self) -> str:
        return f"SeriesKey(salt={self.salt.hex()!r}, tsuid={self.tsuid.hex().upper()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SeriesKey):
            return NotImplemented
        return self.salt == other.salt and self.tsuid == other.tsuid

    def __hash__(self) -> int:
        return hash((self.salt, self.tsuid))


_TSUID_SLOT = attrgetter("_tsuid")


def series_tsuids(refs: Iterable[SeriesKey]) -> list[bytes]:
    """The :attr:`SeriesKey.tsuid` of each of ``refs``, read from its slot at C speed (a
    burst of new series' refs is thousands: the property is a Python call each)."""
    return list(map(_TSUID_SLOT, refs))


class _SaltedSeriesKey(SeriesKey):
    """A :class:`SeriesKey` of a salted layout: its salt and prefix kept."""

    __slots__ = ("_salted_prefix", "_salt")

    def __init__(self, salt: bytes, metric_uid: bytes, tag_bytes: bytes) -> None:
        super().__init__(salt, metric_uid, tag_bytes)
        self._salt = salt
        self._salted_prefix = salt + metric_uid

    @property
    def salt(self) -> bytes:
        return self._salt

    @property
    def _prefix(self) -> bytes:
        return self._salted_prefix


def python_tag_suffix(tags: TagPairs, tagk_width: int, tagv_width: int) -> bytes | None:
    """The tag pairs' bytes in tag key order, or None when a pair is not of these widths
    or a tag key repeats (the caller then says which, through :func:`encode_tags`)."""
    ordered = sorted(tags)
    last = None
    for tagk, tagv in ordered:  # sorted: a tagk given twice is next to itself
        if len(tagk) != tagk_width or len(tagv) != tagv_width or tagk == last:
            return None
        last = tagk
    return b"".join([tagk + tagv for tagk, tagv in ordered])


# the C version (tsd/codec/_encode.c): one call, not a sort, a loop and a join
tag_suffix: Callable[[TagPairs, int, int], bytes | None] = native.attribute(
    "tsd.codec._encode", "tag_suffix", python_tag_suffix
)


def make_series_key(layout: KeyLayout, metric_uid: bytes, tags: TagPairs) -> SeriesKey:
    """Build the row key template of one series (validates widths, sorts tags, salts).

    Every new series passes here once (a burst of them): the common case, pairs of the
    layout's widths with distinct tag keys, is checked and joined by :func:`tag_suffix`
    in one call; anything else goes through :func:`encode_tags` for its error.
    """
    _check_uid(metric_uid, layout.metric_width, "metric")
    tag_bytes = tag_suffix(tags, layout.tagk_width, layout.tagv_width)
    if tag_bytes is None:
        encode_tags(layout, sorted(tags))  # raises for the wrong width or the duplicate tagk
        tag_bytes = b"".join([tagk + tagv for tagk, tagv in sorted(tags)])
    if not layout.salt_width:
        return SeriesKey(b"", metric_uid, tag_bytes)
    return SeriesKey(salt_prefix(layout, metric_uid, tag_bytes), metric_uid, tag_bytes)


def python_series_keys(
    cls: type[SeriesKey],
    metrics: Sequence[str],
    tags_list: Sequence[Sequence[tuple[str, str]]],
    metric_uids: Mapping[str, bytes],
    key_uids: Mapping[str, bytes],
    value_uids: Mapping[str, bytes],
    metric_width: int,
    tagk_width: int,
    tagv_width: int,
) -> list[SeriesKey | None]:
    """The unsalted row-key templates of a burst of series, from the ``{name: uid}``
    maps of their UID batch: per series, ``cls(b"", metric_uid, suffix)`` as
    :func:`make_series_key` makes it, or None where it would check further (a name
    without a UID, a UID of another width, a repeated tag key: the caller takes that
    series through the per-series path, which says what is wrong). The specification of
    the C version (``tsd/codec/_encode.c``), which makes them in one pass."""
    keys: list[SeriesKey | None] = []
    for metric, tags in zip(metrics, tags_list, strict=True):
        metric_uid = metric_uids.get(metric)
        try:
            pairs = [(key_uids[tagk], value_uids[tagv]) for tagk, tagv in tags]
        except KeyError:
            keys.append(None)
            continue
        if metric_uid is None or len(metric_uid) != metric_width:
            keys.append(None)
            continue
        suffix = python_tag_suffix(pairs, tagk_width, tagv_width)
        keys.append(None if suffix is None else cls(b"", metric_uid, suffix))
    return keys


# the C version: one call for a burst, no Python step per series
_series_keys: Callable[..., list[SeriesKey | None]] = native.attribute(
    "tsd.codec._encode", "series_keys", python_series_keys
)


def series_keys(
    layout: KeyLayout,
    metrics: Sequence[str],
    tags_list: Sequence[Sequence[tuple[str, str]]],
    metric_uids: Mapping[str, bytes],
    key_uids: Mapping[str, bytes],
    value_uids: Mapping[str, bytes],
) -> list[SeriesKey | None]:
    """The row-key templates of a burst of new series (one UID batch), or None for a
    series the per-series path (:func:`make_series_key`) must take: every one of them
    on a salted layout (the salt is computed per series there)."""
    if layout.salt_width:
        return [None] * len(metrics)
    return _series_keys(
        SeriesKey,
        metrics,
        tags_list,
        metric_uids,
        key_uids,
        value_uids,
        layout.metric_width,
        layout.tagk_width,
        layout.tagv_width,
    )


#: a series' tag names, as parsed: (tag key, tag value) pairs
NameTags = tuple[tuple[str, str], ...]


def python_series_name_key(metric: str, tags: NameTags) -> str | tuple[str, NameTags]:
    """The key of a series in the ingest service's refs: its metric and tag names joined
    by NUL characters, one str (about 80 bytes kept per series, where the parsed
    ``(metric, tags)`` tuple of tuples kept its tuples and tag value strings alive: about
    300). Names never hold a NUL under OpenTSDB's character rules; should one (a
    ``tsd.core.tag.allow_specialchars`` of that), the join would be ambiguous, and the
    series keeps the tuple instead (the NULs are counted: the join has one per name)."""
    key = "\0".join([metric, *map("\0".join, tags)])
    if key.count("\0") != 2 * len(tags):
        return (metric, tags)
    return key


#: :func:`python_series_name_key` (its specification) in one C call where built
#: (``tsd/codec/_encode.c``): every miss of a burst of new series computes it
series_name_key: Callable[[str, NameTags], str | tuple[str, NameTags]] = native.attribute(
    "tsd.codec._encode", "series_name_key", python_series_name_key
)


# --- Scans -----------------------------------------------------------------------------------


def scan_start_time_s(start: int, interval_ms: int = 0) -> int:
    """TsdbQuery.getScanStartTimeSeconds for a raw query start (s, or ms beyond 32 bits).

    With a downsample interval the start is first aligned down to it, then to the hour;
    never negative.
    """
    if start & SECOND_MASK:
        start //= 1000
    aligned = start
    if interval_ms > 0:
        aligned -= (1000 * start) % interval_ms // 1000
    aligned -= aligned % MAX_TIMESPAN
    return aligned if aligned > 0 else 0


def scan_end_time_s(end: int, interval_ms: int = 0) -> int:
    """TsdbQuery.getScanEndTimeSeconds for a raw query end (s, or ms beyond 32 bits).

    The result is the exclusive stop time: the next hour boundary strictly after ``end``;
    with a downsample interval, ``end`` is first pushed to the next interval boundary
    (strictly after it), then up to an hour boundary if not already on one. A ms end is cut
    to seconds and bumped by one second, as OpenTSDB does.
    """
    if end & SECOND_MASK:
        end = end // 1000 + 1
    if interval_ms > 0:
        aligned = end + (interval_ms - (1000 * end) % interval_ms) // 1000
        offset = aligned % MAX_TIMESPAN
        return aligned if offset == 0 else aligned + (MAX_TIMESPAN - offset)
    return end + (MAX_TIMESPAN - end % MAX_TIMESPAN)


def scan_bounds(
    layout: KeyLayout,
    metric_uid: bytes,
    start_s: int,
    end_s: int | None,
    bucket: int | None = None,
    *,
    interval_ms: int = 0,
) -> tuple[bytes, bytes]:
    """``(start_key, stop_key)`` of the scan over one metric (QueryUtil.getMetricScanner).

    ``start_s`` and ``end_s`` are the query's inclusive bounds in seconds; they are widened
    to whole rows here (see :func:`scan_start_time_s` / :func:`scan_end_time_s`, with
    ``interval_ms`` the downsample interval if any). ``end_s`` None scans to the end of the
    metric (stop time 0xFFFFFFFF). With salting, pass the ``bucket`` to scan; each bucket
    needs its own scan.
    """
    _check_uid(metric_uid, layout.metric_width, "metric")
    if layout.salt_width:
        if bucket is None:
            raise CodecError("a salted layout needs a salt bucket for each scan")
        if not 0 <= bucket < layout.salt_buckets:
            raise CodecError(f"salt bucket out of range 0..{layout.salt_buckets - 1}: {bucket}")
        prefix = salt_bytes(layout, bucket) + metric_uid
    else:
        prefix = metric_uid
    start_time = scan_start_time_s(start_s, interval_ms)
    stop_time = 0xFFFFFFFF if end_s is None else scan_end_time_s(end_s, interval_ms)
    return prefix + _time_bytes(start_time), prefix + _time_bytes(stop_time)
