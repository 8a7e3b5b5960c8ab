"""Meta tracking: the meta table rows (and UIDMeta) written once per new series.

The writer calls :meth:`MetaTracker.on_new_series` (a burst of them:
:meth:`~MetaTracker.on_new_series_many`) when it builds the row-key template of a series it
has not seen (once per series per process, again only after its cache is cleared).
The call only queues the TSUID; a background task writes what is queued, in batches. What it
writes follows OpenTSDB's keys (``TSDB.addPointInternal``, behaviour doc §4.6):

====================  ==========================================================================
tracking off          one ``tsd_series`` cell (8-byte first-seen epoch seconds) in the series'
                      meta row: tsd's series index, so ``/api/search/lookup`` and Grafana's
                      template variables work without meta tracking (OpenTSDB writes nothing
                      and its lookups find nothing)
enable_tsuid_tracking ``ts_ctr`` = 1 (8 bytes)
+ tsuid_incrementing  ``ts_ctr`` incremented
+ realtime_ts         the ``ts_meta`` TSMeta when missing (with incrementing: when the counter
                      was new, i.e. reached 1)
enable_realtime_uid   the UIDMeta of the metric, tag keys and values when missing
====================  ==========================================================================

Departure, on purpose: OpenTSDB does this once per *data point*, the classic way realtime meta
overloads HBase (issue #783); tsd does it once per new series. So ``ts_ctr`` (TSMeta
``totalDatapoints``) counts how often the series was (re)discovered by a TSD, not points.
UIDMeta is written when a UID is first used by a series rather than at assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from itertools import islice, repeat
from operator import attrgetter, itemgetter

from tsd.codec import KeyLayout, SeriesKey, tsuid_from_parts
from tsd.codec.const import TSMETA_COUNTER_QUALIFIER, TSMETA_FAMILY
from tsd.codec.rowkey import series_tsuids
from tsd.codec.tsuid import split_tsuid
from tsd.config import CoreConfig
from tsd.errors import CodecError, TsdError
from tsd.log import get_logger
from tsd.meta.tsmeta import TsMetaStore
from tsd.meta.uidmeta import UidMetaStore
from tsd.recent import RecentMap
from tsd.stats import StatsRegistry
from tsd.storage.base import Put, Storage
from tsd.tasks import cancel_and_wait
from tsd.uid.service import UidService
from tsd.uid.uniqueid import UniqueId

log = get_logger("tsd.meta")

#: tsd's own index cell in a meta row, written when tracking is off.
INDEX_QUALIFIER = b"tsd_series"
#: UIDs remembered as having their UIDMeta written; past this the memory is cleared
#: (rewrites are idempotent). TSUIDs written are remembered up to
#: ``tsd.core.series_cache.size``, the least recently seen forgotten first.
MAX_REMEMBERED = 1_000_000
#: TSUIDs written per storage round (a burst of new series: few, large writes).
BATCH_SIZE = 4096
#: Attempts at a batch that fails on storage errors before its TSUIDs are given up.
MAX_ATTEMPTS = 3
#: How long the background task lets new series gather before writing them.
LINGER_S = 0.1
#: Pause after a failed round, so a storage outage is not hammered.
RETRY_PAUSE_S = 1.0

_Pairs = tuple[tuple[bytes, bytes], ...]
_METRIC_UID = attrgetter("metric_uid")
_FIRST = itemgetter(0)
_new = tuple.__new__


class MetaTracker:
    """Queues new series from the writer and writes their meta rows in the background."""

    def __init__(
        self,
        storage: Storage,
        meta_table: str,
        layout: KeyLayout,
        core: CoreConfig,
        uids: UidService,
        tsmetas: TsMetaStore,
        uid_metas: UidMetaStore,
        registry: StatsRegistry | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._storage = storage
        self._table = meta_table
        self._layout = layout
        self._core = core
        self._uids = uids
        self._tsmetas = tsmetas
        self._uid_metas = uid_metas
        self._wall_clock = wall_clock
        self._pending: dict[bytes, tuple[bytes, _Pairs, int]] = {}
        #: TSUIDs written (values unused), bounded with the ref caches they follow; a
        #: series' key is its row-key template's own TSUID object (SeriesKey.tsuid), no copy
        self._written: RecentMap[bytes, bool] = RecentMap(core.series_cache_size)
        #: the series of the round being written (tsuid -> its queue entry)
        self._writing: dict[bytes, tuple[bytes, _Pairs, int]] = {}
        self._uids_written: set[tuple[str, bytes]] = set()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        #: set while the queue is below tsd.core.series_cache.size (wait_room)
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        registry = registry or StatsRegistry()
        self._tracked = registry.counter("meta.series_tracked")
        self._errors = registry.counter("meta.errors", type="storage")
        self._dropped = registry.counter("meta.series_dropped")

    # -- the writer's hook --------------------------------------------------------------------

    def on_new_series(
        self,
        metric_uid: bytes,
        tag_uids: Sequence[tuple[bytes, bytes]],
        tsuid: bytes | None = None,
    ) -> None:
        """Queue a series the writer has just seen (sync, cheap, never raises).
        ``tsuid``: the series' TSUID when the caller has it already (the ingest service's
        row-key template holds it), saving the re-encoding."""
        if tsuid is None:
            try:
                tsuid = tsuid_from_parts(self._layout, metric_uid, tag_uids)
            except CodecError:
                return
        pending = self._pending
        if self._written.lookup(tsuid) or tsuid in pending or tsuid in self._writing:
            return
        if not pending:  # else the task is awake already (a failed round wakes it too)
            self._wake.set()
        pending[tsuid] = (metric_uid, tuple(tag_uids), 0)
        if len(pending) >= self._written.max_entries:
            self._room.clear()  # new series wait (wait_room) until the queue drains

    async def wait_room(self) -> None:
        """Return once fewer series than ``tsd.core.series_cache.size`` wait to be
        written: the ingest service awaits this before it resolves new series, so that a
        burst faster than meta rows are written (or a storage outage) holds new series
        back rather than growing the queue, or dropping their meta rows."""
        if not self._room.is_set():
            self._wake.set()
            await self._room.wait()

    def on_new_series_many(self, refs: Sequence[SeriesKey]) -> None:
        """:meth:`on_new_series` of a burst of series, by their row-key templates (the
        ingest service's hook). Their tag UID pairs are kept only where they are written
        (``tsd.core.meta.enable_realtime_uid``): read back from the TSUID.

        A burst is filtered in one comprehension and queued in one dict update (its
        entries zipped at C speed), not a Python step per series: issue 26's new series
        at 100,000/s."""
        pending, written, writing = self._pending, self._written, self._writing
        was_empty = not pending
        tsuids = series_tsuids(refs)
        get = written.get
        # a miss of the young generation is recalled from the old one only when it holds any
        recall = written.recall if written.entries() > len(written) else None
        keep: list[int] | None = None
        if (
            recall is None
            and pending.keys().isdisjoint(tsuids)
            and writing.keys().isdisjoint(tsuids)
            and not any(map(get, tsuids))
        ):  # none queued, being written or written (a burst): all kept, at C speed
            pass
        elif recall is None:
            keep = [
                at
                for at, tsuid in enumerate(tsuids)
                if tsuid not in pending and tsuid not in writing and get(tsuid) is None
            ]
        else:
            keep = [
                at
                for at, tsuid in enumerate(tsuids)
                if tsuid not in pending
                and tsuid not in writing
                and get(tsuid) is None
                and recall(tsuid) is None
            ]
        if keep is not None and len(keep) < len(tsuids):
            refs = [refs[at] for at in keep]
            tsuids = [tsuids[at] for at in keep]
        if self._core.meta_enable_realtime_uid:
            layout = self._layout
            for ref, tsuid in zip(refs, tsuids, strict=True):
                pairs: _Pairs = ()
                with contextlib.suppress(CodecError):  # no tags: no UIDMeta of them
                    pairs = split_tsuid(layout, tsuid)[1]
                pending[tsuid] = (ref.metric_uid, pairs, 0)
        else:
            # (metric UID, no pairs, no attempt yet) per series, as zip's tuples; one
            # shared entry when the burst is of one metric (its usual case)
            metric_uids = list(map(_METRIC_UID, refs))
            if metric_uids and metric_uids.count(metric_uids[0]) == len(metric_uids):
                pending.update(zip(tsuids, repeat((metric_uids[0], (), 0))))
            else:
                entries = zip(metric_uids, repeat(()), repeat(0))
                pending.update(zip(tsuids, entries, strict=True))
        if was_empty and pending:  # else the task is awake already
            self._wake.set()
        if len(pending) >= written.max_entries:
            self._room.clear()  # new series wait (wait_room) until the queue drains

    def pending(self) -> int:
        """Series queued and not yet written."""
        return len(self._pending)

    def remembered(self) -> int:
        """Series remembered as written (at most ``tsd.core.series_cache.size``)."""
        return self._written.entries()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Write what is queued, then stop the background task."""
        await cancel_and_wait(self._task)
        self._task = None
        await self.flush()
        self._room.set()  # nobody waits on a closed tracker

    async def flush(self) -> None:
        """Write everything queued now (lookups call this to see the newest series).

        Storage errors are counted and logged; their series stay queued for a retry.
        """
        async with self._lock:
            rounds = 0
            while self._pending and rounds < MAX_ATTEMPTS * 4:
                rounds += 1
                if not await self._write_round():
                    break

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            # Let a burst of new series gather into one write (lookups flush on their own).
            await asyncio.sleep(LINGER_S)
            self._wake.clear()
            await self.flush()
            if self._pending:  # a failed round: retry after a pause
                await asyncio.sleep(RETRY_PAUSE_S)
                self._wake.set()

    # -- writing ------------------------------------------------------------------------------

    async def _write_round(self) -> bool:
        """Write one batch; False when it failed (its series are queued again, up to
        MAX_ATTEMPTS times)."""
        pending = self._pending
        if len(pending) <= BATCH_SIZE:  # a burst's usual round: the whole queue, as it is
            writing, self._pending = pending, {}
        else:  # the first BATCH_SIZE (not a copy of all that waits)
            writing = dict(islice(pending.items(), BATCH_SIZE))
            for tsuid in writing:
                del pending[tsuid]
        self._writing = writing
        batch = list(writing.items())
        try:
            await self._write_batch(batch)
        except Exception as exc:  # storage errors, and anything else: the task must live on
            self._errors.inc()
            if isinstance(exc, TsdError):
                log.warning("meta.write_failed", error=str(exc), series=len(batch))
            else:
                log.exception("meta.write_failed", series=len(batch))
            for tsuid, (metric_uid, pairs, attempts) in batch:
                if attempts + 1 < MAX_ATTEMPTS:
                    self._pending.setdefault(tsuid, (metric_uid, pairs, attempts + 1))
                else:
                    self._dropped.inc()
            if self._pending:  # on_new_series wakes the task only when the queue was empty
                self._wake.set()
            return False
        finally:
            self._writing = {}
            if len(self._pending) < self._written.max_entries:
                self._room.set()
        # the round's TSUIDs remembered in one call (one dict update while they fit)
        self._written.remember_many(list(writing), [True] * len(writing))
        self._tracked.inc(len(batch))
        return True

    async def _write_batch(self, batch: list[tuple[bytes, tuple[bytes, _Pairs, int]]]) -> None:
        core = self._core
        now_s = int(self._wall_clock())
        tsuids = list(map(_FIRST, batch))
        if not core.meta_enable_tsuid_tracking:
            stamp = now_s.to_bytes(8, "big", signed=True)
            cell = zip(tsuids, repeat(TSMETA_FAMILY), repeat(INDEX_QUALIFIER), repeat(stamp))
            # tuple.__new__ over map: a Put per series without a Python step per series
            await self._storage.put(self._table, list(map(_new, repeat(Put), cell)))
        elif core.meta_enable_tsuid_incrementing:
            for tsuid in tsuids:
                count = await self._storage.increment(
                    self._table, tsuid, TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER
                )
                if core.meta_enable_realtime_ts and count == 1:
                    await self._tsmetas.store_new_if_missing(tsuid, now_s)
        elif core.meta_enable_realtime_ts:
            for tsuid in tsuids:
                await self._tsmetas.store_new_if_missing(tsuid, now_s)
        else:
            one = (1).to_bytes(8, "big")
            await self._storage.put(
                self._table, [Put(t, TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER, one) for t in tsuids]
            )
        if core.meta_enable_realtime_uid:
            for _, (metric_uid, pairs, _attempts) in batch:
                await self._write_uid_metas(metric_uid, pairs, now_s)

    async def _write_uid_metas(self, metric_uid: bytes, pairs: _Pairs, now_s: int) -> None:
        todo: list[tuple[UniqueId, bytes]] = [(self._uids.metrics, metric_uid)]
        for tagk, tagv in pairs:
            todo += [(self._uids.tagk, tagk), (self._uids.tagv, tagv)]
        for unique_id, uid in todo:
            key = (unique_id.kind, uid)
            if key in self._uids_written:
                continue
            name = await unique_id.get_name(uid)
            await self._uid_metas.store_new_if_missing(unique_id, uid, name, now_s)
            if len(self._uids_written) >= MAX_REMEMBERED:
                self._uids_written.clear()
            self._uids_written.add(key)
