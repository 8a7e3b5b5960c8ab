"""Tag value filters (src/query/filter/TagV*Filter.java match) and group-by (TsdbQuery
GroupByAndAggregateCB, SpanGroup.computeTags)."""

from __future__ import annotations

import pytest

from tsd.codec import KeyLayout
from tsd.errors import BadRequestError
from tsd.protocol.m_syntax import filter_from_tag_value, make_filter
from tsd.query.filters import FILTER_DESCRIPTIONS, SeriesFilter
from tsd.query.group import group_series, group_tags
from tsd.query.limits import QueryControl, QueryLimits
from tsd.query.plan import group_key
from tsd.query_spec import FILTER_TYPES, Filter


def f(type_name: str, expression: str, tagk: str = "host", group_by: bool = False) -> Filter:
    return make_filter(type_name, tagk, expression, group_by)


MATCHES = [
    # TagVLiteralOrFilter: exact, case-sensitive; the i* form lower-cases both sides.
    pytest.param(f("literal_or", "web01|web02"), "web02", True, id="literal_or_hit"),
    pytest.param(f("literal_or", "web01|web02"), "WEB02", False, id="literal_or_case"),
    pytest.param(f("literal_or", "web01|web02"), "web0", False, id="literal_or_no_prefix"),
    pytest.param(f("iliteral_or", "Web01|web02"), "WEB01", True, id="iliteral_or"),
    pytest.param(f("not_literal_or", "web01"), "web02", True, id="not_literal_or_hit"),
    pytest.param(f("not_literal_or", "web01"), "web01", False, id="not_literal_or_miss"),
    pytest.param(f("not_iliteral_or", "WEB01"), "web01", False, id="not_iliteral_or"),
    # TagVWildcardFilter.match.
    pytest.param(f("wildcard", "*"), "anything", True, id="wildcard_star"),
    pytest.param(f("wildcard", "web*"), "web01", True, id="wildcard_prefix"),
    pytest.param(f("wildcard", "web*"), "xweb01", False, id="wildcard_prefix_anchored"),
    pytest.param(f("wildcard", "*.net"), "a.tsdb.net", True, id="wildcard_suffix"),
    pytest.param(f("wildcard", "*.net"), "a.net.x", False, id="wildcard_suffix_anchored"),
    pytest.param(f("wildcard", "*tsdb*"), "a.tsdb.net", True, id="wildcard_infix"),
    pytest.param(f("wildcard", "web*"), "WEB01", False, id="wildcard_case_sensitive"),
    pytest.param(f("iwildcard", "WEB*"), "web01", True, id="iwildcard"),
    # Without a leading or trailing * nothing is anchored ...
    pytest.param(f("wildcard", "a*b"), "xaxbx", True, id="wildcard_infix_unanchored"),
    # ... and the search position advances by the component's length, so a character can
    # serve two components: "ab*b" matches "xab".
    pytest.param(f("wildcard", "ab*b"), "xab", True, id="wildcard_reuses_characters"),
    pytest.param(f("wildcard", "ab*b"), "xa", False, id="wildcard_needs_components"),
    # TagVRegexFilter: Matcher.find, unanchored.
    pytest.param(f("regexp", "eb0[12]"), "web01", True, id="regexp_find"),
    pytest.param(f("regexp", "^eb"), "web01", False, id="regexp_anchor"),
]


@pytest.mark.parametrize(("flt", "value", "expected"), MATCHES)
def test_filter_matches_tag_value(flt: Filter, value: str, expected: bool) -> None:
    assert SeriesFilter([flt]).matches({"host": value, "dc": "lga"}) is expected


@pytest.mark.parametrize("type_name", [t for t in FILTER_TYPES if t != "not_key"])
def test_every_filter_requires_the_tag_key(type_name: str) -> None:
    # The scan's row-key regex always asks for the key, even for not_literal_or.
    expression = "*" if "wildcard" in type_name else "x"
    flt = f(type_name, expression)
    assert SeriesFilter([flt]).matches({"dc": "lga"}) is False


def test_not_key_matches_series_without_the_key() -> None:
    flt = f("not_key", "")
    assert SeriesFilter([flt]).matches({"dc": "lga"}) is True
    assert SeriesFilter([flt]).matches({"dc": "lga", "host": "web01"}) is False


