"""Row keys, salting and scan bounds.

Pins OpenTSDB 2.4.1 src/core/RowKey.java (prefixKeyWithSalt, getSaltBytes), the salted keys
expected by test/core/TestRowKey.java (salt width 1, 20 buckets), src/core/TsdbQuery.java
(getScanStartTimeSeconds, getScanEndTimeSeconds) and src/query/QueryUtil.java
(getMetricScanner). Unsalted golden keys from reference/opentsdb-hbase-schema.rst.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import pytest

from tsd.codec.rowkey import (
    KeyLayout,
    RowKeyParts,
    base_time_for,
    decode_row_key,
    encode_row_key,
    java_bytes_hash,
    make_series_key,
    salt_bucket,
    scan_bounds,
    scan_end_time_s,
    scan_start_time_s,
)
from tsd.config import StorageConfig
from tsd.errors import CodecError

SALTED = KeyLayout(salt_width=1, salt_buckets=20)
UNSALTED = KeyLayout()


def reference_java_hash(data: bytes) -> int:
    """Arrays.hashCode(byte[]) written out the long way, independently of the codec."""
    result = 1
    for signed in struct.unpack(f">{len(data)}b", data):
        result = result * 31 + signed
        result = (result + 2**31) % 2**32 - 2**31  # Java int overflow
    return result


def reference_bucket(data: bytes, buckets: int) -> int:
    remainder = int(math.fmod(reference_java_hash(data), buckets))  # Java % truncates
    return -remainder if remainder < 0 else remainder


def u(n: int) -> bytes:
    return n.to_bytes(3, "big")


def test_layout_from_storage_config() -> None:
    cfg = StorageConfig(metric_width=4, tagk_width=2, tagv_width=5, salt_width=1, salt_buckets=7)
    assert KeyLayout.from_storage_config(cfg) == KeyLayout(4, 2, 5, 1, 7)
    assert KeyLayout.from_storage_config(StorageConfig()) == KeyLayout()


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"metric_width": 0}, id="metric_width_0"),
        pytest.param({"tagv_width": 9}, id="tagv_width_9"),
        pytest.param({"salt_width": 9}, id="salt_width_9"),
        pytest.param({"salt_buckets": 0}, id="no_buckets"),
    ],
)
def test_layout_refuses_bad_widths(kwargs: dict[str, int]) -> None:
    with pytest.raises(CodecError):
        KeyLayout(**kwargs)


@pytest.mark.parametrize(
    ("timestamp_s", "base"),
    [
        pytest.param(0, 0, id="epoch"),
        pytest.param(1356998400, 1356998400, id="on_hour"),
        pytest.param(1356998400 + 3599, 1356998400, id="last_second"),
        pytest.param(1356998400 + 3600, 1357002000, id="next_hour"),
    ],
)
def test_base_time_for(timestamp_s: int, base: int) -> None:
    assert base_time_for(timestamp_s) == base


# reference/opentsdb-hbase-schema.rst example keys (ERRATA: the time is the hour-aligned
# seconds, 0x50E22700 = 1356998400).
SCHEMA_DOC_KEYS = [
    pytest.param(1, 1356998400, [(1, 1)], "00000150E22700000001000001", id="one_tag"),
    pytest.param(
        1,
        1356998400,
        [(2, 4), (1, 1)],
        "00000150E22700000001000001000002000004",
        id="two_tags_sorted",
    ),
    pytest.param(1, 1357002000, [(1, 3)], "00000150E23510000001000003", id="second_hour"),
    pytest.param(1, 1357005600, [(1, 2)], "00000150E24320000001000002", id="third_hour"),
]


@pytest.mark.parametrize(("metric", "base", "tags", "hex_key"), SCHEMA_DOC_KEYS)
def test_unsalted_row_keys_match_schema_doc(
    metric: int, base: int, tags: list[tuple[int, int]], hex_key: str
) -> None:
    pairs = [(u(k), u(v)) for k, v in tags]
    key = encode_row_key(UNSALTED, u(metric), base, pairs)
    assert key.hex().upper() == hex_key
    assert decode_row_key(UNSALTED, key) == RowKeyParts(b"", u(metric), base, tuple(sorted(pairs)))
    assert make_series_key(UNSALTED, u(metric), pairs).row_key(base) == key


# Expected salt bytes from test/core/TestRowKey.java (prefixKeyWith* tests): metric uid,
# concatenated tag bytes, expected first byte.
JAVA_SALTS = [
    pytest.param(u(1), u(1) + u(1), 0x08, id="metric1_tag1"),
    pytest.param(u(1), u(1) + u(2), 0x09, id="metric1_tagv2"),
    pytest.param(u(1), u(1) + u(1) + u(2) + u(3), 0x03, id="metric1_two_tags"),
    pytest.param(u(1), u(1) + u(1) + u(1) + u(1), 0x10, id="metric1_repeated_pair"),
    pytest.param(u(1), (u(1) + u(1)) * 3, 0x00, id="metric1_three_pairs"),
    pytest.param(u(1), b"", 0x0C, id="metric1_no_tags"),
    pytest.param(u(2), u(1) + u(1), 0x09, id="metric2"),
    pytest.param(u(3), u(1) + u(1), 0x06, id="metric3"),
    pytest.param(bytes([0x0B, 0x14, 0x20]), u(1) + u(1), 0x06, id="metric_0b1420"),
]


@pytest.mark.parametrize(("metric_uid", "tag_bytes", "salt"), JAVA_SALTS)
def test_salt_bucket_matches_opentsdb(metric_uid: bytes, tag_bytes: bytes, salt: int) -> None:
    assert salt_bucket(SALTED, metric_uid, tag_bytes) == salt
    assert salt == reference_bucket(metric_uid + tag_bytes, 20)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\x00\x01", id="small"),
        pytest.param(b"\xff" * 16, id="all_negative_bytes"),
        pytest.param(bytes(range(256)), id="every_byte_wraps_often"),
        pytest.param(b"\x80\x7f" * 40, id="alternating_extremes"),
    ],
)
def test_java_bytes_hash_matches_reference(data: bytes) -> None:
    assert java_bytes_hash(data) == reference_java_hash(data)


@pytest.mark.parametrize(
    ("metric", "tags", "buckets"),
    [
        pytest.param(u(1), [(u(1), u(1))], 20, id="small_uids"),
        pytest.param(b"\xff\xfe\xfd", [(b"\x80\x00\x01", b"\xff\xff\xff")], 20, id="high_bytes"),
        pytest.param(b"\x12\x34\x56", [(u(7), u(9)), (u(3), u(200))], 7, id="seven_buckets"),
        pytest.param(b"\xa0\x00\x00", [(u(i), u(255 - i)) for i in range(8)], 256, id="max_tags"),
    ],
)
def test_salted_key_uses_java_hash_of_metric_and_sorted_tags(
    metric: bytes, tags: list[tuple[bytes, bytes]], buckets: int
) -> None:
    layout = KeyLayout(salt_width=1, salt_buckets=buckets)
    key = encode_row_key(layout, metric, 1356998400, tags)
    tag_bytes = b"".join(k + v for k, v in sorted(tags))
    assert key[0] == reference_bucket(metric + tag_bytes, buckets)
    assert key[1:] == metric + struct.pack(">I", 1356998400) + tag_bytes
    parts = decode_row_key(layout, key)
    assert parts.salt == key[:1]
    assert parts.metric_uid == metric
    assert parts.tags == tuple(sorted(tags))


def test_wide_salt_is_big_endian_bucket() -> None:
    layout = KeyLayout(salt_width=3, salt_buckets=1000)
    metric, tags = u(5), [(u(1), u(2))]
    bucket = reference_bucket(metric + u(1) + u(2), 1000)
    key = encode_row_key(layout, metric, 0, tags)
    assert key[:3] == bucket.to_bytes(3, "big")


def test_global_annotation_row_is_never_salted() -> None:
    key = encode_row_key(SALTED, b"\x00\x00\x00", 1356998400, [])
    assert key.hex().upper() == "0000000050E22700"
    assert make_series_key(SALTED, b"\x00\x00\x00", []).row_key(1356998400) == key


def test_base_time_keeps_low_32_bits_like_java_int_cast() -> None:
    key = encode_row_key(UNSALTED, u(1), 2**32 + 3600, [(u(1), u(1))])
    assert key[3:7] == struct.pack(">I", 3600)


@pytest.mark.parametrize(
    ("metric", "tags"),
    [
        pytest.param(b"\x00\x01", [(u(1), u(1))], id="short_metric"),
        pytest.param(u(1), [(b"\x01", u(1))], id="short_tagk"),
        pytest.param(u(1), [(u(1), u(1) + b"\x00")], id="long_tagv"),
        pytest.param(u(1), [(u(1), u(1)), (u(1), u(2))], id="duplicate_tagk"),
    ],
)
def test_encode_row_key_refuses_bad_uids(metric: bytes, tags: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(CodecError):
        encode_row_key(UNSALTED, metric, 0, tags)


@pytest.mark.parametrize(
    "hex_key",
    [
        pytest.param("00000150E227", id="too_short"),
        pytest.param("00000150E2270000000100", id="partial_tag_pair"),
    ],
)
def test_decode_row_key_refuses_bad_lengths(hex_key: str) -> None:
    with pytest.raises(CodecError):
        decode_row_key(UNSALTED, bytes.fromhex(hex_key))


def test_series_key_template_matches_encode_row_key() -> None:
    tags = [(u(9), u(1)), (u(2), u(3))]
    series = make_series_key(SALTED, u(4), tags)
    for base in (0, 1356998400, 1356998400, 1357002000, 1356998400):
        assert series.row_key(base) == encode_row_key(SALTED, u(4), base, tags)
    assert series.tsuid == u(4) + u(2) + u(3) + u(9) + u(1)
    assert series == make_series_key(SALTED, u(4), list(reversed(tags)))
    assert len({series, make_series_key(SALTED, u(4), tags)}) == 1


# --- Scan bounds ---------------------------------------------------------------------------

H = 1356998400  # 2013-01-01T00:00:00Z, on an hour boundary


@pytest.mark.parametrize(
    ("start", "interval_ms", "expected"),
    [
        pytest.param(H, 0, H, id="on_hour"),
        pytest.param(H + 1799, 0, H, id="mid_hour"),
        pytest.param((H + 1799) * 1000 + 5, 0, H, id="ms_start"),
        pytest.param(H + 60, 3_600_000, H, id="downsample_1h"),
        pytest.param(H + 3600 + 30, 7_200_000, H, id="downsample_2h_aligns_back_an_hour"),
        pytest.param(10, 0, 0, id="never_negative"),
    ],
)
def test_scan_start_time(start: int, interval_ms: int, expected: int) -> None:
    assert scan_start_time_s(start, interval_ms) == expected


@pytest.mark.parametrize(
    ("end", "interval_ms", "expected"),
    [
        pytest.param(H, 0, H + 3600, id="on_hour_goes_to_next_hour"),
        pytest.param(H + 1, 0, H + 3600, id="inside_hour"),
        pytest.param(H + 3599, 0, H + 3600, id="last_second"),
        pytest.param((H + 3599) * 1000, 0, H + 7200, id="ms_end_bumped_one_second"),
        pytest.param(H + 60, 60_000, H + 3600, id="downsample_1m"),
        pytest.param(H + 3540, 60_000, H + 3600, id="downsample_lands_on_hour"),
        pytest.param(H + 3600, 3_600_000, H + 7200, id="downsample_1h_on_hour"),
    ],
)
def test_scan_end_time(end: int, interval_ms: int, expected: int) -> None:
    assert scan_end_time_s(end, interval_ms) == expected


def test_scan_bounds_unsalted() -> None:
    start, stop = scan_bounds(UNSALTED, u(1), H + 10, H + 3600 + 10)
    assert start.hex().upper() == "00000150E22700"
    assert stop.hex().upper() == "00000150E24320"
    rows_in = [encode_row_key(UNSALTED, u(1), H + 3600 * i, [(u(1), u(1))]) for i in range(2)]
    assert all(start <= row < stop for row in rows_in)
    after = encode_row_key(UNSALTED, u(1), H + 7200, [(u(1), u(1))])
    assert not after < stop


def test_scan_bounds_open_end_and_salt() -> None:
    start, stop = scan_bounds(SALTED, u(1), H, None, bucket=8)
    assert start.hex().upper() == "0800000150E22700"
    assert stop.hex().upper() == "08000001FFFFFFFF"
    with pytest.raises(CodecError):
        scan_bounds(SALTED, u(1), H, None)
    with pytest.raises(CodecError):
        scan_bounds(SALTED, u(1), H, None, bucket=20)


@dataclass
class _OtherConfig:
    metric_width: int = 3
    tagk_width: int = 3
    tagv_width: int = 3
    salt_width: int = 2
    salt_buckets: int = 4


def test_layout_from_any_object_with_the_names() -> None:
    assert KeyLayout.from_storage_config(_OtherConfig()).salt_width == 2


def test_series_keys_of_one_hour_share_its_base_time_object() -> None:
    """A series keeps its last row's base time: one int object per hour for every series,
    not one each (the compiled encoders hand each series an int of its own)."""
    layout = KeyLayout()
    keys = [
        make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
        for i in range(3)
    ]
    base = 1_356_998_400
    rows = [key.row_key(int(str(base))) for key in keys]  # a distinct int object each
    assert rows[2] == bytes.fromhex("000001") + base.to_bytes(4, "big") + bytes.fromhex(
        "000001000002"
    )
    assert len({id(key._last_base) for key in keys}) == 1
    assert [key.row_key(base) for key in keys] == rows


def test_a_series_key_hands_out_its_own_tsuid_object() -> None:
    """The TSUID is kept whole in the template (the metric UID and the tag suffix): meta
    tracking's set of series written keeps that object, not a copy per series."""
    series = make_series_key(SALTED, u(4), [(u(9), u(1))])
    assert series.tsuid is series.tsuid
    assert series.tsuid == u(4) + u(9) + u(1)
    assert series.row_key(H) == encode_row_key(SALTED, u(4), H, [(u(9), u(1))])
