"""Reading a sub-query's rows: which rows to ask storage for, and how many reads at once.

The scan plan (plan.py) says which rows can match: the metric's rows in the window, and a
row-key regex when filters pin tag keys or values. On HBase the regex cannot be pushed down
(docs/hbase.md: the Thrift filter language reads keys as UTF-8), so a plain scan transfers
every cell of the metric. The read paths, chosen per sub-query (:func:`choose_path`):

``multi-get``
    ``explicitTags`` and every filtered key pinned to literal values: the series are
    exactly the combinations of those values, so their row keys are known per hour and
    fetched with ``getRows`` (OpenTSDB 2.4's ``tsd.query.multi_get``, which also needs
    explicit tags). Only rows of matching series are transferred. Up to
    ``MULTI_GET_MAX_ROWS`` keys; beyond, the key-only pass.
``ranges``
    Some key pinned to literal values (not all, or no ``explicitTags``): the window is cut
    into the key ranges that can hold a matching row (:func:`narrowed_ranges`). Tag pairs
    follow the base time sorted by tag key UID (both OpenTSDB and tsd write them so), so a
    row carrying ``host=a`` either starts its tags with ``host a`` or starts them with a tag
    key whose UID is below host's: per hour (and salt bucket) ``[prefix, prefix + host)``
    and ``[prefix + host + a, ...)`` for each pinned value, refined the same way by the
    next pinned key inside each value's range. Ranges that can only hold matching rows
    ("decided": every condition of the regex is a pin, no ``explicitTags``) are scanned
    with their cells; the others (rows whose tags start below a pinned key, usually none)
    get the key-only pass below and a ``getRows`` of their matches. A range that can only
    hold rows no writer makes (a tag key between two consecutive UIDs) is not read. Up to
    ``MAX_RANGES`` ranges; beyond, the key-only pass over the whole window.
``key-only``
    Some key pinned, more ranges than ``MAX_RANGES`` (or a ``tsuids`` sub-query with too
    many rows for a multi-get): a first pass reads
    the window's row keys only (HBase: ``KeyOnlyFilter() AND FirstKeyOnlyFilter()``, one
    value-less cell per row), the regex is applied to the keys here, and the matching rows
    are fetched with ``getRows``. Data cells of other series are never transferred; the key
    pass costs one small cell per row of the metric.
``scan``
    Everything else (no filter, or filters that only ask for a tag key or need names): the
    rows are scanned with their cells, the regex (if any) applied to each key.

Whatever the path, the rows handed on are exactly those the scan would have given (same
keys, same cells): tests/query/test_read_path.py runs each query on each path.

Not used: tsd's series index (``tsd_series`` cells in the meta table). It may be trusted
only for series whose writers all index them, and OpenTSDB writes no such cell (nor any meta
row with its tracking off), so a series OpenTSDB wrote after the index was built would be
missed; nothing in the tables tells whether that happened. See docs/hbase.md.

Parallelism: a scan is cut in time slices (whole hours) per salt bucket, up to
:meth:`Storage.parallel_reads` reads in flight per sub-query (HBase 4, the embedded store
one per core); key-only matches are fetched in ``getRows`` calls of ``GET_CHUNK`` rows,
also concurrently. The HBase backend bounds the
bulk reads of all queries together below its pool size (``read_slots``), so a big query
leaves connections to the writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from tsd.codec import KeyLayout
from tsd.codec.const import MAX_TIMESPAN
from tsd.codec.rowkey import salt_bucket, salt_bytes
from tsd.query.compute import INLINE_WORK
from tsd.query.plan import ScanPlan, TagCondition
from tsd.query.tasks import all_or_none
from tsd.storage.base import Block, BlockWork, ReadStats, RowFilter, ScanSpec, Storage

__all__ = [
    "KEY_ONLY",
    "MULTI_GET",
    "RANGES",
    "SCAN",
    "KeyRange",
    "ReadRequest",
    "choose_path",
    "multi_get_keys",
    "narrowed_ranges",
    "prefix_stop",
    "request_for_filters",
    "request_for_tsuids",
    "read_rows",
    "split_keys",
    "time_slices",
]

SCAN = "scan"
MULTI_GET = "multi-get"
KEY_ONLY = "key-only"
RANGES = "ranges"
#: row keys per getRows call of the key-only and multi-get paths
GET_CHUNK = 1000
#: rows per round trip of a key-only pass
KEY_BATCH_ROWS = 10_000
#: more exact row keys than this: the key-only pass instead of a multi-get
MULTI_GET_MAX_ROWS = 100_000
#: most key ranges of the ranges path (all hours and salt buckets together)
MAX_RANGES = 256

#: called with each block read; returns once it is consumed (decoded, counted)
Consumer = Callable[[Block], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """What the read path needs beyond the scan plan.

    ``exact_series``: the tag bytes of every series that can match, when the filters say
    exactly (None: unknown); ``pinned``: some tag key is pinned to literal values.
    """

    exact_series: tuple[bytes, ...] | None = None
    pinned: bool = False
    #: per pinned tag key, the tag pairs (key UID + value UID) a matching row key contains
    pinned_pairs: tuple[tuple[bytes, ...], ...] = ()
    #: the pinned tag keys in UID order, each with its value UIDs (sorted)
    pins: tuple[tuple[bytes, tuple[bytes, ...]], ...] = ()
    #: a row key carrying every pin matches the row regex (the pins are all its
    #: conditions and there is no explicitTags)
    pins_decide: bool = False


def request_for_filters(
    conditions: Sequence[TagCondition], explicit_tags: bool, has_not_key: bool
) -> ReadRequest:
    """The read request of a metric sub-query's tag conditions (plan.tag_conditions)."""
    pairs = tuple(tuple(c.tagk_uid + v for v in c.tagv_uids) for c in conditions if c.tagv_uids)
    pinned = bool(pairs)
    pins = tuple((c.tagk_uid, tuple(sorted(c.tagv_uids))) for c in conditions if c.tagv_uids)
    all_pinned = bool(conditions) and all(c.tagv_uids for c in conditions)
    unknown = ReadRequest(None, pinned, pairs, pins, all_pinned and not explicit_tags)
    if not (explicit_tags and all_pinned and not has_not_key):
        return unknown
    count = 1
    for cond in conditions:
        count *= len(cond.tagv_uids or ())
    if count > MULTI_GET_MAX_ROWS:
        return unknown
    series = tuple(b"".join(p) for p in itertools.product(*pairs))
    return ReadRequest(series, pinned, pairs, pins, False)


