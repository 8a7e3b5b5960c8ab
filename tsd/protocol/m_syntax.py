"""The URL query grammar of /api/query: ``m=``, ``tsuid=``, rate options, downsample
specs and tag value filters. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §1.2 "m= syntax", §3.3,
§3.5; OpenTSDB src/tsd/QueryRpc.java ``parseMTypeSubQuery`` / ``parseTsuidTypeSubQuery`` /
``parseRateOptions``, src/core/Tags.java ``parseWithMetricAndFilters``,
src/core/DownsamplingSpecification.java, src/query/filter/TagVFilter.java)::

    m=<agg>:[<interval>[c]-<agg>[-<fill>]:][rate[{[drop]counter[,<max>[,<reset>]]}]:]
      [explicit_tags:]<metric>[{<group-by filters>}][{<other filters>}]

The string is split on *every* ``:`` into 2 to 5 parts; the first is the aggregator, the
last the metric with its filter braces, and each middle part is recognised by its prefix
(``rate``, a leading digit = downsample, ``explicit_tags``, and the rollup/histogram
options tsd ignores). Unrecognised middle parts are silently ignored, as in OpenTSDB.
Filters are ``tagk=value`` pairs split on ``,``: ``value`` is ``type(expr)``, a bare ``*``
(any value), a bare value with ``*`` (a case-insensitive wildcard) or literals joined by
``|``. The first brace is group-by, the second not. Messages are OpenTSDB's; where
OpenTSDB answers a malformed ``m=`` with a 500 (IllegalArgumentException escaping the
handler) tsd answers 400 with the same message.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

from tsd.errors import BadRequestError, PastLimit
from tsd.java_text import java_split
from tsd.protocol.timespec import parse_duration
from tsd.query_spec import (
    AGGREGATOR_INTERPOLATION,
    CALENDAR_UNITS,
    FILTER_TYPES,
    DownsampleSpec,
    FillPolicy,
    Filter,
    RateOptions,
    SubQuery,
    parse_rollup_usage,
    split_literals,
    wildcard_pattern,
)

_LONG_MAX = 2**63 - 1
_IGNORE_CASE_TYPES = frozenset({"iliteral_or", "not_iliteral_or", "iwildcard"})
_LITERAL_TYPES = frozenset({"literal_or", "iliteral_or", "not_literal_or", "not_iliteral_or"})
_CALENDAR_INTERVAL = re.compile(r"([0-9]+)(ms|[smhdwny])", re.IGNORECASE)

#: The longest ``regexp`` filter accepted (characters), checked before it is read (400).
#: A regexp of 100,000 alternatives took 2.4 s to compile with ``re`` and 15 s with
#: ``regex``; at this length the worst measured is about 20 ms, once (it is cached).
MAX_REGEXP_LENGTH = 4096
#: The largest ``regexp`` filter accepted once its counted repeats are expanded (each
#: literal, class or anchor counts 1, ``x{n}`` counts n times x): ``(?:a{3000}){3000}``
#: is 17 characters but takes the ``regex`` package 39 s to compile (400 past it)
MAX_REGEXP_SIZE = 10_000
#: The standard library's pattern parser (no public API gives the tree; sre_parse, its
#: old name, warns)
_sre_parser: Any = importlib.import_module("re._parser")
_REPEATS = frozenset({"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"})


def split_string(text: str, sep: str) -> list[str]:
    """``Tags.splitString``: split on every ``sep``, keeping empty parts."""
    return text.split(sep)


# --------------------------------------------------------------------------- rate


def parse_rate_options(spec: str) -> RateOptions:
    """``rate{[drop]counter[,max[,reset]]}`` -> RateOptions (QueryRpc.parseRateOptions).

    Like OpenTSDB, the text between ``rate{`` and the last character is used, so a
    missing ``}`` eats the last option character; empty fields keep the defaults.
    """
    if len(spec) == 4:
        return RateOptions()
    if len(spec) < 6:
        raise BadRequestError(f"Invalid rate options specification: {spec}")
    parts = split_string(spec[5:-1], ",")
    if len(parts) > 3:
        raise BadRequestError(
            "Incorrect number of values in rate options specification, must be "
            "counter[,counter max value,reset value], recieved: "
            f"{len(parts)} parts"
        )
    counter = parts[0].endswith("counter")
    counter_max = _LONG_MAX
    if len(parts) >= 2 and parts[1]:
        counter_max = _parse_rate_long(
            parts[1], f"Max value of counter was not a number, received '{parts[1]}'"
        )
    reset = 0
    if len(parts) >= 3 and parts[2]:
        reset = _parse_rate_long(
            parts[2], f"Reset value of counter was not a number, received '{parts[2]}'"
        )
    return RateOptions(counter, counter_max, reset, parts[0] == "dropcounter")


def _parse_rate_long(text: str, message: str) -> int:
    """Java ``Long.parseLong``: optional sign and decimal digits within 64 bits."""
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        raise BadRequestError(message)
    value = int(text)
    if not -(2**63) <= value <= _LONG_MAX:
        raise BadRequestError(message)
    return value


# --------------------------------------------------------------------------- downsample


def parse_downsample(spec: str) -> DownsampleSpec:
    """``DownsamplingSpecification(String)``: ``<interval>[c]-<agg>[-<fill>]``.

    ``<interval>`` containing ``all`` means one bucket for the whole query. Raises
    BadRequestError with OpenTSDB's messages.
    """
    parts = java_split(spec, "-")
    if len(parts) < 2:
        raise BadRequestError(
            f"Invalid downsampling specifier '{spec}': must provide at least interval and function"
        )
    if len(parts) > 3:
        raise BadRequestError(
            f"Invalid downsampling specifier '{spec}': must consist of interval, "
            "function, and optional fill policy"
        )
    interval_text = parts[0]
    run_all = "all" in interval_text
    use_calendar = False
    interval_ms = 0
    if not run_all:
        if interval_text.endswith("c"):
            interval_text = interval_text[:-1]
            use_calendar = True
        interval_ms = parse_duration(interval_text)
    function = parts[1]
    if function not in AGGREGATOR_INTERPOLATION:
        raise BadRequestError(f"No such downsampling function: {function}")
    if function == "none":
        raise BadRequestError("cannot use the NONE aggregator for downsampling")
    fill = FillPolicy.NONE
    if len(parts) == 3:
        fill = parse_fill_policy(parts[2])
    amount, unit = _calendar_parts(interval_text)
    return DownsampleSpec(
        spec=spec,
        interval_ms=interval_ms,
        function=function,
        fill_policy=fill,
        run_all=run_all,
        use_calendar=use_calendar,
        calendar_amount=amount,
        calendar_unit=unit,
    )


def parse_fill_policy(name: str) -> FillPolicy:
    """``FillPolicy.fromString``: case-insensitive policy name."""
    for policy in FillPolicy:
        if policy.value == name.lower():
            return policy
    raise BadRequestError(f"Unrecognized fill policy: {name}")


def _calendar_parts(interval_text: str) -> tuple[int, str]:
    """The ``<n>`` and unit the calendar downsampler reads from the interval string;
    ``(0, "")`` when it cannot (which only matters if calendar mode is switched on)."""
    match = _CALENDAR_INTERVAL.fullmatch(interval_text)
    if match is None:
        return 0, ""
    unit, amount = match.group(2).lower(), int(match.group(1))
    # Downsampler reads the amount with Integer.parseInt.
    if unit not in CALENDAR_UNITS or amount > 2**31 - 1:
        return 0, ""
    return amount, unit


# --------------------------------------------------------------------------- filters


def make_filter(type_name: str, tagk: str, expression: str, group_by: bool = False) -> Filter:
    """``TagVFilter.Builder.build``: a filter of a registered type, validated as the
    filter's constructor does. ``type_name`` is case-sensitive here."""
    if not type_name:
        raise BadRequestError("The filter type cannot be null or empty")
    if not tagk:
        raise BadRequestError("The tagk cannot be null or empty")
    if type_name not in FILTER_TYPES:
        raise BadRequestError(f"Could not find a tag value filter of the type: {type_name}")
    ignore_case = type_name in _IGNORE_CASE_TYPES
    if type_name == "not_key":
        if expression:
            raise BadRequestError("The filter must be empty for the not_key filter")
        return Filter(tagk, type_name, "", group_by)
    if not expression:
        raise BadRequestError("Filter cannot be null or empty")
    if type_name in _LITERAL_TYPES and expression == "|":
        raise BadRequestError("Filter must contain more than just a pipe")
    if type_name in ("wildcard", "iwildcard") and "*" not in expression:
        raise BadRequestError("Filter must contain an asterisk")
    if type_name == "regexp":
        check_regexp(expression)
    return Filter(tagk, type_name, expression, group_by, ignore_case)


