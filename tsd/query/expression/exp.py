"""/api/query/exp's joins and expression evaluation over sub-query results. Pure.

This follows OpenTSDB 2.4.1's iterators (src/query/expression/TimeSyncedIterator.java,
UnionIterator.java, IntersectionIterator.java, ExpressionIterator.java, run by
src/tsd/QueryExecutor.java), because their quirks are visible in the answers:

* Each metric's result series walk in step over the union of their timestamps; a series
  without a point at a timestamp gives the metric's fill value (``fillPolicy``; zero when
  none is set). A NaN value is replaced by the variable's fill value too.
* A join keys every series by its tag UIDs (tagk+tagv bytes, sorted by tag key UID; with
  ``useQueryTags`` only the sub-query's filter tag keys) followed by its aggregated tag key
  UIDs (with ``includeAggTags``, the default). The output series are those keys in byte
  order. ``union`` keeps every key (a variable without that key counts as 0);
  ``intersection`` only keys every variable has ("No intersections found" if none).
* An output series takes its tags from the first variable (in Java HashMap order) that
  has it, so a union series missing from that variable has empty ``commonTags``.
* An expression used as a variable of another is re-created without its fill policy:
  a NaN from it fails (OpenTSDB 2.4.1 throws a NullPointerException, a 400).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tsd.errors import BadRequestError
from tsd.query.expression.javamap import java_hash_order
from tsd.query.expression.jexl import JexlError, JexlScript, JexlValue

__all__ = [
    "ExpInputs",
    "ExpressionIterator",
    "TimeSyncedSeries",
    "ExpSeries",
    "MetricInput",
    "ExpressionSpec",
    "OutputSeries",
    "evaluate_expression",
    "metric_output",
]

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


@dataclass(frozen=True, slots=True)
class ExpSeries:
    """One result series of a sub-query (a DataPoints), with its UIDs."""

    metric_uid: bytes
    #: tag key UID -> tag value UID, for the tags every aggregated series shares
    tag_uids: Mapping[bytes, bytes]
    aggregated_uids: Sequence[bytes]
    timestamps: Sequence[int]
    values: Sequence[float]


@dataclass(frozen=True, slots=True)
class ExpressionSpec:
    """A validated expression of the request."""

    id: str
    script: JexlScript
    union: bool = True
    use_query_tags: bool = False
    include_agg_tags: bool = True
    #: the expression's own fill value (used when another expression reads it)
    fill: float = math.nan


@dataclass(slots=True)
class OutputSeries:
    """One column of an output: the series' identity, for ``meta``."""

    metric_uids: set[bytes] = field(default_factory=set)
    tag_uids: dict[bytes, bytes] = field(default_factory=dict)
    aggregated_uids: set[bytes] = field(default_factory=set)


@dataclass(slots=True)
class OutputTable:
    """An output's rows ``[ts, v1, v2, ...]`` and its series (in column order)."""

    rows: list[tuple[int, list[float]]]
    series: list[OutputSeries]


class _Point:
    """ExpressionDataPoint: a series' identity plus a mutable current (ts, value)."""

    __slots__ = ("ident", "ts", "value")

    def __init__(self, ident: OutputSeries) -> None:
        self.ident = ident
        self.ts = LONG_MAX
        self.value = math.nan


class _Iterator:
    """ITimeSyncedIterator."""

    id: str
    fill: float | None
    #: the position in the set iterator that reads it (``index=`` in messages)
    index: int = 0

    def values(self) -> list[_Point | None]:
        raise NotImplementedError

    def has_next(self) -> bool:
        raise NotImplementedError

    def next_timestamp(self) -> int:
        raise NotImplementedError

    def next(self, ts: int) -> None:
        raise NotImplementedError

    def null_series(self, index: int) -> None:
        raise NotImplementedError

    def query_tagks(self) -> frozenset[bytes]:
        return frozenset()

    def has_next_at(self, index: int) -> bool:
        return False

    def describe(self) -> str:
        raise NotImplementedError


