"""TSUIDs: a series' identity, metric uid + sorted tag pairs, shown as uppercase hex.

Theory of operation (behaviour doc §4.1 and reference/opentsdb-uids-and-tsuids.rst; OpenTSDB
2.4.1 ``src/uid/UniqueId.java`` uidToString / stringToUid / getTSUIDFromKey /
getTagPairsFromTSUID, ``src/core/RowKey.java`` rowKeyFromTSUID):

* A TSUID is the row key without the salt and the base time. As hex it is uppercase
  (``DatatypeConverter.printHexBinary``); parsing accepts either case, and pads an odd-length
  string with one leading ``0`` (``UniqueId.stringToUid``).
* The tsdb-meta table uses the TSUID bytes as its row key (unsalted).
"""

from __future__ import annotations

import binascii

from tsd.codec.const import MAX_TIMESPAN, SECOND_MASK, TIMESTAMP_BYTES
from tsd.codec.rowkey import KeyLayout, TagPairs, encode_tags, salt_prefix
from tsd.errors import CodecError

__all__ = [
    "parse_tsuid_hex",
    "row_key_from_tsuid",
    "split_tsuid",
    "tsuid_from_parts",
    "tsuid_from_row_key",
    "tsuid_to_hex",
    "uid_to_hex",
]


def uid_to_hex(uid: bytes) -> str:
    """UniqueId.uidToString: uppercase hex, two digits per byte."""
    return uid.hex().upper()


#: A TSUID prints like any other UID.
tsuid_to_hex = uid_to_hex


def parse_tsuid_hex(text: str) -> bytes:
    """UniqueId.stringToUid: hex (any case) to bytes; odd lengths get one leading '0'.

    Raises CodecError for empty or non-hex text.
    """
    if not text:
        raise CodecError("UID was empty")
    if len(text) % 2:
        text = "0" + text
    if not text.isascii():
        raise CodecError(f"UID is not valid hex: {text!r}")
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        raise CodecError(f"UID is not valid hex: {text!r}") from None


def tsuid_from_parts(layout: KeyLayout, metric_uid: bytes, tags: TagPairs) -> bytes:
    """The TSUID of a series: metric uid + tag pairs sorted by tagk uid."""
    if len(metric_uid) != layout.metric_width:
        raise CodecError(f"metric uid must be {layout.metric_width} bytes: {metric_uid.hex()!r}")
    return metric_uid + encode_tags(layout, tags)


def tsuid_from_row_key(layout: KeyLayout, key: bytes) -> bytes:
    """UniqueId.getTSUIDFromKey: drop the salt and the base time from a row key."""
    tags_length = len(key) - layout.tags_start
    pair = layout.tag_pair_width
    if tags_length < pair or tags_length % pair:
        raise CodecError(f"Row key is missing tags or it is corrupted: {key.hex()!r}")
    metric_end = layout.salt_width + layout.metric_width
    return key[layout.salt_width : metric_end] + key[metric_end + TIMESTAMP_BYTES :]


def split_tsuid(layout: KeyLayout, tsuid: bytes) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    """``(metric_uid, tag pairs)`` of a TSUID (UniqueId.getTagPairsFromTSUID's checks)."""
    width = layout.metric_width
    if len(tsuid) <= width:
        raise CodecError("TSUID is too short, may be missing tags")
    pair = layout.tag_pair_width
    if (len(tsuid) - width) % pair:
        raise CodecError("The TSUID appears to be malformed, improper tag width")
    tagk_width = layout.tagk_width
    tags = tuple(
        (tsuid[i : i + tagk_width], tsuid[i + tagk_width : i + pair])
        for i in range(width, len(tsuid), pair)
    )
    return tsuid[:width], tags


def row_key_from_tsuid(layout: KeyLayout, tsuid: bytes, timestamp: int) -> bytes:
    """RowKey.rowKeyFromTSUID: the (salted) row key holding ``timestamp`` (s, or ms > 32 bits).

    The tag pairs are kept in the TSUID's order.
    """
    width = layout.metric_width
    if len(tsuid) < width:
        raise CodecError("TSUID appears to be missing the metric")
    seconds = timestamp // 1000 if timestamp & SECOND_MASK else timestamp
    base_time_s = seconds - seconds % MAX_TIMESPAN
    metric_uid, tag_bytes = tsuid[:width], tsuid[width:]
    time_bytes = (base_time_s & 0xFFFFFFFF).to_bytes(TIMESTAMP_BYTES, "big")
    return salt_prefix(layout, metric_uid, tag_bytes) + metric_uid + time_bytes + tag_bytes
