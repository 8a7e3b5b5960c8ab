"""/api/query requests: POST JSON as Jackson binds OpenTSDB's TSQuery/TSSubQuery, GET
query strings (QueryRpc.parseQuery), and TSQuery.validateAndSetQuery."""

from __future__ import annotations

import contextlib

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsd.errors import BadRequestError
from tsd.protocol.query_json import parse_output_options, parse_query_json, parse_query_params
from tsd.query_spec import (
    LONG_MAX,
    FillPolicy,
    Filter,
    OutputOptions,
    RateOptions,
    TSQuery,
)

NOW = 1_700_003_600_000


def post(body: object) -> TSQuery:
    return parse_query_json(orjson.dumps(body), now=NOW)


def test_grafana_legacy_body_with_filters() -> None:
    # clients.md G1: Grafana-only keys in the sub-query are ignored.
    q = parse_query_json(
        b'{"start":1700000000000,"queries":[{"refId":"A","datasource":{"type":"opentsdb"},'
        b'"metric":"sys.cpu.user","aggregator":"sum","downsampleAggregator":"avg",'
        b'"filters":[{"type":"wildcard","tagk":"host","filter":"*","groupBy":true},'
        b'{"type":"literal_or","tagk":"dc","filter":"lga|sjc","groupBy":false}],'
        b'"downsample":"1m-avg"}],"msResolution":false,"globalAnnotations":true}',
        now=NOW,
    )
    assert (q.start_ms, q.end_ms) == (1_700_000_000_000, NOW)
    assert q.global_annotations
    assert not q.ms_resolution
    (sub,) = q.queries
    assert (sub.metric, sub.aggregator, sub.index) == ("sys.cpu.user", "sum", 0)
    assert sub.filters == (
        Filter("host", "wildcard", "*", group_by=True),
        Filter("dc", "literal_or", "lga|sjc"),
    )
    assert sub.downsample_spec is not None
    assert (sub.downsample_spec.interval_ms, sub.downsample_spec.function) == (60_000, "avg")


def test_grafana_counter_rate_with_tags_and_calendar() -> None:
    # clients.md G2 plus useCalendar and a timezone.
    q = post({
        "start": 1700000000000, "end": 1700003600000, "timezone": "Europe/Paris",
        "useCalendar": "true", "showQuery": True, "msResolution": True,
        "queries": [{"metric": "net.bytes.in", "aggregator": "sum", "tags": {"host": "*",
                     "iface": "eth0"}, "isCounter": True, "counterMax": "65535",
                     "explicitTags": True, "rate": True,
                     "rateOptions": {"counter": True, "counterMax": 65535, "dropResets": False},
                     "downsample": "30s-max-zero"}],
    })  # fmt: skip
    (sub,) = q.queries
    assert sub.rate
    assert sub.explicit_tags
    assert sub.rate_options == RateOptions(counter=True, counter_max=65535)
    assert sub.filters == (
        Filter("host", "wildcard", "*", group_by=True, ignore_case=True),
        Filter("iface", "literal_or", "eth0", group_by=True),
    )
    spec = sub.downsample_spec
    assert spec is not None
    assert (spec.use_calendar, spec.timezone, spec.fill_policy) == (
        True, "Europe/Paris", FillPolicy.ZERO)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(True, True, id="bool"),
        pytest.param("true", True, id="string_true"),
        pytest.param("TRUE", True, id="string_upper"),
        pytest.param("false", False, id="string_false"),
        pytest.param(1, True, id="number"),
        pytest.param(None, False, id="null"),
    ],
)
def test_booleans_may_be_strings_or_numbers(value: object, expected: bool) -> None:
    q = post({"start": "1h-ago", "showTSUIDs": value, "queries": [{"aggregator": "sum",
              "metric": "m"}]})  # fmt: skip
    assert q.show_tsuids is expected


def test_start_and_end_may_be_numbers_or_strings() -> None:
    q = post({"start": 1700000000, "end": "1700000600", "queries": [{"aggregator": "sum",
              "metric": "m"}]})  # fmt: skip
    assert (q.start_ms, q.end_ms) == (1_700_000_000_000, 1_700_000_600_000)


def test_later_of_tags_and_filters_wins() -> None:
    # Jackson calls setTags/setFilters in document order; setTags replaces the filters.
    tags_last = post({"start": "1h-ago", "queries": [{"aggregator": "sum", "metric": "m",
        "filters": [{"type": "literal_or", "tagk": "dc", "filter": "a"}],
        "tags": {"host": "web01"}}]})  # fmt: skip
    filters_last = post({"start": "1h-ago", "queries": [{"aggregator": "sum", "metric": "m",
        "tags": {"host": "web01"},
        "filters": [{"type": "literal_or", "tagk": "dc", "filter": "a"}]}]})  # fmt: skip
    assert [f.tagk for f in tags_last.queries[0].filters] == ["host"]
    assert [f.tagk for f in filters_last.queries[0].filters] == ["dc"]