def check_regexp(expression: str) -> None:
    """Refuse a ``regexp`` filter that does not compile (400 with the error, as OpenTSDB's
    PatternSyntaxException) or is past :data:`MAX_REGEXP_LENGTH` (before reading it) or
    :data:`MAX_REGEXP_SIZE` (PastLimit, 400). Each distinct expression is checked once."""
    if len(expression) > MAX_REGEXP_LENGTH:
        raise PastLimit(
            f"The regexp filter is too long: {len(expression)} characters, at most"
            f" {MAX_REGEXP_LENGTH}"
        )
    error = _regexp_error(expression)
    if error is not None:
        raise error


@functools.lru_cache(maxsize=256)
def _regexp_error(expression: str) -> BadRequestError | None:
    try:
        re.compile(expression)
        size = _expanded_size(_sre_parser.parse(expression))
    except re.error as exc:
        return BadRequestError(f"{exc}: {expression}")
    except (RecursionError, OverflowError):  # groups nested past the parser's stack
        return PastLimit(f"The regexp filter nests too deeply: {expression[:100]}")
    if size > MAX_REGEXP_SIZE:
        return PastLimit(
            f"The regexp filter is too large: its counted repeats expand it past"
            f" {MAX_REGEXP_SIZE} elements: {expression[:100]}"
        )
    return None


