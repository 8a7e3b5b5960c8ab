"""The ingest service: the one way data points enter the write path (architecture §1.2a).

Telnet (in the daemon or in a worker process), both /api/put modes, Prometheus'
remote write and ``tsdb import`` are loops of frame -> parse -> ingest -> reply;
everything between a parsed point and the :class:`~tsd.write.batch_writer.Writer` is here, once.
The shape is Prometheus' ``storage.Appender``: one way in for a point,
:meth:`IngestSession.put`, and a :data:`SeriesRef` only a shortcut past its lookup. An
:class:`IngestSession` takes points three ways, and no other:

* :meth:`IngestSession.put`: one parsed point of any series;
* :meth:`IngestSession.append_run`: points of series resolved before, by ref, in bulk;
* :meth:`IngestSession.append_part`: points a telnet connection encoded ahead
  (:class:`~tsd.wal.record.EncodedPart`), whether in the daemon or a worker process.

The rest of its surface is flow control (:meth:`~IngestSession.room`,
:meth:`~IngestSession.wait_room`, :meth:`~IngestSession.wait_lookup`) and settling
(:meth:`~IngestSession.settle`, :meth:`~IngestSession.stored`).

* Refs. :class:`IngestService` keeps the ``(metric, tags) -> SeriesRef`` map (bounded by
  ``max_series``, the least recently used evicted: :mod:`tsd.recent`; keyed by one str
  per series, :func:`series_name_key`) and
  hands protocols :class:`RefCache` maps for their own keys of a series (a telnet line's
  raw metric and tag words, an /api/put element's JSON text). A series resolved for
  points that all carry a protocol key is kept under those keys only, not by name too
  (one entry per series: :meth:`IngestService.resolve_many`'s ``remember``). write/
  never looks inside those keys; a protocol only remembers a key for a point whose full
  parse it accepted, so the key always stands for the same series.
  ``dropcaches`` clears them all (:meth:`IngestService.drop_caches`).
* Misses. A point of a series not resolved yet needs its UIDs looked up or assigned,
  which awaits storage. :meth:`IngestSession.put` queues it without suspending: misses
  of one loop turn form one batch, up to ``window`` batches of one session run at once
  (1 keeps UID assignment in arrival order, as OpenTSDB hands them out), and points of
  known series arriving meanwhile are buffered at once. A caller that must answer only
  after every earlier point (telnet's commands, a put reply) awaits
  :meth:`IngestSession.settle`.
* Back-pressure. :meth:`IngestSession.room` is how many points the writer takes before it
  is full; :meth:`IngestSession.wait_room` waits until it drains. Protocols stop reading
  meanwhile, so a slow store slows its clients instead of growing the heap.
* Outcomes. A point the write path does not take is reported once to the session's
  ``on_refused(tag, point, Refused)`` with a :class:`RefusalKind` (OpenTSDB's "unknown
  metric" or a storage error) and the error's message; each adapter words it. A storage
  write that fails later is reported once per batch to ``on_batch_failed``, with how many
  of the session's points that batch held. With
  ``track_acks`` (``/api/put?sync``) :meth:`IngestSession.stored` waits until storage
  holds every point and tells which did not make it.
"""

from __future__ import annotations

import asyncio
import enum
import gc
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeAlias, TypeVar, cast, overload

from tsd.codec import KeyLayout, SeriesKey, make_series_key
from tsd.codec.qualifier import encode_points_into
from tsd.codec.rowkey import series_keys, series_name_key
from tsd.config import StorageConfig
from tsd.data_points import DataPoint, Tags
from tsd.errors import (
    NameTooLong,
    NoSuchUniqueName,
    StorageRefused,
    StorageUnavailable,
    TsdError,
)
from tsd.log import WRITER, get_logger
from tsd.recent import RecentMap
from tsd.stats import Counter, StatsRegistry
from tsd.uid.service import UidService
from tsd.wal.record import EncodedPart, seal_part
from tsd.write.batch_writer import Ack, Writer
from tsd.write.cell_store import CellPoint, CellStore

log = get_logger(WRITER)

#: The handle of a resolved series (its row-key template). Opaque to protocols: they
#: keep it in a :class:`RefCache` and hand it back to :meth:`IngestSession.append_run`.
SeriesRef: TypeAlias = SeriesKey
#: A point of a resolved series, as the bulk appenders take it.
RefPoint: TypeAlias = tuple[SeriesRef, int, int | float]

#: Series refs kept by default (each is a row-key template of about 200 bytes, with its
#: key and the protocols' keys about 1 KB): tsd.core.series_cache.size.
DEFAULT_MAX_SERIES = 5_000_000

T = TypeVar("T")

#: Misses resolved in one :meth:`IngestService.resolve_many` at most: a burst of new series
#: costs a few storage round trips per 4,096 (the UID batches' size) rather than per series.
MAX_MISS_BATCH = 4096

#: a parsed point's metric and tags (as map takes them: a run's at C speed)
_metric = attrgetter("metric")
_tags = attrgetter("tags")
_timestamp = attrgetter("timestamp")
_value = attrgetter("value")