def request_for_tsuids(layout: KeyLayout, tsuids: Sequence[bytes]) -> ReadRequest:
    """A ``tsuids`` sub-query names its series exactly."""
    return ReadRequest(tuple(sorted({t[layout.metric_width :] for t in tsuids})), True)


def choose_path(plan: ScanPlan, request: ReadRequest) -> str:
    """The read path for a sub-query (see the module docstring)."""
    series = request.exact_series
    if series is not None and len(series) * len(_hours(plan)) <= MULTI_GET_MAX_ROWS:
        return MULTI_GET
    if request.pins and _pinned_depth(plan, request):
        return RANGES
    return KEY_ONLY if request.pinned else SCAN


def _hours(plan: ScanPlan) -> range:
    first = plan.start_s - plan.start_s % MAX_TIMESPAN
    return range(first, plan.end_s, MAX_TIMESPAN)


def multi_get_keys(layout: KeyLayout, plan: ScanPlan, series: Sequence[bytes]) -> list[bytes]:
    """Every row key the series (their tag bytes) can have in the window, in key order."""
    keys = []
    for tags in series:
        salt = b""
        if layout.salt_width:
            salt = salt_bytes(layout, salt_bucket(layout, plan.metric_uid, tags))
        for hour in _hours(plan):
            keys.append(salt + plan.metric_uid + (hour & 0xFFFFFFFF).to_bytes(4, "big") + tags)
    keys.sort()
    return keys


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Row keys ``start <= key < stop`` (an empty stop: to the end); ``decided``: every row
    in it matches the sub-query's row regex."""

    start: bytes
    stop: bytes
    decided: bool


