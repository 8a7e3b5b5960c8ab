"""TSUIDs. Pins OpenTSDB 2.4.1 src/uid/UniqueId.java (uidToString, stringToUid,
getTSUIDFromKey, getTagPairsFromTSUID) and src/core/RowKey.java (rowKeyFromTSUID);
example values from reference/opentsdb-uids-and-tsuids.rst."""

from __future__ import annotations

import pytest

from tsd.codec.rowkey import KeyLayout, encode_row_key
from tsd.codec.tsuid import (
    parse_tsuid_hex,
    row_key_from_tsuid,
    split_tsuid,
    tsuid_from_parts,
    tsuid_from_row_key,
    tsuid_to_hex,
    uid_to_hex,
)
from tsd.errors import CodecError

LAYOUT = KeyLayout()
SALTED = KeyLayout(salt_width=1, salt_buckets=20)


def u(n: int) -> bytes:
    return n.to_bytes(3, "big")


@pytest.mark.parametrize(
    ("uid", "text"),
    [
        pytest.param(u(1), "000001", id="uid_1"),
        pytest.param(u(255), "0000FF", id="uid_255_uppercase"),
        # ERRATA.md: the signed byte -28 is 0xE4.
        pytest.param(bytes([0, 0, 256 - 28]), "0000E4", id="signed_minus_28"),
    ],
)
def test_uid_hex(uid: bytes, text: str) -> None:
    assert uid_to_hex(uid) == text
    assert parse_tsuid_hex(text) == uid
    assert parse_tsuid_hex(text.lower()) == uid


def test_tsuid_of_all_ones_matches_doc() -> None:
    # opentsdb-uids-and-tsuids.rst: metric, tagk, tagv all UID 1 -> 000001000001000001
    tsuid = tsuid_from_parts(LAYOUT, u(1), [(u(1), u(1))])
    assert tsuid_to_hex(tsuid) == "000001000001000001"


def test_tsuid_sorts_tags_and_round_trips_through_row_keys() -> None:
    tags = [(u(7), u(1)), (u(2), u(9))]
    tsuid = tsuid_from_parts(LAYOUT, u(3), tags)
    assert tsuid == u(3) + u(2) + u(9) + u(7) + u(1)
    for layout in (LAYOUT, SALTED):
        key = encode_row_key(layout, u(3), 1356998400, tags)
        assert tsuid_from_row_key(layout, key) == tsuid
        assert row_key_from_tsuid(layout, tsuid, 1356998400 + 59) == key
        assert row_key_from_tsuid(layout, tsuid, (1356998400 + 59) * 1000) == key
    assert split_tsuid(LAYOUT, tsuid) == (u(3), ((u(2), u(9)), (u(7), u(1))))


def test_parse_pads_odd_length() -> None:
    assert parse_tsuid_hex("1") == b"\x01"
    assert parse_tsuid_hex("10001") == b"\x01\x00\x01"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("00000G", id="not_hex"),
        pytest.param("٠٠", id="non_ascii"),
        pytest.param("00 001", id="space"),
    ],
)
def test_parse_refuses_bad_hex(text: str) -> None:
    with pytest.raises(CodecError):
        parse_tsuid_hex(text)


@pytest.mark.parametrize(
    ("tsuid", "message"),
    [
        pytest.param(u(1), "TSUID is too short, may be missing tags", id="metric_only"),
        pytest.param(
            u(1) + u(1) + b"\x00",
            "The TSUID appears to be malformed, improper tag width",
            id="partial_pair",
        ),
    ],
)
def test_split_refuses_malformed(tsuid: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        split_tsuid(LAYOUT, tsuid)


def test_tsuid_from_row_key_needs_tags() -> None:
    key = encode_row_key(LAYOUT, u(1), 0, [])
    with pytest.raises(CodecError):
        tsuid_from_row_key(LAYOUT, key)