def test_rate_options_accept_floats_and_clamp_beyond_long() -> None:
    # Grafana sends 2^64 for 64-bit counters, as a JSON number.
    q = parse_query_json(
        b'{"start":"1h-ago","queries":[{"aggregator":"sum","metric":"m","rate":true,'
        b'"rateOptions":{"counter":true,"counterMax":18446744073709552000,"resetValue":45.0,'
        b'"dropResets":"true"}}]}',
        now=NOW,
    )
    assert q.queries[0].rate_options == RateOptions(True, LONG_MAX, 45, True)


def test_filter_group_by_also_spelled_with_underscore() -> None:
    q = post({"start": "1h-ago", "queries": [{"aggregator": "sum", "metric": "m", "filters": [
        {"type": "regexp", "tagk": "host", "filter": "web.*", "group_by": True}]}]})  # fmt: skip
    assert q.queries[0].filters == (Filter("host", "regexp", "web.*", True),)


def test_duplicate_subqueries_are_collapsed_and_indexed() -> None:
    sub = {"aggregator": "sum", "metric": "m"}
    q = post({"start": "1h-ago", "queries": [sub, {"aggregator": "avg", "metric": "m"}, sub]})
    assert [(s.aggregator, s.index) for s in q.queries] == [("sum", 0), ("avg", 1)]


def test_tsuids_subquery() -> None:
    q = post({"start": "1h-ago", "queries": [{"aggregator": "sum",
              "tsuids": ["000001000001000001"]}]})  # fmt: skip
    assert q.queries[0].tsuids == ("000001000001000001",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"queries": [{"aggregator": "sum", "metric": "m"}]}, "Missing start time",
                     id="no_start"),
        pytest.param({"start": "1h-ago"}, "Missing queries", id="no_queries"),
        pytest.param({"start": "1h-ago", "queries": []}, "Missing queries", id="empty_queries"),
        pytest.param({"start": 1700003600, "end": 1700000000, "queries": [{"aggregator": "sum",
                      "metric": "m"}]}, "End time [1700000000000] must be greater than the "
                     "start time [1700003600000]", id="end_before_start"),
        pytest.param({"start": "1h-ago", "queries": [{"metric": "m"}]},
                     "Missing the aggregation function", id="no_aggregator"),
        pytest.param({"start": "1h-ago", "queries": [{"aggregator": "Sum", "metric": "m"}]},
                     "No such aggregation function: Sum", id="unknown_aggregator"),
        pytest.param({"start": "1h-ago", "queries": [{"aggregator": "sum"}]},
                     "Missing the metric or tsuids, provide at least one", id="no_metric"),
        pytest.param({"start": "1h-ago", "queries": [{"aggregator": "sum", "metric": "m",
                      "downsample": "1m-bogus"}]}, "No such downsampling function: bogus",
                     id="bad_downsample"),
        pytest.param({"start": "1h-ago", "timezone": "Nowhere/Land", "queries": [{
                      "aggregator": "sum", "metric": "m", "downsample": "1m-avg"}]},
                     "The timezone specification could not be found", id="bad_timezone"),
        pytest.param({"start": "2013/01/01", "timezone": "Nowhere/Land", "queries": [{
                      "aggregator": "sum", "metric": "m"}]},
                     "Invalid timezone name: Nowhere/Land", id="bad_timezone_absolute_date"),
    ],
)  # fmt: skip
def test_validation_errors(body: object, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        post(body)
    assert err.value.message == message
    assert err.value.status == 400
    assert err.value.details.startswith("TSQuery(")


@pytest.mark.parametrize(
    ("body", "details"),
    [
        pytest.param(b"{", "", id="truncated"),
        pytest.param(b"[1]", "", id="array"),
        pytest.param(b'{"start":"1h-ago","queries":{"a":1}}', "", id="queries_not_a_list"),
        pytest.param(b'{"start":"1h-ago","queries":[{"aggregator":"sum","metric":"m",'
                     b'"filters":[{"type":"nope","tagk":"h","filter":"x"}]}]}',
                     "Could not find a tag value filter of the type: nope", id="bad_filter"),
        pytest.param(b'{"start":"1h-ago","queries":[{"aggregator":"sum","metric":"m",'
                     b'"filters":[{"type":"literal_or","filter":"x"}]}]}',
                     "The tagk cannot be null or empty", id="filter_without_tagk"),
        pytest.param(b'{"start":"1h-ago","showQuery":"yes","queries":[]}', "", id="bad_bool"),
    ],
)  # fmt: skip
def test_unparseable_bodies(body: bytes, details: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_query_json(body, now=NOW)
    assert err.value.message == "Unable to parse the given JSON"
    if details:
        assert err.value.details == details


def test_empty_body() -> None:
    with pytest.raises(BadRequestError) as err:
        parse_query_json(b"  ", now=NOW)
    assert err.value.message == "Missing message content"


# ------------------------------------------------------------------ GET


def test_get_parameters() -> None:
    q = parse_query_params(
        {"start": ["1h-ago"], "end": ["now"], "m": ["sum:1m-avg:sys.cpu{host=*}",
         "sum:1m-avg:sys.cpu{host=*}"], "tsuid": ["avg:000001000001000001"], "ms": [""],
         "show_tsuids": [""], "show_query": [""], "show_stats": [""], "show_summary": [""],
         "no_annotations": [""], "global_annotations": [""], "padding": [""]},
        now=NOW,
    )  # fmt: skip
    assert (q.start_ms, q.end_ms) == (NOW - 3_600_000, NOW)
    assert q.ms_resolution
    assert q.show_tsuids
    assert q.show_query
    assert q.show_stats
    assert q.show_summary
    assert q.no_annotations
    assert q.global_annotations
    assert q.padding
    # tsuid= sub-queries come first; the duplicate m= is collapsed.
    assert [(s.aggregator, s.tsuids, s.metric, s.index) for s in q.queries] == [
        ("avg", ("000001000001000001",), "", 0),
        ("sum", (), "sys.cpu", 1),
    ]


def test_get_accepts_a_multidict_with_repeated_m() -> None:
    from multidict import MultiDict, MultiDictProxy

    params = MultiDictProxy(MultiDict([("start", "1h-ago"), ("m", "sum:a"), ("m", "avg:b"),
                                       ("arrays", "true")]))  # fmt: skip
    assert [s.metric for s in parse_query_params(params, now=NOW).queries] == ["a", "b"]
    assert parse_output_options(params).arrays


def test_get_requires_start_and_a_subquery() -> None:
    with pytest.raises(BadRequestError, match="Missing parameter <code>start</code>"):
        parse_query_params({"m": ["sum:m"]}, now=NOW)
    with pytest.raises(BadRequestError, match="Missing sub queries"):
        parse_query_params({"start": ["1h-ago"]}, now=NOW)


def test_get_uses_the_last_value_of_start() -> None:
    q = parse_query_params({"start": ["2h-ago", "1h-ago"], "m": ["sum:m"]}, now=NOW)
    assert q.start_ms == NOW - 3_600_000


def test_output_options() -> None:
    assert parse_output_options({"arrays": ["true"], "jsonp": ["a", "cb"]}) == OutputOptions(
        arrays=True
    )
    assert parse_output_options({}) == OutputOptions()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["start", "end", "queries", "aggregator", "metric", "filters", "tags",
                         "rate", "rateOptions", "downsample", "type", "tagk", "filter",
                         "counterMax", "timezone", "useCalendar", "tsuids"]),
        inner, max_size=5),
    max_leaves=12,
)  # fmt: skip