def test_filters_are_anded() -> None:
    filters = [f("wildcard", "web*"), f("literal_or", "lga", tagk="dc")]
    assert SeriesFilter(filters).matches({"host": "web01", "dc": "lga"})
    assert not SeriesFilter(filters).matches({"host": "web01", "dc": "sjc"})


def test_explicit_tags_require_exactly_the_filtered_keys() -> None:
    filters = [f("wildcard", "*")]
    assert SeriesFilter(filters, True).matches({"host": "a"})
    assert not SeriesFilter(filters, True).matches({"host": "a", "dc": "lga"})
    assert SeriesFilter(filters, False).matches({"host": "a", "dc": "lga"})


def test_bare_star_value_is_a_case_insensitive_wildcard() -> None:
    # TagVFilter.getFilter: a bare value with * becomes TagVWildcardFilter(.., true).
    flt = filter_from_tag_value("host", "WEB*", group_by=True)
    assert (flt.type, flt.ignore_case, flt.group_by) == ("wildcard", True, True)
    assert SeriesFilter([flt]).matches({"host": "web01"})


def test_series_filter_mask_over_many_series() -> None:
    sf = SeriesFilter([f("regexp", "^web")])
    tags = [{"host": f"web{i}"} if i % 2 else {"host": f"db{i}"} for i in range(10)]
    assert sf.mask(tags).tolist() == [bool(i % 2) for i in range(10)]


def test_every_registered_filter_is_described() -> None:
    # /api/config/filters lists every type with a description and examples.
    assert set(FILTER_DESCRIPTIONS) == set(FILTER_TYPES)
    assert "not_key" in FILTER_DESCRIPTIONS
    for meta in FILTER_DESCRIPTIONS.values():
        assert set(meta) == {"description", "examples"}
        assert meta["description"]
        assert meta["examples"]


# ------------------------------------------------------------------ group-by


def test_series_without_a_group_by_key_are_dropped() -> None:
    # tag key UID 01 (host), 02 (dc); the group key is the value UIDs of the group-by keys
    layout = KeyLayout()
    series = ({b"\x01": b"\x0b"}, {b"\x02": b"\x0c"}, {b"\x01": b"\x0a"})
    keys = [group_key(layout, t, [b"\x01"]) for t in series]
    assert keys == [b"\x0b", None, b"\x0a"]
    assert group_series(keys) == [(b"\x0a", [2]), (b"\x0b", [0])]


def test_groups_sort_by_key_and_keep_series_order() -> None:
    keys = [b"\x00\x02", b"\x00\x01", b"\x00\x02"]
    assert group_series(keys) == [(b"\x00\x01", [1]), (b"\x00\x02", [0, 2])]


def test_group_tags_and_aggregate_tags() -> None:
    # computeTags: a key with one value everywhere it appears stays a tag (even if only
    # some series have it); keys whose values differ become aggregateTags.
    tags, aggregated = group_tags(
        [{"host": "a", "dc": "lga", "rack": "r1"}, {"host": "b", "dc": "lga"}]
    )
    assert tags == {"dc": "lga", "rack": "r1"}
    assert aggregated == ["host"]


def test_group_tags_of_empty_group() -> None:
    assert group_tags([]) == ({}, [])


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
def test_catastrophic_regexp_is_stopped_with_a_bad_request() -> None:
    # (a|aa)+$ against a long run of a's and one other character backtracks exponentially;
    # the regexp filter gives up after REGEXP_TIMEOUT_S instead of running for hours.
    from tsd.errors import BadRequestError
    from tsd.query.filters import compile_value_matcher

    matcher = compile_value_matcher(make_filter("regexp", "host", "(a|aa)+$", False))
    assert matcher("aaaa")
    with pytest.raises(BadRequestError, match="regexp filter took longer"):
        matcher("a" * 60 + "-")


def test_regexp_budget_is_spent_across_values() -> None:
    control = QueryControl(QueryLimits(), regexp_budget_s=0.2)
    series = SeriesFilter([Filter("host", "regexp", "(a|aa)+$")], control=control)
    assert series.matches({"host": "aaa"})  # fast values spend almost nothing
    control.spend_regexp(0.19)  # as if many values had used the rest
    with pytest.raises(BadRequestError, match=r"took longer than 0.2s in all"):
        series.matches({"host": "a" * 60 + "-"})
