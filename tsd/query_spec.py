"""The specification of a data query (/api/query): frozen value types. Pure: imports only
java_text.

``protocol/`` parses requests into these types, ``query/`` executes them. They mirror
OpenTSDB 2.4's ``TSQuery`` / ``TSSubQuery`` / ``DownsamplingSpecification`` /
``RateOptions`` / ``TagVFilter`` (src/core/, src/query/filter/), with snake_case attributes.

The registries of names live here too (aggregators, fill policies, filter types), because
both the parsers (which must reject unknown names with OpenTSDB's messages) and the kernels
need them, and ``protocol/`` may not import ``query/``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from tsd.java_text import java_split

#: Java's Long.MAX_VALUE / Long.MIN_VALUE: the default counterMax and the MAX/MIN
#: interpolation fills of the integer aggregation path.
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


class Interpolation(enum.Enum):
    """How a series without a point at a timestamp contributes (Aggregators.Interpolation)."""

    LERP = "lerp"  #: linear between the neighbouring points
    ZIM = "zim"  #: zero if missing
    MAX = "max"  #: the type's max value (so ``min`` ignores the series)
    MIN = "min"  #: the type's min value (so ``max`` ignores the series)
    PREV = "prev"  #: the previous point's value


#: Every aggregator OpenTSDB 2.4.1 registers (Aggregators.java static block), with its
#: interpolation. 17 named ones plus 18 percentiles = 35. Names are case-sensitive.
AGGREGATOR_INTERPOLATION: dict[str, Interpolation] = {
    "sum": Interpolation.LERP,
    "min": Interpolation.LERP,
    "max": Interpolation.LERP,
    "avg": Interpolation.LERP,
    "none": Interpolation.ZIM,
    "median": Interpolation.LERP,
    "mult": Interpolation.LERP,
    "dev": Interpolation.LERP,
    "diff": Interpolation.LERP,
    "count": Interpolation.ZIM,
    "zimsum": Interpolation.ZIM,
    "mimmin": Interpolation.MAX,
    "mimmax": Interpolation.MIN,
    "first": Interpolation.ZIM,
    "last": Interpolation.ZIM,
    "pfsum": Interpolation.PREV,
    "squareSum": Interpolation.ZIM,
}

#: Percentile aggregators: name -> (percentile in (0, 100], estimation type). ``legacy`` is
#: commons-math3's default; ``r3`` / ``r7`` are EstimationType.R_3 / R_7.
PERCENTILE_AGGREGATORS: dict[str, tuple[float, str]] = {}
for _p, _suffix in ((99.9, "999"), (99.0, "99"), (95.0, "95"), (90.0, "90"), (75.0, "75"),
                    (50.0, "50")):  # fmt: skip
    PERCENTILE_AGGREGATORS["p" + _suffix] = (_p, "legacy")
    PERCENTILE_AGGREGATORS["ep" + _suffix + "r3"] = (_p, "r3")
    PERCENTILE_AGGREGATORS["ep" + _suffix + "r7"] = (_p, "r7")
    AGGREGATOR_INTERPOLATION["p" + _suffix] = Interpolation.LERP
    AGGREGATOR_INTERPOLATION["ep" + _suffix + "r3"] = Interpolation.LERP
    AGGREGATOR_INTERPOLATION["ep" + _suffix + "r7"] = Interpolation.LERP

#: All aggregator names, as /api/aggregators lists them.
AGGREGATOR_NAMES: tuple[str, ...] = tuple(AGGREGATOR_INTERPOLATION)


class FillPolicy(enum.Enum):
    """What a downsampler emits for an empty interval (core/FillPolicy.java)."""

    NONE = "none"
    ZERO = "zero"
    NAN = "nan"
    NULL = "null"
    SCALAR = "scalar"


#: Tag value filter types tsd registers. OpenTSDB 2.4.1 registers the first seven; tsd
#: also registers ``not_key`` (the class exists in 2.4.1 but its registration is
#: commented out).
FILTER_TYPES: tuple[str, ...] = (
    "literal_or",
    "iliteral_or",
    "not_literal_or",
    "not_iliteral_or",
    "regexp",
    "wildcard",
    "iwildcard",
    "not_key",
)

#: Calendar units of a downsample interval (DateTime.unitsToCalendarType).
CALENDAR_UNITS: tuple[str, ...] = ("ms", "s", "m", "h", "d", "w", "n", "y")


@dataclass(frozen=True, slots=True)
class RateOptions:
    """Rate options (core/RateOptions.java). Defaults are OpenTSDB's."""

    counter: bool = False
    counter_max: int = LONG_MAX
    reset_value: int = 0
    drop_resets: bool = False