@given(json_values)
def test_any_json_parses_or_raises_bad_request(document: object) -> None:
    with contextlib.suppress(BadRequestError):
        parse_query_json(orjson.dumps(document), now=NOW)


def test_a_dashboard_query_is_parsed_once_and_its_times_each_time() -> None:
    # The sub-query of a short m= is kept (one object, validated once); the times are
    # read again for each request, the relative ones against that request's clock.
    from tsd.protocol import query_json

    params = {"start": ["1h-ago"], "m": ["sum:1m-avg:cached.metric{host=a|b}"]}
    first = parse_query_params(params, now=10_000_000)
    again = parse_query_params(params, now=20_000_000)
    assert again.queries[0] is first.queries[0]
    assert first.queries[0].downsample_spec is not None
    assert (first.start_ms, first.end_ms) == (10_000_000 - 3_600_000, 10_000_000)
    assert (again.start_ms, again.end_ms) == (20_000_000 - 3_600_000, 20_000_000)
    # a bad m= is refused each time (errors are not kept)
    for _ in range(2):
        with pytest.raises(BadRequestError, match="No such aggregation function"):
            parse_query_params({"start": ["1h-ago"], "m": ["nope:cached.metric"]})
    # a long one (thousands of literals) is parsed each time, never kept
    kept = query_json._cached_m.cache_info().currsize
    literals = "|".join(f"h{i:05d}" for i in range(300))
    long_m = {"start": ["1h-ago"], "m": [f"sum:cached.metric{{host={literals}}}"]}
    assert parse_query_params(long_m).queries[0] is not parse_query_params(long_m).queries[0]
    assert query_json._cached_m.cache_info().currsize == kept