def prefix_stop(prefix: bytes) -> bytes:
    """The smallest key above every key starting with ``prefix`` (empty: none is)."""
    kept = prefix.rstrip(b"\xff")
    return kept[:-1] + bytes([kept[-1] + 1]) if kept else b""


def _ranges_per_prefix(pins: Sequence[tuple[bytes, tuple[bytes, ...]]]) -> int:
    if not pins:
        return 1
    return 1 + len(pins[0][1]) * _ranges_per_prefix(pins[1:])


def _pin_ranges(
    prefix: bytes,
    pins: Sequence[tuple[bytes, tuple[bytes, ...]]],
    previous: int,
    decided: bool,
    out: list[KeyRange],
) -> None:
    """The ranges under ``prefix`` (a row key up to a tag pair) holding the rows whose
    following tag pairs, sorted by key UID and each key above ``previous``, carry every pin."""
    if not pins:
        out.append(KeyRange(prefix, prefix_stop(prefix), decided))
        return
    tagk, values = pins[0]
    key = int.from_bytes(tagk, "big")
    if key - previous > 1:  # a tag key between previous and this one may come first
        out.append(KeyRange(prefix, prefix + tagk, False))
    for value in values:
        _pin_ranges(prefix + tagk + value, pins[1:], key, decided, out)


def _pinned_depth(plan: ScanPlan, request: ReadRequest) -> int:
    """How many pinned keys (the first ones) the ranges path narrows by: the most whose
    ranges stay within ``MAX_RANGES`` (0: not even the first's)."""
    prefixes = len(_hours(plan)) * len(plan.scans)
    pins = request.pins
    depth = len(pins)
    while depth and _ranges_per_prefix(pins[:depth]) * prefixes > MAX_RANGES:
        depth -= 1
    return depth


def _under(prefix: bytes, ranges: list[KeyRange]) -> list[tuple[bytes, bytes, bool]] | None:
    """``ranges`` as (start, stop) suffixes of ``prefix``, when every bound is ``prefix``
    and more (not a stop that carried into it: tag bytes all ``ff``); else None."""
    n = len(prefix)
    if all(len(r.stop) > n and r.start[:n] == prefix and r.stop[:n] == prefix for r in ranges):
        return [(r.start[n:], r.stop[n:], r.decided) for r in ranges]
    return None


def narrowed_ranges(plan: ScanPlan, request: ReadRequest) -> list[KeyRange] | None:
    """The key ranges of the ranges path (module docstring), in key order, adjacent ones
    joined; None when even the first pinned key alone gives more than ``MAX_RANGES``.

    When all pins give too many, only the first few are used (no range is decided then)."""
    depth = _pinned_depth(plan, request)
    if not depth:
        return None
    hours = _hours(plan)
    pins = request.pins
    decided = request.pins_decide and depth == len(pins)
    # (start, stop, decided) tuples until the ranges are joined: a day of one series is
    # 25 ranges, and a KeyRange each, twice, cost more than the rest of the work
    ranges: list[tuple[bytes, bytes, bool]] = []
    for spec in plan.scans:
        base = spec.start[:-4]
        first, last = spec.start, spec.stop
        shape: list[tuple[bytes, bytes, bool]] | None = None
        for hour in hours:
            prefix = base + (hour & 0xFFFFFFFF).to_bytes(4, "big")
            found: list[tuple[bytes, bytes, bool]]
            if shape is not None:  # every hour's ranges are the first's under its prefix
                found = [(prefix + a, prefix + b, d) for a, b, d in shape]
            else:
                pinned: list[KeyRange] = []
                _pin_ranges(prefix, pins[:depth], 0, decided, pinned)
                shape = _under(prefix, pinned)
                found = [(r.start, r.stop, r.decided) for r in pinned]
            for start, stop, d in found:
                if start < first:
                    start = first
                stop = min(stop, last) if stop and last else stop or last
                if not stop or start < stop:
                    ranges.append((start, stop, d))
    joined: list[tuple[bytes, bytes, bool]] = []
    for r in ranges:
        if joined and joined[-1][2] == r[2] and joined[-1][1] == r[0]:
            joined[-1] = (joined[-1][0], r[1], r[2])
        else:
            joined.append(r)
    return [KeyRange(start, stop, d) for start, stop, d in joined]