#: A series' key in the ingest service's refs (:func:`series_name_key`).
NameKey: TypeAlias = "str | tuple[str, Tags]"


@dataclass(slots=True)
class _Misses(Generic[T]):
    """Points of series not resolved yet, one loop turn's (a batch), as columns (no object
    per point: a burst's batch is thousands): the points' fields, the caller's tags, their
    alias keys, and their series' name keys (computed once, by :meth:`IngestSession.put`'s
    lookup)."""

    metrics: list[str] = field(default_factory=list)
    tags_list: list[Tags] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    values: list[int | float] = field(default_factory=list)
    tags: list[T | None] = field(default_factory=list)
    #: each point's one protocol key while every point has exactly one (telnet's line
    #: key: no tuple per point), else None and ...
    keys: list[Hashable] | None = field(default_factory=list)
    #: ... each point's aliases
    aliases: list[tuple[Hashable, ...]] | None = None
    names: list[NameKey] = field(default_factory=list)

    def add_aliases(self, aliases: tuple[Hashable, ...]) -> None:
        """The next point's aliases."""
        keys = self.keys
        if keys is not None:
            if len(aliases) == 1:
                keys.append(aliases[0])
                return
            self.aliases, self.keys = list(zip(keys)), None
        assert self.aliases is not None
        self.aliases.append(aliases)

    def add_keys(self, keys: Sequence[Hashable]) -> None:
        """The next points' aliases: one key each."""
        if self.keys is not None:
            self.keys += keys
        else:
            assert self.aliases is not None
            self.aliases += zip(keys)  # a 1-tuple per point

    def every_aliased(self) -> bool:
        """Whether every point has an alias."""
        return self.keys is not None or all(cast(list[tuple[Hashable, ...]], self.aliases))

    def alias_tuples(self) -> list[tuple[Hashable, ...]]:
        """Each point's aliases."""
        if self.keys is not None:
            return list(zip(self.keys))
        return cast(list[tuple[Hashable, ...]], self.aliases)

    def point(self, at: int) -> DataPoint:
        """Miss ``at``'s point (made for a refusal's report only)."""
        return DataPoint(self.metrics[at], self.timestamps[at], self.values[at], self.tags_list[at])


#: ``on_new_series(refs)``: the row-key templates of series that just got their refs
NewSeriesHook: TypeAlias = Callable[[Sequence[SeriesKey]], None]


class Put(enum.Enum):
    """What :meth:`IngestSession.put` did with a point."""

    #: its series is resolved: the point is in the writer's batch
    BUFFERED = "buffered"
    #: queued for its series' lookup (:meth:`IngestSession.settle` waits for it)
    QUEUED = "queued"
    #: not taken: every lookup of the session's window is busy
    #: (:meth:`IngestSession.wait_lookup`, then put it again)
    BUSY = "busy"


class RefusalKind(enum.Enum):
    """Why a point was not taken, in OpenTSDB's classes (PutDataPointRpc's errbacks)."""

    #: a name does not exist and may not be created (NoSuchUniqueName)
    UNKNOWN_METRIC = "unknown_metric"
    #: UID assignment or storage failed, or the daemon is shutting down
    STORAGE = "storage"
    #: a name the store cannot hold (NameTooLong: OpenTSDB's IllegalArgumentException)
    ILLEGAL_ARGUMENT = "illegal_argument"


@dataclass(frozen=True, slots=True)
class Refused:
    """A point the write path did not take: its class and the error's message."""

    kind: RefusalKind
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> Refused:
        if isinstance(exc, NoSuchUniqueName):
            return cls(RefusalKind.UNKNOWN_METRIC, exc.message)
        if isinstance(exc, NameTooLong):
            return cls(RefusalKind.ILLEGAL_ARGUMENT, exc.message)
        if isinstance(exc, TsdError):
            return cls(RefusalKind.STORAGE, exc.message)
        return cls(RefusalKind.STORAGE, f"Unexpected exception: {exc}")


