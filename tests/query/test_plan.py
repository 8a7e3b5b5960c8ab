"""Scan planning: windows, per-bucket ranges and the row-key regex (QueryUtil's)."""

from __future__ import annotations

import re

import pytest

from tsd.codec import KeyLayout, encode_row_key, scan_end_time_s
from tsd.errors import BadRequestError
from tsd.protocol.m_syntax import make_filter, parse_downsample
from tsd.query.plan import (
    ResolvedFilter,
    TagCondition,
    literal_names,
    parse_tsuids,
    plan_metric_scan,
    row_key_regex,
    scan_window_s,
    tag_conditions,
    tsuid_regex,
)
from tsd.query_spec import SubQuery

LAYOUT = KeyLayout()
METRIC = b"\x00\x00\x01"
HOST, DC, CPU = b"\x00\x00\x01", b"\x00\x00\x02", b"\x00\x00\x03"
T0 = 1356998400


def _key(layout: KeyLayout, tags: list[tuple[bytes, bytes]], base: int = T0) -> bytes:
    return encode_row_key(layout, METRIC, base, tags)


@pytest.mark.parametrize(
    ("start_ms", "end_ms", "downsample", "window"),
    [
        pytest.param(
            (T0 + 1800) * 1000, (T0 + 1800) * 1000 + 1, None, (T0, T0 + 3600), id="within_hour"
        ),
        pytest.param(T0 * 1000, (T0 + 3600) * 1000, None, (T0, T0 + 7200), id="end_on_boundary"),
        pytest.param(
            (T0 + 3599) * 1000,
            (T0 + 3660) * 1000,
            "1h-avg",
            (T0, T0 + 7200),
            id="downsample_widens_to_interval_then_hour",
        ),
        pytest.param(
            (T0 + 10) * 1000,
            (T0 + 86400) * 1000,
            "1d-sum",
            (T0, T0 + 2 * 86400),
            id="day_interval",
        ),
    ],
)
def test_scan_window_is_opentsdbs(
    start_ms: int, end_ms: int, downsample: str | None, window: tuple[int, int]
) -> None:
    spec = parse_downsample(downsample) if downsample else None
    assert scan_window_s(start_ms, end_ms, spec) == window


def test_scan_window_end_matches_the_codec() -> None:
    assert scan_window_s(T0 * 1000, (T0 + 5) * 1000, None)[1] == scan_end_time_s((T0 + 5) * 1000)


def _resolved(
    spec: str, tagk: bytes, uids: tuple[bytes, ...] | None = None, **kw: bool
) -> ResolvedFilter:
    tagk_name, _, rest = spec.partition("=")
    kind, _, expr = rest.partition("(")
    return ResolvedFilter(make_filter(kind, tagk_name, expr.rstrip(")"), **kw), tagk, uids)


def test_regex_matches_the_keys_opentsdbs_would() -> None:
    conditions = tag_conditions(
        [
            _resolved("host=literal_or(a|b)", HOST, (b"\x00\x00\x0a", b"\x00\x00\x0b")),
            _resolved("dc=wildcard(*)", DC),
        ],
        4096,
    )
    assert conditions == [
        TagCondition(HOST, (b"\x00\x00\x0a", b"\x00\x00\x0b")),
        TagCondition(DC, None),
    ]
    regex = re.compile(row_key_regex(LAYOUT, conditions, False), re.DOTALL)
    good = _key(LAYOUT, [(HOST, b"\x00\x00\x0a"), (DC, b"\x00\x00\x05"), (CPU, b"\x00\x00\x01")])
    wrong_value = _key(LAYOUT, [(HOST, b"\x00\x00\x0c"), (DC, b"\x00\x00\x05")])
    missing_key = _key(LAYOUT, [(HOST, b"\x00\x00\x0a")])
    assert regex.fullmatch(good)
    assert not regex.fullmatch(wrong_value)
    assert not regex.fullmatch(missing_key)
    explicit = re.compile(row_key_regex(LAYOUT, conditions, True), re.DOTALL)
    assert not explicit.fullmatch(good)  # CPU is not a filtered key
    assert explicit.fullmatch(_key(LAYOUT, [(HOST, b"\x00\x00\x0b"), (DC, b"\x00\x00\x05")]))