def time_slices(spec: ScanSpec, start_s: int, end_s: int, pieces: int) -> list[ScanSpec]:
    """``spec`` cut into up to ``pieces`` scans of whole hours (its rows, split by base
    time); the start/stop keys are ``prefix + base time``."""
    hours = len(range(start_s - start_s % MAX_TIMESPAN, end_s, MAX_TIMESPAN))
    pieces = max(1, min(pieces, hours))
    if pieces == 1:
        return [spec]
    prefix = spec.start[:-4]
    first = start_s - start_s % MAX_TIMESPAN
    per = -(-hours // pieces)  # hours per slice, rounded up
    bounds = [first + i * per * MAX_TIMESPAN for i in range(pieces) if i * per < hours]
    specs = []
    for i, lo in enumerate(bounds):
        start = spec.start if i == 0 else prefix + (lo & 0xFFFFFFFF).to_bytes(4, "big")
        stop = (
            spec.stop
            if i == len(bounds) - 1
            else prefix + (bounds[i + 1] & 0xFFFFFFFF).to_bytes(4, "big")
        )
        specs.append(
            ScanSpec(start, stop, spec.families, spec.row_filter, spec.limit, spec.batch_rows)
        )
    return specs


async def read_rows(
    storage: Storage,
    table: str,
    layout: KeyLayout,
    plan: ScanPlan,
    path: str,
    request: ReadRequest,
    consume: Consumer,
    stats: ReadStats,
    probe: bool = False,
    work: BlockWork | None = None,
) -> None:
    """Read the plan's rows along ``path``, handing each block to ``consume`` (which may
    run while the next block is read). With ``probe`` (the head holds rows of the plan),
    nothing where storage tells that it holds no row of the plan's scans
    (:meth:`Storage.holds_rows`: rows all still in the head). ``work``: done on each
    scanned block where storage reads it, if it does (:data:`BlockWork`); the blocks of a
    ``getRows`` come without."""
    if probe and await _none_stored(storage, table, plan):
        return
    if path == MULTI_GET:
        keys = multi_get_keys(layout, plan, request.exact_series or ())
        await _get_all(storage, table, keys, plan, consume, stats)
        return
    if path == RANGES:
        await _read_ranges(storage, table, plan, request, consume, stats, work)
        return
    parallel = storage.parallel_reads()
    specs = _sliced(plan, parallel)
    if path == KEY_ONLY:
        specs = [_key_pass(spec, request) for spec in specs]
        found: list[list[bytes]] = [[] for _ in specs]

        async def keys_of(i: int) -> None:
            async with contextlib.aclosing(storage.scan_keys(table, specs[i], stats)) as batches:
                async for batch in batches:
                    found[i].extend(batch)

        await all_or_none([keys_of(i) for i in range(len(specs))])
        await _get_all(storage, table, [k for ks in found for k in ks], plan, consume, stats)
        return
    if len(specs) < parallel:
        per_slice = -(-parallel // len(specs))
        cut = await all_or_none([_key_ranges(storage, table, s, per_slice) for s in specs])
        specs = [s for pieces in cut for s in pieces]
    await all_or_none([_scan_one(storage, table, spec, consume, stats, work) for spec in specs])


async def _read_ranges(
    storage: Storage,
    table: str,
    plan: ScanPlan,
    request: ReadRequest,
    consume: Consumer,
    stats: ReadStats,
    work: BlockWork | None = None,
) -> None:
    """The ranges path: decided ranges scanned with their cells, the others by a key-only
    pass and a ``getRows`` of their matching keys, up to :meth:`Storage.parallel_reads` at
    once; where storage reads many ranges per call (:meth:`Storage.reads_ranges_at_once`:
    the embedded store), the decided ranges in one :meth:`Storage.scan_ranges` instead (a
    day of one series is 25 small ranges: a reader-thread hop each cost more than their
    rows)."""
    ranges = narrowed_ranges(plan, request)
    if ranges is None:  # forced (tests) where the planner would not take it
        ranges = [KeyRange(s.start, s.stop, False) for s in plan.scans]
    template = plan.scans[0]
    slots = asyncio.Semaphore(storage.parallel_reads())
    together: list[ScanSpec] = []
    if storage.reads_ranges_at_once():  # the embedded store: all decided ranges in one read
        families, row_filter = template.families, template.row_filter
        limit, batch_rows = template.limit, template.batch_rows
        together = [  # ScanSpec itself: dataclasses.replace checks every field, per range
            ScanSpec(r.start, r.stop, families, row_filter, limit, batch_rows)
            for r in ranges
            if r.decided
        ]
        ranges = [r for r in ranges if not r.decided]

    async def read_together() -> None:
        if together:
            await _consumed(storage.scan_ranges(table, together, stats, work), consume)

    async def read(r: KeyRange) -> None:
        spec = dataclasses.replace(template, start=r.start, stop=r.stop)
        if r.decided:
            async with slots:
                await _scan_one(storage, table, spec, consume, stats, work)
            return
        keys: list[bytes] = []
        async with slots:
            passed = storage.scan_keys(table, _key_pass(spec, request), stats)
            async with contextlib.aclosing(passed) as batches:
                async for batch in batches:
                    keys.extend(batch)
        if keys:
            await _get_all(storage, table, keys, plan, consume, stats)

    await all_or_none([read_together(), *(read(r) for r in ranges)])


async def _none_stored(storage: Storage, table: str, plan: ScanPlan) -> bool:
    """True when storage holds no row in any of the plan's scans' key ranges."""
    for spec in plan.scans:
        if await storage.holds_rows(table, spec.start, spec.stop):
            return False
    return True


def _key_pass(spec: ScanSpec, request: ReadRequest) -> ScanSpec:
    """The key-only pass of ``spec``: bigger batches (keys are small), and the pinned tag
    pairs given to storage as a pre-filter it may push down (HBase does)."""
    row_filter = spec.row_filter
    if row_filter is not None and request.pinned_pairs:
        row_filter = RowFilter(row_filter.regex, request.pinned_pairs)
    return dataclasses.replace(spec, row_filter=row_filter, batch_rows=KEY_BATCH_ROWS)


async def _key_ranges(storage: Storage, table: str, spec: ScanSpec, pieces: int) -> list[ScanSpec]:
    """``spec`` cut into up to ``pieces`` key ranges between its first and last row keys
    (evenly over the bytes where they differ), when storage can tell the last key cheaply.
    The ranges partition the scan exactly; only their balance depends on the guess."""
    first_spec = dataclasses.replace(spec, row_filter=None, limit=1, batch_rows=1)

    async def first_key() -> bytes | None:
        async with contextlib.aclosing(storage.scan_keys(table, first_spec)) as batches:
            async for batch in batches:
                return batch[0] if batch else None
        return None

    # both probes at once: two round trips in parallel rather than four in a row
    first, last = await all_or_none([first_key(), storage.last_key(table, spec.start, spec.stop)])
    if first is None or last is None or first >= last:
        return [spec]
    points = split_keys(first, last, pieces)
    bounds = [spec.start, *points, spec.stop]
    return [
        dataclasses.replace(spec, start=a, stop=b) for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def split_keys(first: bytes, last: bytes, pieces: int) -> list[bytes]:
    """Up to ``pieces - 1`` increasing keys strictly between ``first`` and ``last`` (first <
    last), spread evenly over the 8 bytes after their common prefix."""
    common = 0
    while common < min(len(first), len(last)) and first[common] == last[common]:
        common += 1
    lo = int.from_bytes(first[common : common + 8].ljust(8, b"\0"), "big")
    hi = int.from_bytes(last[common : common + 8].ljust(8, b"\0"), "big")
    prefix = first[:common]
    keys: list[bytes] = []
    for i in range(1, pieces):
        point = prefix + (lo + (hi - lo) * i // pieces).to_bytes(8, "big")
        if first < point < last and (not keys or keys[-1] < point):
            keys.append(point)
    return keys


def _sliced(plan: ScanPlan, parallel: int) -> list[ScanSpec]:
    per_bucket = max(1, parallel // max(1, len(plan.scans)))
    return [
        s for spec in plan.scans for s in time_slices(spec, plan.start_s, plan.end_s, per_bucket)
    ]


async def _get_all(
    storage: Storage,
    table: str,
    keys: Sequence[bytes],
    plan: ScanPlan,
    consume: Consumer,
    stats: ReadStats,
) -> None:
    families = plan.scans[0].families if plan.scans else ()
    chunks = [keys[i : i + GET_CHUNK] for i in range(0, len(keys), GET_CHUNK)]
    slots = asyncio.Semaphore(storage.parallel_reads())

    async def get(chunk: Sequence[bytes]) -> None:
        async with slots:
            block = await storage.get_blocks(table, chunk, families, stats)
        if len(block):
            await consume(block)

    await all_or_none([get(chunk) for chunk in chunks])


async def _scan_one(
    storage: Storage,
    table: str,
    spec: ScanSpec,
    consume: Consumer,
    stats: ReadStats,
    work: BlockWork | None = None,
) -> None:
    """One scan: each block is consumed while the next is read."""
    await _consumed(storage.scan_blocks(table, spec, stats, work), consume)


async def _consumed(read: AsyncGenerator[Block, None], consume: Consumer) -> None:
    """Every block of ``read``, each consumed while the next is read; a small block
    (``INLINE_WORK`` values or bytes: its decoding stays on the event loop anyway) or one
    whose work storage did (``prepared``) is consumed at once, without a task of its own
    and the loop's turn to start it."""
    pending: asyncio.Future[None] | None = None
    try:
        async with contextlib.aclosing(read) as blocks:
            async for block in blocks:
                if pending is not None:
                    await pending
                    pending = None
                if len(block.values) <= INLINE_WORK or block.prepared is not None:
                    await consume(block)  # (a prepared block's work is done)
                    continue
                pending = asyncio.ensure_future(consume(block))
        if pending is not None:
            await pending
            pending = None
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending


def sum_reads(reads: Sequence[ReadStats]) -> ReadStats:
    total = ReadStats()
    for r in reads:
        total.rows += r.rows
        total.cells += r.cells
        total.key_rows += r.key_rows
        total.wire_bytes += r.wire_bytes
        total.decode_s += r.decode_s
        total.calls += r.calls
    total.path = ",".join(r.path for r in reads if r.path)
    return total


def read_stats_json(stats: ReadStats) -> dict[str, object]:
    """``showStats`` / ``showSummary`` entries for what was read: OpenTSDB's QueryStats
    names where it has one (rowsFromStorage, columnsFromStorage, bytesFromStorage), tsd's
    own for the rest (keyOnlyRows: rows of a key-only pass; decodeTime: ms of CPU turning
    reply bytes and cells into points; readPath)."""
    out: dict[str, object] = {
        "rowsFromStorage": stats.rows,
        "columnsFromStorage": stats.cells,
        "bytesFromStorage": stats.wire_bytes,
        "keyOnlyRows": stats.key_rows,
        "decodeTime": stats.decode_s * 1000,
    }
    if stats.path:
        out["readPath"] = stats.path
    return out