class TimeSyncedSeries(_Iterator):
    """TimeSyncedIterator over one sub-query's series."""

    def __init__(
        self, var: str, series: Sequence[ExpSeries], tagks: frozenset[bytes], fill: float
    ) -> None:
        self.id = var
        self.fill = fill
        self._series = series
        self._tagks = tagks
        self._pos = [0 if len(s.timestamps) else -1 for s in series]
        self._emit: list[_Point | None] = []
        for s in series:
            if not len(s.timestamps):
                self._emit.append(None)
                continue
            self._emit.append(
                _Point(OutputSeries({s.metric_uid}, dict(s.tag_uids), set(s.aggregated_uids)))
            )

    def values(self) -> list[_Point | None]:
        return self._emit

    def has_next(self) -> bool:
        return any(p >= 0 for p in self._pos)

    def next_timestamp(self) -> int:
        ts = LONG_MAX
        for s, p in zip(self._series, self._pos, strict=True):
            if p >= 0 and s.timestamps[p] < ts:
                ts = s.timestamps[p]
        return ts

    def next(self, ts: int) -> None:
        for i, (s, p) in enumerate(zip(self._series, self._pos, strict=True)):
            point = self._emit[i]
            if point is None:
                continue  # OpenTSDB would fail here; a series with no point never gets here
            if p < 0 or s.timestamps[p] > ts:
                point.ts, point.value = ts, self.fill if self.fill is not None else math.nan
                continue
            point.ts, point.value = s.timestamps[p], s.values[p]
            self._pos[i] = p + 1 if p + 1 < len(s.timestamps) else -1

    def null_series(self, index: int) -> None:
        self._pos[index] = -1

    def has_next_at(self, index: int) -> bool:
        return self._pos[index] >= 0

    def next_at(self, index: int) -> _Point:
        """Series ``index``'s next point, whatever the others' timestamps."""
        p, point = self._pos[index], self._emit[index]
        if p < 0 or point is None:
            raise BadRequestError("No more elements")
        s = self._series[index]
        point.ts, point.value = s.timestamps[p], s.values[p]
        self._pos[index] = p + 1 if p + 1 < len(s.timestamps) else -1
        return point

    def query_tagks(self) -> frozenset[bytes]:
        return self._tagks

    def describe(self) -> str:
        return f"TimeSyncedIterator(id={self.id}, index={self.index}, dpsSize={len(self._series)})"


def _join_key(point: _Point, tagks: frozenset[bytes] | None, agg: bool) -> bytes:
    """UnionIterator/IntersectionIterator.flattenTags."""
    tags = point.ident.tag_uids
    if not tags:
        return b""
    parts = [k + v for k, v in sorted(tags.items()) if tagks is None or k in tagks]
    if agg:
        parts += sorted(point.ident.aggregated_uids)
    return b"".join(parts)