@dataclass(frozen=True, slots=True)
class Filter:
    """One tag value filter.

    ``type`` is the name OpenTSDB reports for it (``query.filters[].type``); ``filter`` is
    the expression without the ``type(...)`` wrapper. ``ignore_case`` is set for the
    ``i*`` types and also for the bare ``tagk=web*`` shortcut, which OpenTSDB builds as a
    case-insensitive filter that still reports the type ``wildcard``.
    """

    tagk: str
    type: str
    filter: str
    group_by: bool = False
    ignore_case: bool = False


def split_literals(expression: str, ignore_case: bool) -> frozenset[str]:
    """The value set of a ``*literal_or`` expression: Java ``split("\\|")`` semantics
    (trailing empty values dropped), lower-cased for the case-insensitive types."""
    parts = java_split(expression, "|")
    return frozenset(p.lower() for p in parts) if ignore_case else frozenset(parts)


@dataclass(frozen=True, slots=True)
class WildcardPattern:
    """A ``wildcard`` expression broken up as TagVWildcardFilter does.

    ``anchored_end`` means the expression started with ``*`` (OpenTSDB's ``has_postfix``:
    the value must end with the last component), ``anchored_start`` that it ended with
    ``*`` (``has_prefix``). ``match_all`` is the lone ``*``.
    """

    components: tuple[str, ...]
    anchored_start: bool
    anchored_end: bool
    match_all: bool


def wildcard_pattern(expression: str, ignore_case: bool) -> WildcardPattern:
    """Split a wildcard expression; the expression must contain ``*``."""
    actual = expression.lower() if ignore_case else expression
    anchored_end = actual.startswith("*")
    if anchored_end:
        while actual.startswith("*") and len(actual) >= 2:
            actual = actual[1:]
    anchored_start = actual.endswith("*")
    if anchored_start:
        while actual.endswith("*") and len(actual) >= 2:
            actual = actual[:-1]
    components = tuple(actual.split("*")) if actual.find("*") > 0 else (actual,)
    match_all = components == ("*",)
    return WildcardPattern(components, anchored_start, anchored_end, match_all)


@dataclass(frozen=True, slots=True)
class DownsampleSpec:
    """A parsed ``<interval>[c]-<function>[-<fill>]`` or ``0all-<function>`` spec.

    ``interval_ms`` is 0 for ``all``. ``calendar_amount`` / ``calendar_unit`` are the
    ``<n>`` and unit of the interval string, used when ``use_calendar`` is set (by the
    ``c`` suffix or ``useCalendar``); ``timezone`` only matters in calendar mode.
    """

    spec: str
    interval_ms: int
    function: str
    fill_policy: FillPolicy = FillPolicy.NONE
    run_all: bool = False
    use_calendar: bool = False
    timezone: str = "UTC"
    calendar_amount: int = 0
    calendar_unit: str = ""


@dataclass(frozen=True, slots=True)
class SubQuery:
    """One sub-query (TSSubQuery). ``tsuids`` wins over ``metric`` when non-empty.

    ``downsample`` is the spec string as given; ``downsample_spec`` is set once the query
    is validated. ``rate_options`` is None when the client gave none (the engine then
    uses ``RateOptions()``); ``index`` is the position after de-duplication.
    """

    aggregator: str
    metric: str = ""
    tsuids: tuple[str, ...] = ()
    downsample: str | None = None
    downsample_spec: DownsampleSpec | None = None
    rate: bool = False
    rate_options: RateOptions | None = None
    filters: tuple[Filter, ...] = ()
    explicit_tags: bool = False
    index: int = 0
    #: read the pre-aggregate tables (``preAggregate``, ``pre-agg``)
    pre_aggregate: bool = False
    #: ``rollupUsage`` as TsdbQuery.ROLLUP_USAGE.parse reads it (None: not given, which
    #: OpenTSDB's query treats as ROLLUP_NOFALLBACK)
    rollup_usage: str | None = None
    #: the rollup interval the answer was read from (``rollupTable``), set by the engine
    rollup_table: str = "raw"
    #: ``percentiles``: a histogram query, one output series per percentile
    percentiles: tuple[float, ...] = ()
    #: ``showHistogramBuckets``: a histogram query, one output series per bucket
    show_histogram_buckets: bool = False

    @property
    def is_histogram_query(self) -> bool:
        """TSSubQuery.isHistogramQuery."""
        return bool(self.percentiles) or self.show_histogram_buckets

    @property
    def effective_rate_options(self) -> RateOptions:
        return self.rate_options if self.rate_options is not None else RateOptions()

    @property
    def tags(self) -> dict[str, str]:
        """The group-by filters as OpenTSDB echoes them: ``{tagk: "type(filter)"}``."""
        return {f.tagk: f"{f.type}({f.filter})" for f in self.filters if f.group_by}


