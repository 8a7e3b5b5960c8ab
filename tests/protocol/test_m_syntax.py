"""The m= / tsuid= URL grammar (QueryRpc.parseMTypeSubQuery, parseTsuidTypeSubQuery,
parseRateOptions; Tags.parseWithMetricAndFilters; TagVFilter.getFilter;
DownsamplingSpecification)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsd.errors import BadRequestError
from tsd.protocol.m_syntax import (
    make_filter,
    parse_downsample,
    parse_m_subquery,
    parse_metric_and_filters,
    parse_rate_options,
    parse_tsuid_subquery,
)
from tsd.query_spec import LONG_MAX, DownsampleSpec, FillPolicy, Filter, RateOptions, SubQuery


def test_full_m_syntax() -> None:
    sub = parse_m_subquery(
        "sum:1h-avg-nan:rate{counter,1000,10}:explicit_tags:sys.cpu{host=web*}{dc=lga|sjc}"
    )
    assert sub == SubQuery(
        aggregator="sum",
        metric="sys.cpu",
        downsample="1h-avg-nan",
        rate=True,
        rate_options=RateOptions(counter=True, counter_max=1000, reset_value=10),
        filters=(
            Filter("dc", "literal_or", "lga|sjc", group_by=False),
            Filter("host", "wildcard", "web*", group_by=True, ignore_case=True),
        ),
        explicit_tags=True,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("sum:m", SubQuery("sum", metric="m"), id="minimal"),
        pytest.param("sum:rate:m", SubQuery("sum", metric="m", rate=True), id="rate_no_options"),
        # Anything starting with "rate" is a rate; options only with a brace.
        pytest.param("sum:RATEX:m", SubQuery("sum", metric="m", rate=True), id="rate_prefix"),
        pytest.param("avg:10m-sum:m", SubQuery("avg", metric="m", downsample="10m-sum"),
                     id="downsample"),
        # Unrecognised middle parts are ignored.
        pytest.param("sum:all-sum:m", SubQuery("sum", metric="m"), id="unknown_part_ignored"),
        pytest.param("sum:pre-agg:rollup_raw:m",
                     SubQuery("sum", metric="m", pre_aggregate=True, rollup_usage="ROLLUP_RAW"),
                     id="rollup_parts"),
        pytest.param("sum:Rollup_Fallback:m",
                     SubQuery("sum", metric="m", rollup_usage="ROLLUP_FALLBACK"),
                     id="rollup_usage_any_case"),
        pytest.param("sum:rollup_nonsense:m",
                     SubQuery("sum", metric="m", rollup_usage="ROLLUP_NOFALLBACK"),
                     id="rollup_usage_unknown_is_nofallback"),
        pytest.param("sum:percentiles[99, 95.5]:show-histogram-buckets:m",
                     SubQuery("sum", metric="m", percentiles=(99.0, 95.5),
                              show_histogram_buckets=True),
                     id="percentiles_and_buckets"),
        pytest.param("sum:m{}", SubQuery("sum", metric="m"), id="empty_braces"),
        pytest.param("sum:m{}{host=a}", SubQuery("sum", metric="m", filters=(
            Filter("host", "literal_or", "a"),)), id="only_non_group_by"),
        pytest.param("sum:m{host=*}", SubQuery("sum", metric="m", filters=(
            Filter("host", "wildcard", "*", True, True),)), id="star_group_by"),
        pytest.param("sum:m{host=regexp(web[0-9]+)}", SubQuery("sum", metric="m", filters=(
            Filter("host", "regexp", "web[0-9]+", True),)), id="filter_function"),
        pytest.param("sum:m{host=ILITERAL_OR(a|b)}", SubQuery("sum", metric="m", filters=(
            Filter("host", "iliteral_or", "a|b", True, True),)), id="function_name_any_case"),
        pytest.param("sum:m{host=not_key()}", SubQuery("sum", metric="m", filters=(
            Filter("host", "not_key", "", True),)), id="not_key"),
        # The same filter in both braces: kept once, now group-by (mapToFilters).
        pytest.param("sum:m{host=a}{host=a}", SubQuery("sum", metric="m", filters=(
            Filter("host", "literal_or", "a", True),)), id="duplicate_becomes_group_by"),
    ],
)  # fmt: skip
def test_parse_m_subquery(text: str, expected: SubQuery) -> None:
    assert parse_m_subquery(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "The query string was empty", id="empty"),
        pytest.param("sum", "Invalid parameter m=sum (not enough :-separated parts)",
                     id="not_enough_parts"),
        pytest.param("a:b:c:d:e:f", "Invalid parameter m=a:b:c:d:e:f (too many :-separated "
                     "parts)", id="too_many_parts"),
        pytest.param("sum:", "Metric cannot be null or empty", id="empty_metric"),
        pytest.param("sum:m{host=a", "Missing '}' at the end of: m{host=a", id="unclosed"),
        pytest.param("sum:m{host}", "When parsing tag 'host': invalid tag: host",
                     id="tag_without_value"),
        pytest.param("sum:m{host=}", "When parsing tag 'host=': invalid tag: host=",
                     id="empty_value"),
        pytest.param("sum:m{host=a=b}", "When parsing tag 'host=a=b': invalid tag: host=a=b",
                     id="two_equals"),
        pytest.param("sum:m{host=nope(x)}", "When parsing tag 'host=nope(x)': Could not find a "
                     "tag value filter of the type: nope", id="unknown_filter"),
        pytest.param("sum:m{host=regexp(x}", "When parsing tag 'host=regexp(x': Filter must end "
                     "with a ')': regexp(x", id="unclosed_function"),
        pytest.param("sum:m{}{host=wildcard(abc)}", "When parsing filter 'host=wildcard(abc)': "
                     "Filter must contain an asterisk", id="wildcard_without_star"),
        pytest.param("sum:m{host=literal_or(|)}", "When parsing tag 'host=literal_or(|)': "
                     "Filter must contain more than just a pipe", id="literal_only_pipe"),
        pytest.param("sum:m{host=not_key(x)}", "When parsing tag 'host=not_key(x)': The filter "
                     "must be empty for the not_key filter", id="not_key_with_value"),
        pytest.param("sum::m", "Invalid parameter m=sum::m (empty :-separated part)",
                     id="empty_middle_part"),
        pytest.param("sum:rate{:m", "Invalid rate options specification: rate{", id="bad_rate"),
    ],
)  # fmt: skip
def test_parse_m_subquery_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_m_subquery(text)
    assert err.value.message == message
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("rate", RateOptions(), id="plain"),
        pytest.param("rate{counter}", RateOptions(counter=True), id="counter"),
        pytest.param("rate{counter,100}", RateOptions(True, 100), id="counter_max"),
        pytest.param("rate{counter,,1000}", RateOptions(True, LONG_MAX, 1000), id="reset_only"),
        pytest.param("rate{dropcounter}", RateOptions(True, drop_resets=True), id="dropcounter"),
        pytest.param("rate{dropcounter,5,6}", RateOptions(True, 5, 6, True), id="drop_with_max"),
        pytest.param("rate{}", RateOptions(), id="empty_braces"),
        # Like OpenTSDB, the last character is assumed to be '}' and cut off.
        pytest.param("rate{counter", RateOptions(), id="missing_brace_eats_a_char"),
        pytest.param("rate{counter,-5}", RateOptions(True, -5), id="negative_max"),
    ],
)
def test_parse_rate_options(spec: str, expected: RateOptions) -> None:
    assert parse_rate_options(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("rate{a,b,c,d}", "Incorrect number of values in rate options "
                     "specification, must be counter[,counter max value,reset value], "
                     "recieved: 4 parts", id="too_many"),
        pytest.param("rate{counter,x}", "Max value of counter was not a number, received 'x'",
                     id="bad_max"),
        pytest.param("rate{counter,1,y}", "Reset value of counter was not a number, received "
                     "'y'", id="bad_reset"),
        pytest.param("rate{counter,99999999999999999999}", "Max value of counter was not a "
                     "number, received '99999999999999999999'", id="max_overflow"),
    ],
)  # fmt: skip
def test_parse_rate_options_errors(spec: str, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_rate_options(spec)
    assert err.value.message == message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1m-avg", DownsampleSpec("1m-avg", 60_000, "avg", calendar_amount=1,
                     calendar_unit="m"), id="simple"),
        pytest.param("1h-sum-zero", DownsampleSpec("1h-sum-zero", 3_600_000, "sum",
                     FillPolicy.ZERO, calendar_amount=1, calendar_unit="h"), id="fill"),
        pytest.param("1m-avg-NaN", DownsampleSpec("1m-avg-NaN", 60_000, "avg", FillPolicy.NAN,
                     calendar_amount=1, calendar_unit="m"), id="fill_any_case"),
        pytest.param("1dc-max", DownsampleSpec("1dc-max", 86_400_000, "max", use_calendar=True,
                     calendar_amount=1, calendar_unit="d"), id="calendar"),
        pytest.param("0all-sum", DownsampleSpec("0all-sum", 0, "sum", run_all=True),
                     id="all"),
        pytest.param("500ms-count", DownsampleSpec("500ms-count", 500, "count",
                     calendar_amount=500, calendar_unit="ms"), id="milliseconds"),
        # String.split drops trailing empty parts.
        pytest.param("1m-avg-", DownsampleSpec("1m-avg-", 60_000, "avg", calendar_amount=1,
                     calendar_unit="m"), id="trailing_dash"),
    ],
)  # fmt: skip
def test_parse_downsample(text: str, expected: DownsampleSpec) -> None:
    assert parse_downsample(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("1m", "Invalid downsampling specifier '1m': must provide at least "
                     "interval and function", id="no_function"),
        pytest.param("1m-avg-nan-x", "Invalid downsampling specifier '1m-avg-nan-x': must "
                     "consist of interval, function, and optional fill policy", id="too_long"),
        pytest.param("1m-foo", "No such downsampling function: foo", id="unknown_function"),
        pytest.param("1m-none", "cannot use the NONE aggregator for downsampling", id="none"),
        pytest.param("1m-avg-bogus", "Unrecognized fill policy: bogus", id="bad_fill"),
        pytest.param("1x-avg", "Invalid duration (suffix): 1x", id="bad_interval"),
        pytest.param("1m-undefined", "No such downsampling function: undefined",
                     id="grafana_undefined"),
    ],
)  # fmt: skip
def test_parse_downsample_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_downsample(text)
    assert err.value.message == message


def test_tsuid_subquery() -> None:
    sub = parse_tsuid_subquery("sum:1m-avg:rate:000001000001000001,000001000001000002")
    assert sub == SubQuery(
        "sum",
        tsuids=("000001000001000001", "000001000001000002"),
        downsample="1m-avg",
        rate=True,
    )


def test_tsuid_errors_use_opentsdb_wording() -> None:
    with pytest.raises(BadRequestError, match="The tsuid query string was empty"):
        parse_tsuid_subquery("")
    with pytest.raises(BadRequestError, match=r"Invalid parameter m=sum \(not enough"):
        parse_tsuid_subquery("sum")


def test_metric_with_group_by_and_filters_order() -> None:
    metric, filters = parse_metric_and_filters("m{a=1,b=*}{c=x*}")
    assert metric == "m"
    assert [(f.tagk, f.group_by) for f in filters] == [("c", False), ("a", True), ("b", True)]


def test_make_filter_type_is_case_sensitive_in_json() -> None:
    with pytest.raises(BadRequestError, match="Could not find a tag value filter of the type"):
        make_filter("Literal_Or", "host", "a")


@given(
    st.one_of(st.text(max_size=40), st.text(alphabet="sum:avg1mhc-{}()=,|*ratenxp_[]", max_size=40))
)
def test_any_m_value_parses_or_raises_bad_request(text: str) -> None:
    with contextlib.suppress(BadRequestError):
        parse_m_subquery(text)