def _expanded_size(items: Any) -> int:
    """The elements of a parsed pattern with every counted repeat expanded (an open-ended
    one counts its minimum, at least once)."""
    total = 0
    for op, arg in items:
        name = str(op)
        if name in _REPEATS:
            low, high, sub = arg
            count = low if high == _sre_parser.MAXREPEAT else high
            total += max(count, 1) * _expanded_size(sub)
        elif name == "SUBPATTERN":
            total += _expanded_size(arg[3])
        elif name == "BRANCH":
            total += sum(_expanded_size(branch) for branch in arg[1])
        elif name in ("ASSERT", "ASSERT_NOT"):
            total += _expanded_size(arg[1])
        elif name == "ATOMIC_GROUP":
            total += _expanded_size(arg)
        elif name == "GROUPREF_EXISTS":
            total += sum(_expanded_size(sub) for sub in arg[1:] if sub is not None)
        else:
            total += 1
        if total > MAX_REGEXP_SIZE:  # enough to refuse: stop counting
            break
    return total


def filter_from_tag_value(tagk: str, value: str, group_by: bool) -> Filter:
    """One ``tagk=value`` of a URI brace or of the JSON ``tags`` map
    (TagVFilter.getFilter + mapToFilters)."""
    if not tagk:
        raise BadRequestError("Tagk cannot be null or empty")
    if not value:
        raise BadRequestError("Filter cannot be null or empty")
    paren = value.find("(")
    if value != "*" and paren > -1:
        if not value.endswith(")"):
            raise BadRequestError(f"Filter must end with a ')': {value}")
        return make_filter(value[:paren].lower(), tagk, value[paren + 1 : -1], group_by)
    if "*" in value:
        # OpenTSDB builds a case-insensitive wildcard here but reports it as "wildcard".
        return Filter(tagk, "wildcard", value, group_by, ignore_case=True)
    return make_filter("literal_or", tagk, value, group_by)


def filter_identity(f: Filter) -> tuple[object, ...]:
    """What OpenTSDB's ``TagVFilter.equals`` compares (never ``group_by``)."""
    if f.type in ("literal_or", "iliteral_or"):
        return ("literal", f.tagk, split_literals(f.filter, f.ignore_case), f.ignore_case)
    if f.type in ("not_literal_or", "not_iliteral_or"):
        return ("not_literal", f.tagk, split_literals(f.filter, f.ignore_case), f.ignore_case)
    if f.type in ("wildcard", "iwildcard"):
        return ("wildcard", f.tagk, wildcard_pattern(f.filter, f.ignore_case), f.ignore_case)
    if f.type == "regexp":
        return ("regexp", f.tagk, f.filter)
    # TagVNotKeyFilter.equals only ever matches itself.
    return ("not_key", f.tagk, id(f))


def add_group_by_filter(filters: list[Filter], new: Filter) -> None:
    """Append a group-by filter unless an equal one exists, which then becomes group-by
    (TagVFilter.mapToFilters with group_by=true)."""
    identity = filter_identity(new)
    for i, existing in enumerate(filters):
        if filter_identity(existing) == identity:
            filters[i] = Filter(
                existing.tagk, existing.type, existing.filter, True, existing.ignore_case
            )
            return
    filters.append(new)


