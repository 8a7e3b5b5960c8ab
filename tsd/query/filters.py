"""Tag value filters: matching series by their tags, and their descriptions. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.5; OpenTSDB
src/query/filter/TagV*Filter.java ``match``):

* ``literal_or`` / ``iliteral_or``: the value is one of the ``|``-separated literals
  (the ``i`` form lower-cases both sides);
* ``not_literal_or`` / ``not_iliteral_or``: the value is none of them;
* ``wildcard`` / ``iwildcard``: ``*`` globs, matched as OpenTSDB does — a leading ``*``
  anchors the last component at the end, a trailing one the first at the start, and the
  components are then searched in order from a position that advances by each
  component's *length* (not past the match), so ``a*b`` is not anchored at all;
* ``regexp``: a search (Java's ``Matcher.find``: unanchored), with the ``regex``
  package rather than ``re``: it releases the GIL while matching (``concurrent=True``)
  and stops after ``REGEXP_TIMEOUT_S``, so a catastrophic pattern costs its own query
  a 400 instead of stalling ingest and every other query (the engine matches in a
  worker thread of its own, not a compute slot other queries wait for); the query's
  :class:`~tsd.query.limits.QueryControl` also bounds the regexp time of the whole query
  (``tsd.query.filter.regexp_budget``: 40 slow values cannot add up to 40 s). Patterns
  are bounded in length and size when the query is read and compiled once (cached);
* ``not_key``: the series has no such tag key. OpenTSDB 2.4.1 never registers it; tsd
  does.

A series must carry the tag key of every filter (OpenTSDB's row-key regex always asks
for the key), except for ``not_key``; all filters must match (AND). With
``explicit_tags`` the series' tag keys must be exactly the filters' keys.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import regex

from tsd.errors import BadRequestError, TsdError
from tsd.query.limits import QueryControl
from tsd.query_spec import Filter, split_literals, wildcard_pattern

Matcher = Callable[[str], bool]

#: /api/config/filters: name -> {"description", "examples"} (tsd's own wording).
FILTER_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "literal_or": {
        "description": "Matches series whose tag value equals one of the given values, "
        "compared case-sensitively. Separate several values with the pipe character (|).",
        "examples": "host=literal_or(web01),  host=literal_or(web01|web02|web03)  "
        '{"type":"literal_or","tagk":"host","filter":"web01|web02|web03","groupBy":false}',
    },
    "iliteral_or": {
        "description": "Like literal_or, but the comparison ignores case. Separate several "
        "values with the pipe character (|).",
        "examples": "host=iliteral_or(web01),  host=iliteral_or(web01|web02|web03)  "
        '{"type":"iliteral_or","tagk":"host","filter":"web01|web02|web03","groupBy":false}',
    },
    "not_literal_or": {
        "description": "Matches series whose tag value equals none of the given values, "
        "compared case-sensitively. The series must still have the tag key. Separate "
        "several values with the pipe character (|).",
        "examples": "host=not_literal_or(web01),  host=not_literal_or(web01|web02|web03)  "
        '{"type":"not_literal_or","tagk":"host","filter":"web01|web02|web03",'
        '"groupBy":false}',
    },
    "not_iliteral_or": {
        "description": "Like not_literal_or, but the comparison ignores case. The series "
        "must still have the tag key.",
        "examples": "host=not_iliteral_or(web01),  host=not_iliteral_or(web01|web02|web03)  "
        '{"type":"not_iliteral_or","tagk":"host","filter":"web01|web02|web03",'
        '"groupBy":false}',
    },
    "wildcard": {
        "description": "Glob match on the tag value with * standing for any run of "
        "characters, case-sensitive. The expression needs at least one *; a lone * "
        "matches every value of the tag key.",
        "examples": "host=wildcard(web*),  host=wildcard(web*.tsdb.net)  "
        '{"type":"wildcard","tagk":"host","filter":"web*.tsdb.net","groupBy":false}',
    },
    "iwildcard": {
        "description": "Like wildcard, but both the expression and the tag value are "
        "lower-cased before matching. The expression needs at least one *.",
        "examples": "host=iwildcard(web*),  host=iwildcard(web*.tsdb.net)  "
        '{"type":"iwildcard","tagk":"host","filter":"web*.tsdb.net","groupBy":false}',
    },
    "regexp": {
        "description": "Regular expression searched anywhere in the tag value (anchor it "
        "with ^ and $ to match the whole value). Curly braces do not survive in an m= URL "
        "query; use the JSON form for them. An invalid expression fails the query.",
        "examples": 'host=regexp(.*)  {"type":"regexp","tagk":"host","filter":".*",'
        '"groupBy":false}',
    },
    "not_key": {
        "description": "Matches only series that do not have the tag key at all, whatever "
        "its value would be; handy when a metric has inconsistent tag sets. The filter "
        "expression must be empty.",
        "examples": 'host=not_key()  {"type":"not_key","tagk":"host","filter":"","groupBy":false}',
    },
}


def compile_value_matcher(f: Filter, control: QueryControl | None = None) -> Matcher:
    """A predicate on a tag value present in the series (not used for ``not_key``);
    ``control`` bounds the regexp time of the whole query."""
    if f.type in ("literal_or", "iliteral_or", "not_literal_or", "not_iliteral_or"):
        literals = split_literals(f.filter, f.ignore_case)
        negate = f.type.startswith("not_")
        if f.ignore_case:
            return lambda v: (v.lower() in literals) != negate
        return lambda v: (v in literals) != negate
    if f.type in ("wildcard", "iwildcard"):
        return _wildcard_matcher(f)
    if f.type == "regexp":
        return _regexp_matcher(f.filter, control)
    raise ValueError(f"no value matcher for filter type {f.type!r}")


#: The longest one tag value may take to match a ``regexp`` filter. Sane patterns take
#: microseconds; only exponential backtracking gets near this.
REGEXP_TIMEOUT_S = 1.0


@functools.lru_cache(maxsize=256)
def _compiled(expression: str) -> regex.Pattern[str]:
    """Each expression compiled once (a dashboard sends the same ones every refresh); its
    size was bounded when the query was read (tsd.protocol.m_syntax.check_regexp)."""
    return regex.compile(expression, flags=regex.VERSION0)


def _regexp_matcher(expression: str, control: QueryControl | None = None) -> Matcher:
    pattern = _compiled(expression)

    def match(value: str) -> bool:
        timeout = REGEXP_TIMEOUT_S
        if control is not None:
            control.check()  # a cancelled query stops before its next value
            timeout = min(timeout, control.regexp_time_left())
            if timeout <= 0:
                raise _regexp_budget_spent(control, expression)
        started = time.perf_counter()
        try:
            return pattern.search(value, timeout=timeout, concurrent=True) is not None
        except TimeoutError:
            if timeout < REGEXP_TIMEOUT_S and control is not None:
                raise _regexp_budget_spent(control, expression) from None
            raise BadRequestError(
                f"The regexp filter took longer than {REGEXP_TIMEOUT_S:g}s on one tag value",
                details=f"regexp({expression}) on {value[:100]!r}",
            ) from None
        finally:
            if control is not None:
                control.spend_regexp(time.perf_counter() - started)

    return match


def _regexp_budget_spent(control: QueryControl, expression: str) -> TsdError:
    """The per-query regexp budget (or the query's deadline) ran out."""
    control.check()  # cancelled or timed out: say so rather than blame the regexp
    return BadRequestError(
        f"The regexp filters took longer than {control.regexp_budget_s:g}s in all on this "
        "query (tsd.query.filter.regexp_budget)",
        details=f"regexp({expression})",
    )


def _wildcard_matcher(f: Filter) -> Matcher:
    pattern = wildcard_pattern(f.filter, f.ignore_case)
    if pattern.match_all:
        return lambda v: True
    parts = pattern.components
    ends_only = pattern.anchored_end and not pattern.anchored_start
    starts_only = pattern.anchored_start and not pattern.anchored_end

    def match(value: str) -> bool:
        if f.ignore_case:
            value = value.lower()
        if ends_only and not value.endswith(parts[-1]):
            return False
        if starts_only and not value.startswith(parts[0]):
            return False
        position = 0
        for part in parts:
            if value.find(part, position) < 0:
                return False
            position += len(part)
        return True

    return match


class SeriesFilter:
    """All filters of a sub-query, compiled once; ``matches(tags)`` for one series.

    Value matchers are memoised per distinct tag value, so high-cardinality scans cost
    one evaluation per value, not per series.
    """

    def __init__(
        self,
        filters: Sequence[Filter],
        explicit_tags: bool = False,
        control: QueryControl | None = None,
    ) -> None:
        self._control = control
        self._absent = [f.tagk for f in filters if f.type == "not_key"]
        self._present: list[tuple[str, Matcher, dict[str, bool]]] = [
            (f.tagk, compile_value_matcher(f, control), {}) for f in filters if f.type != "not_key"
        ]
        wanted = frozenset(f.tagk for f in filters if f.type != "not_key")
        self._explicit = wanted if explicit_tags else None

    def matches(self, tags: Mapping[str, str]) -> bool:
        if self._explicit is not None and frozenset(tags) != self._explicit:
            return False
        if any(tagk in tags for tagk in self._absent):
            return False
        for tagk, matcher, memo in self._present:
            value = tags.get(tagk)
            if value is None:
                return False
            hit = memo.get(value)
            if hit is None:
                hit = memo[value] = matcher(value)
            if not hit:
                return False
        return True

    def mask(self, series_tags: Sequence[Mapping[str, str]]) -> npt.NDArray[np.bool_]:
        """``matches`` for every series, as a boolean array (checking the query's control
        every ``CHECK_EVERY`` series)."""
        control = self._control
        out = np.zeros(len(series_tags), dtype=np.bool_)
        for lo in range(0, len(series_tags), CHECK_EVERY):
            if control is not None:
                control.check()
            chunk = series_tags[lo : lo + CHECK_EVERY]
            out[lo : lo + len(chunk)] = [self.matches(t) for t in chunk]
        return out

    def mask_columns(
        self, columns: Mapping[str, tuple[Sequence[str], npt.NDArray[np.int64]]], count: int
    ) -> npt.NDArray[np.bool_]:
        """:meth:`mask` of ``count`` series that all carry the tag keys of ``columns``
        (tag name -> the distinct values, each series' index into them): each filter
        looks at the distinct values of the series still kept, once each (checking the
        query's control every ``CHECK_EVERY`` values), not at each series."""
        none = np.zeros(count, dtype=np.bool_)
        if self._explicit is not None and frozenset(columns) != self._explicit:
            return none
        if any(tagk in columns for tagk in self._absent):
            return none
        out = np.ones(count, dtype=np.bool_)
        control = self._control
        for tagk, matcher, memo in self._present:
            column = columns.get(tagk)
            if column is None:
                return none
            values, inverse = column
            hits = np.zeros(len(values), dtype=np.bool_)
            kept = inverse[out]
            # a few series' values as Python ints: np.unique's set-up costs more there
            wanted = (
                sorted(set(kept.tolist())) if len(kept) <= FEW_SERIES else np.unique(kept).tolist()
            )
            for lo in range(0, len(wanted), CHECK_EVERY):
                if control is not None:
                    control.check()
                for v in wanted[lo : lo + CHECK_EVERY]:
                    value = values[v]
                    hit = memo.get(value)
                    if hit is None:
                        hit = memo[value] = matcher(value)
                    hits[v] = hit
            out &= hits[inverse]
        return out


#: Series a filter looks at between two checks of the query's cancel flag.
CHECK_EVERY = 4096
#: Up to this many series, :meth:`SeriesFilter.mask_columns` finds their distinct values
#: without numpy
FEW_SERIES = 64