class ExpressionIterator(_Iterator):
    """ExpressionIterator with its Union/IntersectionIterator."""

    def __init__(self, spec: ExpressionSpec, fill: float | None) -> None:
        self.id = spec.id
        self.spec = spec
        self.fill = fill
        self.results: dict[str, _Iterator] = {}
        self._order: list[str] = []
        self._columns: dict[str, list[_Point]] = {}
        #: per variable, per output series: the variable's series index (-1: none)
        self._sources: dict[str, list[int]] = {}
        self._points: list[_Point] = []
        self._union_fill = _Point(OutputSeries())
        self._union_fill.value = 0.0  # a fresh MutableDataPoint: the long 0
        self._timestamp = LONG_MAX

    # -- building ------------------------------------------------------------------------------

    def compile(self) -> None:
        names = self.spec.script.variables
        if not self.results:
            raise BadRequestError(f"No results for any variables in the expression: {self}")
        if len(self.results) < len(names):
            raise BadRequestError(
                f"Not enough query results [{len(self.results)} total results found] for the "
                f"expression variables [{len(names)} expected] {self}"
            )
        for name in names:
            sub = self.results.get(name.lower())
            if sub is None:
                raise BadRequestError(f"Missing results for variable {name}")
            if isinstance(sub, ExpressionIterator):
                sub.compile()
        # ExpressionIterator.results is a HashMap; the set iterators copy it into HashMaps
        # sized for it (QueryExecutor adds the metrics first, then nested expressions).
        order = java_hash_order(self.results)
        order = java_hash_order(order, len(order))
        self._order = java_hash_order(order, len(order))
        for i, name in enumerate(order):
            self.results[name].index = i
        keyed = self._union() if self.spec.union else self._intersection()
        self._columns = {name: [] for name in self._order}
        self._sources = {name: [] for name in self._order}
        for key in sorted(keyed):
            row = keyed[key]
            for name in self._order:
                point = row.get(name)
                self._columns[name].append(point or self._union_fill)
                values = self.results[name].values()
                self._sources[name].append(values.index(point) if point is not None else -1)
        self._points = []
        for i in range(len(keyed)):
            first = keyed[sorted(keyed)[i]].get(self._order[0])
            ident = OutputSeries()
            if first is not None:
                ident.metric_uids |= first.ident.metric_uids
                ident.tag_uids.update(first.ident.tag_uids)
                ident.aggregated_uids |= first.ident.aggregated_uids
            for name in self._order[1:]:
                other = keyed[sorted(keyed)[i]].get(name)
                if other is not None:
                    ident.metric_uids |= other.ident.metric_uids
                    ident.aggregated_uids |= other.ident.aggregated_uids
            self._points.append(_Point(ident))
        self._timestamp = min((s.next_timestamp() for s in self.results.values()), default=LONG_MAX)

    def _tagks(self, sub: _Iterator) -> frozenset[bytes] | None:
        return sub.query_tagks() if self.spec.use_query_tags else None

    def _union(self) -> dict[bytes, dict[str, _Point]]:
        keyed: dict[bytes, dict[str, _Point]] = {}
        for name in self._order:
            sub = self.results[name]
            for point in sub.values():
                if point is None:
                    continue
                key = _join_key(point, self._tagks(sub), self.spec.include_agg_tags)
                keyed.setdefault(key, {})[name] = point
        return keyed

    def _intersection(self) -> dict[bytes, dict[str, _Point]]:
        first, *rest = self._order
        keyed: dict[bytes, dict[str, _Point]] = {}
        indexes: dict[str, dict[bytes, int]] = {}
        sub = self.results[first]
        indexes[first] = {}
        for i, point in enumerate(sub.values()):
            if point is None:
                continue
            key = _join_key(point, self._tagks(sub), self.spec.include_agg_tags)
            indexes[first][key] = i
            keyed[key] = {first: point}
        for name in rest:
            sub = self.results[name]
            mine: dict[bytes, int] = {}
            indexes[name] = mine
            for i, point in enumerate(sub.values()):
                if point is None:
                    continue
                key = _join_key(point, self._tagks(sub), self.spec.include_agg_tags)
                mine[key] = i
                if key not in keyed:
                    sub.null_series(i)
                    continue
                keyed[key][name] = point
            for key in [k for k in keyed if k not in mine]:
                for other, index in indexes.items():
                    if other != name and key in index:
                        self.results[other].null_series(index[key])
                del keyed[key]
        if not keyed:
            queries = ", ".join(f"{n}={self.results[n].describe()}" for n in self._order)
            raise BadRequestError(
                f"No intersections found: IntersectionIterator(id={self.id}, useQueryTags="
                f"{_java_bool(self.spec.use_query_tags)}, includeAggTags="
                f"{_java_bool(self.spec.include_agg_tags)}, index=0, queries={{{queries}}}"
            )
        return keyed

    # -- iterating -----------------------------------------------------------------------------

    def values(self) -> list[_Point | None]:
        return list(self._points)

    def has_next(self) -> bool:
        return any(s.has_next() for s in self.results.values())

    def next_timestamp(self) -> int:
        return min((s.next_timestamp() for s in self.results.values()), default=LONG_MAX)

    def null_series(self, index: int) -> None:
        pass  # OpenTSDB 2.4.1: "TODO - do it"

    def next(self, ts: int) -> None:
        if not self.has_next():
            raise BadRequestError("No more data")
        for name in self._order:
            self.results[name].next(self._timestamp)
        self._union_fill.ts, self._union_fill.value = self._timestamp, 0.0
        self._timestamp = self.next_timestamp()
        script = self.spec.script
        for i, point in enumerate(self._points):
            context: dict[str, JexlValue] = {}
            for name in script.variables:
                value = self._columns[name][i].value
                if math.isnan(value):
                    fill = self.results[name].fill
                    if fill is None:
                        raise BadRequestError(_NESTED_FILL_NPE)
                    value = fill
                context[name] = JexlValue("Double", value)
            point.ts, point.value = ts, self._run(script, context)

    def series_points(self, index: int) -> list[tuple[int, float]]:
        """Output series ``index`` walked on its own (ExpressionIterator.next(int), as
        EDPtoDPS does): each step takes the next point of every variable's series for
        it, whatever their timestamps, and stamps the result with the smallest."""
        out = []
        while any(
            src[index] >= 0 and self.results[n].has_next_at(src[index])
            for n, src in self._sources.items()
        ):
            if not self.has_next():
                raise BadRequestError("No more data")
            ts = LONG_MAX
            context: dict[str, JexlValue] = {}
            for name in self._order:
                src = self._sources[name][index]
                sub = self.results[name]
                if src >= 0:
                    if not isinstance(sub, TimeSyncedSeries):
                        raise BadRequestError("No more elements")
                    point = sub.next_at(src)
                    ts = min(ts, point.ts)
                    value = point.value
                else:
                    value = self._union_fill.value
                if math.isnan(value):
                    value = sub.fill if sub.fill is not None else math.nan
                context[name] = JexlValue("Double", value)
            out.append((ts, self._run(self.spec.script, context)))
        return out

    def _run(self, script: JexlScript, context: dict[str, JexlValue]) -> float:
        try:
            out = script.execute(context)
        except JexlError as exc:
            raise BadRequestError(_jexl_runtime_message(script, exc)) from None
        if out.kind == "Double":
            return float(out.value)
        if out.kind == "Boolean":
            return 1.0 if out.value else 0.0
        if out.kind == "Null":
            raise BadRequestError(_NULL_OUTPUT_NPE)
        raise BadRequestError(f"Expression returned a result of type: {out.java_class} for {self}")

    def describe(self) -> str:
        return str(self)

    def __str__(self) -> str:
        fill = "null" if self.fill is None else _fill_text(self.fill)
        set_op = "UNION" if self.spec.union else "INTERSECTION"
        kind = "UnionIterator" if self.spec.union else "IntersectionIterator"
        queries = java_hash_order(java_hash_order(self.results), len(self.results))
        subs = ", ".join(f"{n}={self.results[n].describe()}" for n in queries)
        results = ", ".join(
            f"{n}={self.results[n].describe()}" for n in java_hash_order(self.results)
        )
        return (
            f'ExpressionIterator(id={self.id}, expression="{self.spec.script}, setOperator='
            f"{set_op}, fillPolicy={fill}, intersectOnQueryTagks="
            f"{_java_bool(self.spec.use_query_tags)}, includeAggTags="
            f'{_java_bool(self.spec.include_agg_tags)}, index={self.index}", VariableIterator='
            f"{kind}(id={self.id}, useQueryTags={_java_bool(self.spec.use_query_tags)}, "
            f"includeAggTags={_java_bool(self.spec.include_agg_tags)}, index=0, queries="
            f"{{{subs}}}, dps="
            f"[Lnet.opentsdb.query.expression.ExpressionDataPoint;@{id(self) & 0xFFFFFFF:x}, "
            f"results={{{results}}})"
        )