ROLLUP_USAGES: Final = ("ROLLUP_RAW", "ROLLUP_NOFALLBACK", "ROLLUP_FALLBACK", "ROLLUP_FALLBACK_RAW")


def parse_rollup_usage(text: str | None) -> str:
    """TsdbQuery.ROLLUP_USAGE.parse: the name, upper-cased; anything else (or nothing) is
    ROLLUP_NOFALLBACK."""
    upper = (text or "").upper()
    return upper if upper in ROLLUP_USAGES else "ROLLUP_NOFALLBACK"


@dataclass(frozen=True, slots=True)
class TSQuery:
    """A validated /api/query request (TSQuery). Times are Unix epoch milliseconds."""

    start: str
    end: str | None
    start_ms: int
    end_ms: int
    queries: tuple[SubQuery, ...]
    timezone: str | None = None
    use_calendar: bool = False
    no_annotations: bool = False
    global_annotations: bool = False
    show_tsuids: bool = False
    ms_resolution: bool = False
    show_query: bool = False
    show_stats: bool = False
    show_summary: bool = False
    delete: bool = False
    padding: bool = False
    override_byte_limit: bool = False
    override_data_point_limit: bool = False
    #: False for /api/query/exp, whose series keep every point of the scan window
    trim_to_range: bool = True


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Serializer options that always come from the query string (``arrays``; ``jsonp`` is
    the response middleware's, for every endpoint)."""

    arrays: bool = False


# -- /api/query/exp requests (OpenTSDB 2.4.1 src/query/pojo/*), as bound from JSON --------


@dataclass(frozen=True, slots=True)
class FillValue:
    """NumericFillPolicy after ``validate()``: the policy name and its value."""

    policy: str
    value: float


@dataclass(frozen=True, slots=True)
class ExpDownsampler:
    interval: str | None
    aggregator: str | None
    fill: FillValue | None


@dataclass(frozen=True, slots=True)
class ExpTime:
    start: str | None
    end: str | None
    timezone: str | None
    downsampler: ExpDownsampler | None
    aggregator: str | None
    rate: bool


@dataclass(frozen=True, slots=True)
class ExpFilter:
    id: str | None
    tags: tuple[Filter, ...] | None
    explicit_tags: bool


@dataclass(frozen=True, slots=True)
class ExpMetric:
    metric: str | None
    id: str | None
    filter: str | None
    aggregator: str | None
    time_offset: str | None
    fill: FillValue | None


@dataclass(frozen=True, slots=True)
class ExpExpression:
    id: str | None
    expr: str | None
    operator: str = "union"
    use_query_tags: bool = False
    include_agg_tags: bool = True
    has_join: bool = False
    fill: FillValue | None = None
    variables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExpOutput:
    id: str | None
    alias: str | None


@dataclass(frozen=True, slots=True)
class ExpQuery:
    name: str | None
    time: ExpTime | None
    filters: tuple[ExpFilter, ...] | None
    metrics: tuple[ExpMetric, ...] | None
    expressions: tuple[ExpExpression, ...] | None
    outputs: tuple[ExpOutput, ...] | None
    #: metric and expression ids (filled by validation)
    variable_ids: frozenset[str] = field(default_factory=frozenset)


# -- /api/query/gexp expressions (src/parser.jj) ------------------------------------------


@dataclass(frozen=True, slots=True)
class GexpMetric:
    """A metric query parameter: its text (rebuilt as the grammar does) and its number."""

    query: str
    index: int


@dataclass(slots=True)
class GexpCall:
    """A function call: its name and parameters (calls, metric refs, or words)."""

    name: str
    params: list[GexpCall | GexpMetric | str] = field(default_factory=list)