def parse_metric_and_filters(text: str) -> tuple[str, list[Filter]]:
    """``metric[{group-by filters}][{other filters}]`` (Tags.parseWithMetricAndFilters).

    Non-group-by filters come first in the returned list, as in OpenTSDB.
    """
    if not text:
        raise BadRequestError("Metric cannot be null or empty")
    filters: list[Filter] = []
    curly = text.find("{")
    if curly < 0:
        return text, filters
    if not text.endswith("}"):
        raise BadRequestError(f"Missing '}}' at the end of: {text}")
    if curly == len(text) - 2:
        return text[:-2], filters
    close = text.find("}")
    if close != len(text) - 1:
        second = text.rfind("{")
        for item in split_string(text[second + 1 : -1], ","):
            if not item:
                break
            filters.append(_parse_tag_item(item, "filter", group_by=False))
    for item in split_string(text[curly + 1 : close], ","):
        if not item and close != len(text) - 1:
            break
        add_group_by_filter(filters, _parse_tag_item(item, "tag", group_by=True))
    return text[:curly], filters


def _parse_tag_item(item: str, what: str, group_by: bool) -> Filter:
    try:
        kv = split_string(item, "=")
        if len(kv) != 2 or not kv[0] or not kv[1]:
            raise BadRequestError(f"invalid tag: {item}")
        return filter_from_tag_value(kv[0], kv[1], group_by)
    except BadRequestError as exc:
        raise BadRequestError(f"When parsing {what} '{item}': {exc.message}") from None


# --------------------------------------------------------------------------- m= / tsuid=


def parse_m_subquery(text: str) -> SubQuery:
    """One ``m=`` value -> an unvalidated SubQuery (aggregator and downsample unchecked)."""
    if not text:
        raise BadRequestError("The query string was empty")
    parts = _split_parts(text)
    metric, filters = parse_metric_and_filters(parts[-1])
    rate, rate_options, downsample = False, None, None
    explicit_tags = pre_aggregate = False
    rollup_usage = None
    percentiles: tuple[float, ...] = ()
    show_buckets = False
    for part in parts[1:-1]:
        lowered = part.lower()
        if lowered.startswith("rate"):
            rate = True
            if "{" in part:
                rate_options = parse_rate_options(part)
        elif _is_downsample_part(part, text):
            downsample = part
        elif lowered.startswith("explicit_tags"):
            explicit_tags = True
        elif lowered == "pre-agg":
            pre_aggregate = True
        elif lowered.startswith("rollup_"):
            rollup_usage = parse_rollup_usage(part)
        elif lowered.startswith("percentiles"):
            percentiles = parse_percentiles(part)
        elif lowered.startswith("show-histogram-buckets"):
            show_buckets = True
        # anything unrecognised: ignored.
    return SubQuery(
        aggregator=parts[0],
        metric=metric,
        downsample=downsample,
        rate=rate,
        rate_options=rate_options,
        filters=tuple(filters),
        explicit_tags=explicit_tags,
        pre_aggregate=pre_aggregate,
        rollup_usage=rollup_usage,
        percentiles=percentiles,
        show_histogram_buckets=show_buckets,
    )


def parse_percentiles(spec: str) -> tuple[float, ...]:
    """QueryRpc.parsePercentiles: ``percentiles[99, 95.5]`` (Float.valueOf each)."""
    start, end = spec.find("["), spec.find("]")
    if start == -1 or end == -1:
        raise BadRequestError(f"Malformated percentile query paramater: {spec}")
    values = []
    for text in spec[start + 1 : end].split(","):
        try:
            values.append(float(text.strip()))
        except ValueError:
            raise BadRequestError(f'For input string: "{text.strip()}"') from None
    return tuple(values)


def parse_tsuid_subquery(text: str) -> SubQuery:
    """One ``tsuid=agg:[mods:]TSUID1,TSUID2`` value -> an unvalidated SubQuery."""
    if not text:
        raise BadRequestError("The tsuid query string was empty")
    parts = _split_parts(text)
    rate, rate_options, downsample = False, None, None
    for part in parts[1:-1]:
        if part.lower().startswith("rate"):
            rate = True
            if "{" in part:
                rate_options = parse_rate_options(part)
        elif _is_downsample_part(part, text):
            downsample = part
    return SubQuery(
        aggregator=parts[0],
        tsuids=tuple(java_split(parts[-1], ",")),
        downsample=downsample,
        rate=rate,
        rate_options=rate_options,
    )


def _split_parts(text: str) -> list[str]:
    parts = split_string(text, ":")
    if not 2 <= len(parts) <= 5:
        how = "not enough" if len(parts) < 2 else "too many"
        # OpenTSDB says "m=" for tsuid= queries too.
        raise BadRequestError(f"Invalid parameter m={text} ({how} :-separated parts)")
    return parts


def _is_downsample_part(part: str, text: str) -> bool:
    if not part:
        # OpenTSDB fails here with a StringIndexOutOfBoundsException (a 500).
        raise BadRequestError(f"Invalid parameter m={text} (empty :-separated part)")
    return part[0].isdecimal()