_NULL_OUTPUT_NPE = 'Cannot invoke "Object.getClass()" because "output" is null'
_NESTED_FILL_NPE = (
    'Cannot invoke "net.opentsdb.query.expression.NumericFillPolicy.getValue()" because the '
    'return value of "net.opentsdb.query.expression.ITimeSyncedIterator.getFillPolicy()" is null'
)


def _java_bool(b: bool) -> str:
    return "true" if b else "false"


def _fill_text(value: float) -> str:
    if math.isnan(value):
        return "policy=NOT_A_NUMBER, value=NaN"
    return f"policy=SCALAR, value={value!r}"


def _jexl_runtime_message(script: JexlScript, exc: JexlError) -> str:
    return (
        f"net.opentsdb.query.expression.ExpressionIterator.<init>@148![0,{len(script.text)}]: "
        f"'{script.text};' {exc.message}"
    )


@dataclass(frozen=True, slots=True)
class MetricInput:
    """A metric id's result series, its filters' tag key UIDs and its fill value."""

    series: Sequence[ExpSeries]
    tagks: frozenset[bytes]
    fill: float


@dataclass(frozen=True, slots=True)
class ExpInputs:
    """Everything the expressions of one request read."""

    specs: Mapping[str, ExpressionSpec]
    metrics: Mapping[str, MetricInput]
    #: the metric ids in the order OpenTSDB runs their sub-queries
    variable_order: Sequence[str]
    start_ms: int
    end_ms: int