class SeriesCache(Protocol):
    """What a protocol's ref cache offers (:class:`RefCache`, or telnet's compact table:
    tsd.protocol.ref_table): RecentMap's surface."""

    @property
    def max_entries(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    def get(self, key: Any, /) -> SeriesRef | None: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def entries(self) -> int: ...
    def remember(self, key: Any, ref: SeriesRef, /) -> None: ...
    def remember_many(self, keys: Sequence[Any], refs: Sequence[SeriesRef], /) -> None: ...
    def recall(self, key: Any, /) -> SeriesRef | None: ...
    def lookup(self, key: Any, /) -> SeriesRef | None: ...
    def clear(self) -> None: ...


_Cache = TypeVar("_Cache", bound=SeriesCache)


class RefCache(RecentMap[Hashable, SeriesRef]):
    """A protocol's own keys of resolved series: a dict, so hot loops can ``get`` from
    it at C speed, bounded by ``max_entries`` (tsd.core.series_cache.size) with the least
    recently used evicted (:class:`~tsd.recent.RecentMap`: a miss's slow path,
    :meth:`IngestSession.put`, recalls an entry of the old generation first)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class LoggedPart:
    """Points of known series encoded ahead as a part of a log record (its payload and
    the same rows as runs) in ``cells`` cells, for a durable session to log as a record
    of their own (remote write: a request's)."""

    part: EncodedPart
    cells: int

    @property
    def points(self) -> int:
        return self.part.points


@dataclass(frozen=True, slots=True)
class SyncOutcome(Generic[T]):
    """What :meth:`IngestSession.stored` found: the number of points stored, and the
    others in the order they were appended, each with why (None: not stored in time)."""

    stored: int
    unstored: list[tuple[T, Refused | None]]
    #: the error when storage refused the writes (full, read-only), for the reply's status
    refusal: StorageRefused | None = None


class IngestService:
    """The daemon's (or an import's) one ingest service over one Writer."""

    def __init__(
        self,
        writer: Writer,
        uids: UidService,
        cfg: StorageConfig,
        *,
        max_series: int = DEFAULT_MAX_SERIES,
        on_new_series: NewSeriesHook | None = None,
        registry: StatsRegistry | None = None,
        cells: CellStore | None = None,
        new_series_room: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``on_new_series(refs)`` is called (synchronously) with the row-key templates of
        the series that just got their refs (a burst's at once), i.e. once per series
        until its ref is evicted: meta tracking
        (tsd.meta.tracking.MetaTracker.on_new_series_many) hangs there, and
        ``new_series_room`` (its ``wait_room``) is awaited before new series are resolved.
        ``cells``: where rollups and histograms go (None: ``tsdb import``, which takes
        neither)."""
        self.writer = writer
        self.uids = uids
        self.cells = cells
        self._layout = KeyLayout.from_storage_config(cfg)
        self._max_series = max_series
        self._on_new_series = on_new_series
        self._new_series_room = new_series_room
        self._registry = registry or StatsRegistry()
        #: refs by :func:`series_name_key` (one str per series, not a tuple of tuples)
        self._refs: RecentMap[str | tuple[str, Tags], SeriesRef] = RecentMap(max_series)
        self._caches: dict[str, SeriesCache] = {}
        self._counters: dict[str, tuple[Counter, Counter]] = {}
        self._drop_listeners: list[Callable[[], None]] = []
        self._registry.gauge("ingest.series_cached", self.cached_entries)
        self._registry.gauge("ingest.series_evicted", self._evictions, monotonic=True)

    async def resolve(self, metric: str, tags: Tags) -> SeriesRef:
        """The ref of a series, resolving (maybe assigning) its UIDs the first time.

        Raises NoSuchUniqueName (auto-create off), UidAssignmentError or StorageError.
        """
        key = series_name_key(metric, tags)
        ref = self._refs.lookup(key)
        if ref is None:
            if self._new_series_room is not None:
                await self._new_series_room()
            metric_uid, pairs = await self.uids.resolve_for_write(metric, tags)
            ref = self._refs.get(key)  # resolved meanwhile by another caller
            if ref is None:
                ref = make_series_key(self._layout, metric_uid, pairs)
                self._made([ref], [key], True)
        return ref

    async def resolve_many(
        self, keys: Sequence[tuple[str, Tags]], *, remember: bool = True
    ) -> list[SeriesRef | TsdError]:
        """The refs of many series (``(metric, tags)`` each), in order:
        :meth:`resolve_columns` of them."""
        return await self.resolve_columns(
            [metric for metric, _ in keys],
            [tags for _, tags in keys],
            [series_name_key(metric, tags) for metric, tags in keys],
            remember=remember,
        )

    async def resolve_columns(
        self,
        metrics: Sequence[str],
        tags_list: Sequence[Tags],
        names: Sequence[NameKey],
        *,
        remember: bool = True,
    ) -> list[SeriesRef | TsdError]:
        """The refs of many series (``metrics[i]`` with ``tags_list[i]``, whose
        :func:`series_name_key` is ``names[i]``), in order: those not resolved before go
        to one :meth:`UidService.resolve_names` (a few storage round trips for a whole
        burst of new series, new names numbered in the order they first appear), and
        their row-key templates are made at once (:func:`~tsd.codec.rowkey.series_keys`:
        one C pass, no Python step per series). A series a name of which failed
        (auto-create refused it: NoSuchUniqueName; too long; the store failed) gets that
        error, alone.

        ``remember`` False: new refs are not kept under their names here (the caller keeps
        each under its protocol's key, a :class:`RefCache`: one entry per series, not two).
        A point of such a series put later under another key (spelled otherwise, or by
        another protocol) is resolved again from the UID caches, without storage, and
        gets a ref equal to the first."""
        refs = self._refs
        found: list[SeriesRef | None] = (
            [refs.lookup(name) for name in names] if refs.entries() else []
        )
        # the series to resolve, once each, by their name keys: name -> first position
        missing: dict[NameKey, int] = {}
        if not found and len(dict.fromkeys(names)) == len(names):  # a burst: all new
            missing = dict(zip(names, range(len(names)), strict=True))
        else:
            for at, name in enumerate(names):
                if (not found or found[at] is None) and name not in missing:
                    missing[name] = at
            if not missing:
                return cast(list[SeriesRef | TsdError], found)
            metrics = [metrics[at] for at in missing.values()]
            tags_list = [tags_list[at] for at in missing.values()]
        if self._new_series_room is not None:  # meta tracking's queue is bounded too
            await self._new_series_room()
        resolved = await self.uids.resolve_names(metrics, tags_list)
        made = series_keys(
            self._layout,
            metrics,
            tags_list,
            resolved.metric_uids,
            resolved.key_uids,
            resolved.value_uids,
        )
        new = list(filter(None, made))  # SeriesKeys are true: the Nones left out
        results = cast(list[SeriesRef | TsdError], made)
        new_names: Sequence[NameKey] = list(missing)
        if len(new) < len(made) or refs:
            # not all made at once (a name failed, a salted layout), or a series may have
            # been resolved meanwhile by another batch: series by series
            results, new, new_names = [], [], []
            layout = self._layout
            for name, metric, tags, ref in zip(missing, metrics, tags_list, made, strict=True):
                known = refs.get(name)
                if known is not None:
                    results.append(known)
                    continue
                if ref is None:
                    uids = resolved.result(metric, tags)
                    if isinstance(uids, TsdError):
                        results.append(uids)
                        continue
                    ref = make_series_key(layout, *uids)
                results.append(ref)
                new.append(ref)
                new_names.append(name)
        self._made(new, new_names, remember)
        if len(missing) == len(names):  # every series new and distinct (a burst): in order
            return results
        by_name = dict(zip(missing, results, strict=True))
        if not found:
            return [by_name[name] for name in names]
        return [by_name[n] if got is None else got for n, got in zip(names, found, strict=True)]

    def _made(self, new: list[SeriesRef], names: Sequence[NameKey], remember: bool) -> None:
        """Series that just got their refs (``new[i]`` of ``names[i]``): told to meta
        tracking, and kept by name when ``remember`` (at most ``max_series``, the least
        recently used evicted: :class:`~tsd.recent.RecentMap`)."""
        if not new:
            return
        if self._on_new_series is not None:
            self._on_new_series(new)
        if remember:
            self._refs.remember_many(names, new)

    def cached(self, metric: str, tags: Tags) -> SeriesRef | None:
        """The ref of a series resolved before, without suspending; None on a miss."""
        return self._refs.lookup(series_name_key(metric, tags))

    def cached_entries(self) -> int:
        """Series refs held, every map together (each bounded by
        ``tsd.core.series_cache.size``): the ``ingest.series_cached`` gauge."""
        return self._refs.entries() + sum(c.entries() for c in self._caches.values())

    def _evictions(self) -> int:
        return self._refs.evictions + sum(c.evictions for c in self._caches.values())

    def cached_name(self, name: NameKey) -> SeriesRef | None:
        """:meth:`cached` by the series' :func:`series_name_key`."""
        return self._refs.lookup(name)

    def cached_names(self, names: Sequence[NameKey]) -> list[SeriesRef | None]:
        """:meth:`cached_name` of each of ``names``: at C speed unless the refs have an
        old generation to recall a miss from."""
        refs = self._refs
        if refs.entries() > len(refs):
            return [refs.lookup(name) for name in names]
        if not refs:  # none kept by name (telnet keeps its series by line key only)
            return [None] * len(names)
        return list(map(refs.get, names))

    @overload
    def ref_cache(self, name: str) -> RefCache: ...
    @overload
    def ref_cache(self, name: str, make: Callable[[int], _Cache]) -> _Cache: ...
    def ref_cache(self, name: str, make: Callable[[int], SeriesCache] = RefCache) -> SeriesCache:
        """The cache of one protocol's keys (one per name, shared by its connections),
        made by ``make(max_series)`` the first time (telnet's: its compact table,
        tsd.protocol.ref_table)."""
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = make(self._max_series)
        return cache

    def drop_caches(self) -> None:
        """Forget every ref (``dropcaches``, with the UID caches), and tell those who
        learnt refs from this service (:meth:`on_drop_caches`: telnet workers)."""
        self._refs.clear()
        for cache in self._caches.values():
            cache.clear()
        for listener in self._drop_listeners:
            listener()

    def on_drop_caches(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever :meth:`drop_caches` runs."""
        self._drop_listeners.append(listener)

    def session(
        self,
        *,
        cache: SeriesCache | None = None,
        window: int = 1,
        on_refused: Callable[[T | None, DataPoint | None, Refused], None] | None = None,
        on_batch_failed: Callable[[TsdError, int], None] | None = None,
        track_acks: bool = False,
        protocol: str | None = None,
        durable: bool = False,
    ) -> IngestSession[T]:
        """A session for one connection, request or import (see :class:`IngestSession`).
        With ``protocol`` its points and refusals count into tsd's ``ingest.points`` and
        ``ingest.errors`` counters of that protocol (adapters add their parse errors)."""
        counters = None
        if protocol is not None:
            counters = self.counters(protocol)
        return IngestSession(
            self,
            cache=cache,
            window=window,
            on_refused=on_refused,
            on_batch_failed=on_batch_failed,
            track_acks=track_acks,
            counters=counters,
            durable=durable,
        )

    def counters(self, protocol: str) -> tuple[Counter, Counter]:
        """``ingest.points`` and ``ingest.errors`` of one protocol (tsd's own counters),
        looked up once (a session a request: two lookups cost about 10 us)."""
        counters = self._counters.get(protocol)
        if counters is None:
            registry = self._registry
            counters = self._counters[protocol] = (
                registry.counter("ingest.points", protocol=protocol),
                registry.counter("ingest.errors", protocol=protocol),
            )
        return counters


@dataclass(slots=True)
class _Tracked(Generic[T]):
    """Points of one batch (sync): the batch's ack and the points' tags."""

    ack: Ack
    tags: list[T]


@dataclass(slots=True, eq=False)
class IngestSession(Generic[T]):
    """The appends of one client, in its order. ``T`` is the caller's tag of a point (a
    body index, nothing for telnet): it comes back with the point's outcome.

    ``cache``: where :meth:`put` remembers a point's extra keys
    (``aliases``) once its series is resolved.
    """

    service: IngestService
    cache: SeriesCache | None = None
    window: int = 1
    on_refused: Callable[[T | None, DataPoint | None, Refused], None] | None = None
    #: (error, points of this session in the failed batch), once per failed batch
    on_batch_failed: Callable[[TsdError, int], None] | None = None
    track_acks: bool = False
    #: (points taken, points refused) counters, or None
    counters: tuple[Counter, Counter] | None = None
    #: set when storage refused points up front (HBase's spool full), and how many
    refusal: StorageRefused | None = None
    refused_writes: int = 0
    #: :meth:`append_run`'s points (and :meth:`append_part`'s :class:`LoggedPart`) are
    #: stored once the write-ahead log holds them
    #: (written and fsynced) where the writer logs points (the embedded head), and join
    #: the next batch as logged: :meth:`stored` then waits for no batch (remote write,
    #: where a batch per request would cost a pass over the head per request). Points
    #: :meth:`put` queues for a lookup still wait for their batch, and are read as soon as
    #: stored (a new series' first points are seen at once, as before it had a ref).
    durable: bool = False
    _pending: set[asyncio.Task[None]] = field(default_factory=set)
    #: the log appends of a durable session, made by :meth:`settle` in the caller's task
    _unlogged: list[tuple[LoggedPart, Sequence[T] | None, Ack, bool]] = field(default_factory=list)
    #: the misses of this loop turn, not yet handed to :meth:`IngestService.resolve_many`
    _collecting: _Misses[T] | None = None
    _last_ack: Ack | None = None
    #: points of this session in ``_last_ack`` (a cell its done callback reads)
    _last_count: list[int] = field(default_factory=lambda: [0])
    _tracked: list[_Tracked[T]] = field(default_factory=list)

    # -- back-pressure ------------------------------------------------------------------------

    def room(self) -> int:
        """Points the writer takes before it is full (0 when it is)."""
        return self.service.writer.room()

    def is_full(self) -> bool:
        return self.service.writer.is_full()

    async def wait_room(self) -> None:
        """Return once the writer takes points again (at once when it does)."""
        writer = self.service.writer
        if writer.is_full():
            await writer.wait_writable()

    async def wait_lookup(self) -> None:
        """Return once a lookup of the session's window is free (at once when one is):
        after :meth:`put` answered :attr:`Put.BUSY`, the same point is then taken."""
        pending = self._pending
        while len(pending) >= self.window:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    @property
    def logs_rows(self) -> bool:
        """Whether points appended here are logged as rows of their own and acknowledged
        once logged: a :attr:`durable` session whose writer logs points itself."""
        return self.durable and self.service.writer.logs_points

    # -- the ways in --------------------------------------------------------------------------

    def append_run(self, points: list[RefPoint], tags: Sequence[T] | None = None) -> None:
        """Buffer points of resolved series, in order, without suspending (the hot path:
        a ref is only a shortcut past :meth:`put`'s lookup).

        Timestamps and values must be valid, as the protocol parsers type them. Callers
        that honour back-pressure pass at most :meth:`room` points. ``tags`` (one per
        point) come back with refusals and sync outcomes. In a :attr:`durable` session
        the points are logged first (:meth:`settle` waits for it).
        """
        if self.logs_rows:
            rows: dict[bytes, dict[bytes, bytes]] = {}
            cells = encode_points_into(rows, points)
            self._append_logged(LoggedPart(seal_part(rows, len(points)), cells), tags)
        else:
            self._append_buffered(points, tags)

    def _append_buffered(self, points: list[RefPoint], tags: Sequence[T] | None) -> None:
        """:meth:`append_run` into the writer's current batch."""
        try:
            ack = self.service.writer.add_points(points)
        except TsdError as exc:  # shutting down, or HBase's spool full: all are refused
            if not self._track_refusal(exc, tags, len(points)):
                self._refuse_run(tags, len(points), Refused.of(exc))
            return
        if self.counters is not None:
            self.counters[0].value += len(points)
        self._note_ack(ack, tags, len(points))

    def append_part(self, part: EncodedPart | LoggedPart, tags: Sequence[T] | None = None) -> None:
        """Buffer points encoded ahead, without suspending: a telnet connection's part (a
        log record's payload and its rows as runs: :meth:`Writer.add_part`), or, in a
        :attr:`durable` session whose writer logs points, a request's
        :class:`LoggedPart` (logged first as a record of its own, by :meth:`settle`,
        which the caller awaits before it acknowledges them). Refusals are reported for
        each point, with its tag (``tags``: one per point, or None)."""
        if isinstance(part, LoggedPart):
            if not self.logs_rows:
                raise ValueError("a logged part goes to a durable session whose writer logs")
            self._append_logged(part, tags)
            return
        points = part.points
        try:
            ack = self.service.writer.add_part(part)
        except TsdError as exc:  # shutting down, or HBase's spool full
            if not self._track_refusal(exc, tags, points):
                self._refuse_run(tags, points, Refused.of(exc))
            return
        if self.counters is not None:
            self.counters[0].value += points
        self._note_ack(ack, tags, points)

    def put(self, point: DataPoint, tag: T | None = None, aliases: Iterable[Hashable] = ()) -> Put:
        """Take one parsed point of any series, without suspending, remembering
        ``aliases`` (the protocol's keys of its series) once the series is resolved.

        A point of a resolved series is buffered (:attr:`Put.BUFFERED`). Any other is
        queued for its series' lookup (:attr:`Put.QUEUED`): misses put in the same turn
        of the event loop (the lines of one socket read, the elements of one body) join
        one batch, resolved by one :meth:`IngestService.resolve_many`, and up to
        ``window`` batches run at once; the outcome goes to ``on_refused``, and
        :meth:`settle` waits for every lookup. :attr:`Put.BUSY`: the point needs a new
        batch and ``window`` are running: nothing was taken; await :meth:`wait_lookup`
        and put it again."""
        ref = None
        if aliases and self.cache is not None:  # a key evicted to the old generation?
            aliases = tuple(aliases)
            for alias in aliases:
                if (ref := self.cache.recall(alias)) is not None:
                    break
        name = series_name_key(point.metric, point.tags)
        if ref is None:
            ref = self.service.cached_name(name)
        if ref is not None:
            if aliases:
                self._remember(aliases, ref)
            self._add_one(ref, point, tag)
            return Put.BUFFERED
        batch = self._collecting
        if batch is None or len(batch.names) >= MAX_MISS_BATCH:
            pending = self._pending
            if len(pending) >= self.window:
                return Put.BUSY
            batch = self._new_batch()
        batch.metrics.append(point.metric)
        batch.tags_list.append(point.tags)
        batch.timestamps.append(point.timestamp)
        batch.values.append(point.value)
        batch.tags.append(tag)
        batch.add_aliases(aliases if type(aliases) is tuple else tuple(aliases))
        batch.names.append(name)
        return Put.QUEUED

    def put_run(
        self,
        metrics: Sequence[str],
        tags_list: Sequence[Tags],
        timestamps: Sequence[int],
        values: Sequence[int | float],
        keys: Sequence[Hashable],
    ) -> int:
        """:meth:`put` of each point given as columns (point ``i``: ``metrics[i]``,
        ``timestamps[i]``, ``values[i]``, ``tags_list[i]``) with its one protocol key
        (``put(point, None, (keys[i],))``), in order, until one would answer
        :attr:`Put.BUSY`: how many were taken. A run none of whose series is resolved (a
        burst of new series' lines: telnet's :class:`~tsd.protocol.telnet_frame.NewPuts`)
        joins the miss batches as columns, a slice at a time, without an object or a
        Python step per point; any other run goes point by point."""
        names = list(map(series_name_key, metrics, tags_list))
        cache = self.cache
        if (cache is not None and cache.entries() > len(cache)) or any(
            self.service.cached_names(names)
        ):  # a key to recall from the cache's old generation, or a series resolved
            put = self.put
            for taken, point in enumerate(map(DataPoint, metrics, timestamps, values, tags_list)):
                if put(point, None, (keys[taken],)) is Put.BUSY:
                    return taken
            return len(names)
        taken, count = 0, len(names)
        pending = self._pending
        while taken < count:
            batch = self._collecting
            if batch is None or len(batch.names) >= MAX_MISS_BATCH:
                if len(pending) >= self.window:
                    break
                batch = self._new_batch()
            end = min(count, taken + MAX_MISS_BATCH - len(batch.names))
            batch.metrics += metrics[taken:end]
            batch.tags_list += tags_list[taken:end]
            batch.timestamps += timestamps[taken:end]
            batch.values += values[taken:end]
            batch.tags += repeat(None, end - taken)
            batch.add_keys(keys[taken:end])
            batch.names += names[taken:end]
            taken = end
        return taken

    def _new_batch(self) -> _Misses[T]:
        """A new batch of misses, collecting this loop turn's, and its task."""
        batch = self._collecting = _Misses()
        task = asyncio.get_running_loop().create_task(self._resolve_batch(batch))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return batch

    async def put_cell(self, point: CellPoint) -> None:
        """Store one point as a cell of its own, straight to storage (a rollup, a
        pre-aggregate or a histogram: OpenTSDB writes each with a put of its own, outside
        the data points' batches and log). Raises what :meth:`CellStore.store` raises."""
        cells = self.service.cells
        if cells is None:
            raise StorageUnavailable("this write path stores no rollups or histograms")
        await cells.store(point)

    def has_pending(self) -> bool:
        """True while lookups of this session are running."""
        return bool(self._pending)

    async def settle(self) -> None:
        """Wait until every point appended so far is buffered or refused: a durable
        session's logged parts are logged here, one after the other, in the caller's own
        task (a task of their own and the wait for it cost about 20 us a request)."""
        while self._unlogged:
            logged, tags, ack, tracked = self._unlogged.pop(0)
            await self._log_part(logged, tags, ack, tracked)
        while self._pending:
            await asyncio.wait(self._pending)

    # -- sync ---------------------------------------------------------------------------------

    async def stored(self, timeout_s: float | None) -> SyncOutcome[T]:
        """After :meth:`settle` (``track_acks`` only): write now, wait until storage
        holds every point or ``timeout_s`` passes (on HBase, during an outage, at most
        :meth:`Writer.sync_wait_s`), and sort the points by outcome."""
        if self._unlogged:  # settle was not awaited: the parts are logged all the same
            await self.settle()
        writer = self.service.writer
        pending = {tracked.ack for tracked in self._tracked if not tracked.ack.done()}
        if pending:
            writer.flush_soon()
            timeout_s = writer.sync_wait_s(timeout_s)
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.wait(pending)
            except TimeoutError:
                pass
        stored = 0
        refusal: StorageRefused | None = None
        unstored: list[tuple[T, Refused | None]] = []
        for tracked in self._tracked:
            ack = tracked.ack
            if not ack.done():
                unstored.extend((tag, None) for tag in tracked.tags)
            elif (exc := ack.exception()) is None:
                stored += len(tracked.tags)
            else:
                if isinstance(exc, StorageRefused):
                    refusal = exc
                refused = Refused.of(exc)
                unstored.extend((tag, refused) for tag in tracked.tags)
        return SyncOutcome(stored, unstored, refusal)

    # -- internals ----------------------------------------------------------------------------

    def _append_logged(self, logged: LoggedPart, tags: Sequence[T] | None) -> None:
        """Points of a durable session: their log record is written by :meth:`settle`
        (:meth:`Writer.add_part_logged`), whose outcome is their ack."""
        ack: Ack = asyncio.get_running_loop().create_future()
        tracked = self.track_acks and tags is not None
        if tracked:
            assert tags is not None
            self._tracked.append(_Tracked(ack, list(tags)))
        self._unlogged.append((logged, tags, ack, tracked))

    async def _log_part(
        self, logged: LoggedPart, tags: Sequence[T] | None, ack: Ack, tracked: bool
    ) -> None:
        try:
            await self.service.writer.add_part_logged(logged.part, logged.cells)
        except Exception as exc:
            if not isinstance(exc, TsdError):  # a bug: refuse the points, never lose them
                log.exception("ingest.log_append_crashed", points=logged.points)
            ack.set_exception(exc)
            ack.exception()  # seen: the session reports it
            if not tracked:
                self._refuse_run(tags, logged.points, Refused.of(exc))
            return
        if self.counters is not None:
            self.counters[0].value += logged.points
        ack.set_result(None)

    async def _resolve_batch(self, batch: _Misses[T]) -> None:
        # The task starts on the loop's next turn: the batch took that turn's misses.
        if self._collecting is batch:
            self._collecting = None
        count = len(batch.names)
        try:
            # Series whose every miss here has a protocol key are kept under those keys
            # only (telnet's lines, /api/put's elements): one map entry per series.
            refs = await self.service.resolve_columns(
                batch.metrics,
                batch.tags_list,
                batch.names,
                remember=self.cache is None or not batch.every_aliased(),
            )
        except Exception as exc:
            if not isinstance(exc, TsdError):  # a bug: refuse the points, never lose them
                log.exception("ingest.resolve_crashed", points=count)
            refused = Refused.of(exc)
            for at, tag in enumerate(batch.tags):
                self._refuse(tag, batch.point(at), refused)
            return
        if count <= self.room() and set(map(type, refs)) == {SeriesKey}:
            self._append_resolved(batch, cast(list[SeriesRef], refs))
            return
        # Runs of resolved points go to the writer in one call each, as much as it has
        # room for at a time.
        run: list[RefPoint] = []
        run_tags: list[T | None] = []
        room = self.room()
        every = zip(batch.tags, batch.alias_tuples(), refs, strict=True)
        for at, (tag, aliases, ref) in enumerate(every):
            if isinstance(ref, TsdError):
                self._append_run(run, run_tags)
                self._refuse(tag, batch.point(at), Refused.of(ref))
                continue
            if aliases:
                self._remember(aliases, ref)
            if room <= 0:
                self._append_run(run, run_tags)
                await self.wait_room()
                room = max(1, self.room())
            run.append((ref, batch.timestamps[at], batch.values[at]))
            run_tags.append(tag)
            room -= 1
        self._append_run(run, run_tags)

    def _append_resolved(self, batch: _Misses[T], refs: list[SeriesRef]) -> None:
        """A batch whose every series is resolved and for which the writer has room (a
        burst of new series' usual case): its aliases remembered and its points handed
        over as one run, a few comprehensions rather than a loop of Python steps. The
        cyclic collector is held off meanwhile: the run's tuples hold no cycles, and a
        young collection here would walk the whole batch (parsed points, their tags)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            cache = self.cache
            if cache is not None and batch.keys is not None:
                # one key a point (telnet's line key): the burst's refs in one call
                cache.remember_many(batch.keys, refs)
            elif cache is not None:
                remember = cache.remember
                for keys, ref in zip(batch.alias_tuples(), refs, strict=True):
                    for alias in keys:
                        remember(alias, ref)
            # (ref, timestamp, value) per point, zipped at C speed
            run = list(zip(refs, batch.timestamps, batch.values, strict=True))
            tags = batch.tags
            kept = None if tags.count(None) == len(tags) else cast(list[T], tags)
            self._append_buffered(run, kept)
        finally:
            if collecting:
                gc.enable()

    def _append_run(self, run: list[RefPoint], tags: list[T | None]) -> None:
        """Hand ``run`` to the writer and empty it (and ``tags``)."""
        if run:
            kept = None if all(tag is None for tag in tags) else cast(list[T], tags[:])
            self._append_buffered(run[:], kept)
            run.clear()
            tags.clear()

    def _add_one(self, ref: SeriesRef, point: DataPoint, tag: T | None) -> None:
        try:
            ack = self.service.writer.add_to(ref, point.timestamp, point.value)
        except TsdError as exc:  # shutting down, or HBase's spool full
            if not self._track_refusal(exc, None if tag is None else (tag,)):
                self._refuse(tag, point, Refused.of(exc))
            return
        if self.counters is not None:
            self.counters[0].value += 1
        self._note_ack(ack, None if tag is None else (tag,))

    def _track_refusal(self, exc: TsdError, tags: Sequence[T] | None, count: int = 1) -> bool:
        """Points storage refused up front (HBase's spool is full) are noted in
        :attr:`refusal` and :attr:`refused_writes`; with ``track_acks`` they count as a
        failed write, as a batch storage refused does, so that the reply carries the
        refusal's status (True). False when they are to be refused one by one."""
        if not isinstance(exc, StorageRefused):
            return False
        self.refusal = exc
        self.refused_writes += count
        if not (self.track_acks and tags is not None):
            return False
        failed: Ack = asyncio.get_running_loop().create_future()
        failed.set_exception(exc)
        failed.exception()  # seen: nobody else needs to look
        self._tracked.append(_Tracked(failed, list(tags)))
        if self.counters is not None:
            self.counters[1].value += len(tags)
        return True

    def _refuse_run(self, tags: Sequence[T] | None, count: int, refused: Refused) -> None:
        """Refuse ``count`` points of a run, each with its tag."""
        for position in range(count):
            self._refuse(None if tags is None else tags[position], None, refused)

    def _remember(self, aliases: Iterable[Hashable], ref: SeriesRef) -> None:
        cache = self.cache
        if cache is not None:
            for alias in aliases:
                cache.remember(alias, ref)

    def _note_ack(self, ack: Ack, tags: Sequence[T] | None, count: int = 1) -> None:
        if self.track_acks and tags is not None:
            tracked = self._tracked
            if tracked and tracked[-1].ack is ack:
                tracked[-1].tags.extend(tags)
            else:
                tracked.append(_Tracked(ack, list(tags)))
        if ack is not self._last_ack:
            self._last_ack = ack
            if self.on_batch_failed is not None:
                cell = self._last_count = [0]
                ack.add_done_callback(lambda done: self._report_batch(done, cell[0]))
        self._last_count[0] += count

    def _report_batch(self, ack: Ack, points: int) -> None:
        """Report a failed storage write once per batch, as OpenTSDB's PutErrback does,
        with how many of this session's points it held."""
        if self.on_batch_failed is not None and not ack.cancelled():
            exc = ack.exception()
            if exc is not None:
                error = exc if isinstance(exc, TsdError) else TsdError(str(exc))
                self.on_batch_failed(error, points)

    def _refuse(self, tag: T | None, point: DataPoint | None, refused: Refused) -> None:
        if self.counters is not None:
            self.counters[1].value += 1
        if self.on_refused is not None:
            self.on_refused(tag, point, refused)