def test_regex_quotes_uid_bytes_that_are_regex_syntax() -> None:
    weird = b"*\\E"  # a tagv UID holding regex metacharacters and \E
    regex = re.compile(row_key_regex(LAYOUT, [TagCondition(HOST, (weird,))], False), re.DOTALL)
    assert regex.fullmatch(_key(LAYOUT, [(HOST, weird)]))
    assert not regex.fullmatch(_key(LAYOUT, [(HOST, b"aaa")]))


def test_literals_past_the_expansion_limit_stay_post_scan() -> None:
    conditions = tag_conditions(
        [
            _resolved("host=literal_or(a|b)", HOST, (b"\x00\x00\x0a", b"\x00\x00\x0b")),
            _resolved("dc=literal_or(x|y)", DC, (b"\x00\x00\x01", b"\x00\x00\x02")),
        ],
        3,
    )
    assert conditions[0].tagv_uids is not None
    assert conditions[1].tagv_uids is None  # 2 + 2 > 3: only the key is required


def test_two_literal_filters_on_one_key_are_anded() -> None:
    conditions = tag_conditions(
        [
            _resolved("host=literal_or(a|b)", HOST, (b"\x00\x00\x0a", b"\x00\x00\x0b")),
            _resolved("host=literal_or(b|c)", HOST, (b"\x00\x00\x0b", b"\x00\x00\x0c")),
        ],
        4096,
    )
    assert conditions == [TagCondition(HOST, (b"\x00\x00\x0b",))]


def test_not_key_is_not_in_the_regex_and_unresolved_literals_scan_nothing() -> None:
    assert tag_conditions([_resolved("host=not_key()", HOST)], 4096) == []
    plan = plan_metric_scan(
        LAYOUT,
        METRIC,
        [_resolved("host=literal_or(ghost)", HOST, ())],
        explicit_tags=False,
        start_s=T0,
        end_s=T0 + 3600,
        expansion_limit=4096,
    )
    assert plan.is_empty


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("host=literal_or(a|b)", frozenset({"a", "b"}), id="literal_or"),
        pytest.param("host=iliteral_or(a|b)", None, id="case_insensitive"),
        pytest.param("host=not_literal_or(a)", None, id="negated"),
        pytest.param("host=wildcard(a*)", None, id="wildcard"),
    ],
)
def test_which_literals_are_resolved(spec: str, expected: frozenset[str] | None) -> None:
    assert literal_names(_resolved(spec, HOST).filter, 4096) == expected


def test_salted_plan_has_one_scan_per_bucket_with_group_by_keys() -> None:
    layout = KeyLayout(salt_width=1, salt_buckets=3)
    plan = plan_metric_scan(
        layout,
        METRIC,
        [
            _resolved("dc=wildcard(*)", DC, group_by=True),
            _resolved("host=wildcard(*)", HOST, group_by=True),
        ],
        explicit_tags=False,
        start_s=T0,
        end_s=T0 + 3600,
        expansion_limit=4096,
    )
    assert [(s.start[0], s.stop[0]) for s in plan.scans] == [(0, 0), (1, 1), (2, 2)]
    assert plan.scans[1].start == b"\x01" + METRIC + T0.to_bytes(4, "big")
    assert plan.scans[1].stop == b"\x01" + METRIC + (T0 + 3600).to_bytes(4, "big")
    assert plan.group_by == (HOST, DC)
    assert plan.scans[0].row_filter is not None
    assert plan.scans[0].row_filter.matches(
        _key(layout, [(HOST, b"\x00\x00\x01"), (DC, b"\x00\x00\x02")])
    )


def test_tsuid_queries_must_share_a_metric() -> None:
    with pytest.raises(
        BadRequestError, match=r"did not share the same metric \[000001\] \[000002\]"
    ):
        parse_tsuids(LAYOUT, ["000001000001000001", "000002000001000001"])
    tsuids = parse_tsuids(LAYOUT, ["000001000001000001", "000001000001000002"])
    regex = re.compile(tsuid_regex(LAYOUT, tsuids), re.DOTALL)
    assert regex.fullmatch(_key(LAYOUT, [(HOST, b"\x00\x00\x02")]))
    assert not regex.fullmatch(_key(LAYOUT, [(HOST, b"\x00\x00\x03")]))
    assert SubQuery(aggregator="sum", tsuids=("000001000001000001",)).tsuids