def evaluate_expression(spec_id: str, inputs: ExpInputs) -> OutputTable:
    """The rows of expression ``spec_id`` in [start, end]
    (QueryExecutor.SerializeExpressionIterator)."""
    start_ms, end_ms = inputs.start_ms, inputs.end_ms
    top = _build(spec_id, inputs, top_level=True)
    top.compile()
    rows: list[tuple[int, list[float]]] = []
    points = top.values()
    ts = top.next_timestamp()
    while top.has_next():
        top.next(ts)
        stamp = points[0].ts if points and points[0] is not None else ts
        if start_ms <= stamp <= end_ms:
            rows.append((stamp, [p.value if p is not None else math.nan for p in points]))
        ts = top.next_timestamp()
    return OutputTable(rows, [p.ident for p in points if p is not None])


def _build(spec_id: str, inputs: ExpInputs, *, top_level: bool) -> ExpressionIterator:
    specs = inputs.specs
    spec = specs[spec_id]
    it = ExpressionIterator(spec, spec.fill if top_level else None)
    names = set(spec.script.variables)
    for var in inputs.variable_order:
        if var in names:
            m = inputs.metrics[var]
            it.results[var] = TimeSyncedSeries(var, m.series, m.tagks, m.fill)
    for var in spec.script.variables:
        if var in specs:
            if var == spec_id:
                raise BadRequestError(f"Self referencing expression found: {spec_id}")
            it.results[var] = _build(var, inputs, top_level=False)
    return it


def metric_output(series: Sequence[ExpSeries]) -> tuple[OutputTable, int]:
    """A metric's rows as an output (QueryExecutor.SerializeSubIterator): every timestamp
    of its series, zero where a series has none; and ``firstTimestamp``."""
    synced = TimeSyncedSeries("", series, frozenset(), 0.0)
    first = synced.next_timestamp()
    rows: list[tuple[int, list[float]]] = []
    points = synced.values()
    ts = first
    while synced.has_next():
        synced.next(ts)
        rows.append((ts, [p.value if p is not None else 0.0 for p in points]))
        ts = synced.next_timestamp()
    return OutputTable(rows, [p.ident for p in points if p is not None]), first
