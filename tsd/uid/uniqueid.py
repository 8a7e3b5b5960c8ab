"""UniqueId: the name <-> UID mapping of one kind (metrics, tagk or tagv) in the UID table.

Layout in the UID table (OpenTSDB 2.4's ``uid/UniqueId.java``; docs/format/uid.md):

* forward row: key = the name's bytes, family ``id``, qualifier = kind -> UID (``width`` bytes);
* reverse row: key = the UID, family ``name``, qualifier = kind -> the name's bytes;
* counter row: key ``b"\\x00"``, family ``id``, qualifier = kind -> 8-byte big-endian signed
  count of the UIDs handed out so far (the highest UID assigned).

Names are stored as ISO-8859-1 bytes, OpenTSDB's ``CHARSET``, exactly as OpenTSDB stores them,
including its handling of characters outside ISO-8859-1 (which the name rules let through: any
BMP letter is valid): Java's encoder writes each of them as ``?``, so ``日本`` is stored, looked
up and suggested as ``??``, and ``日本`` and ``中国`` share one UID. tsd keeps that on purpose: a
table written by OpenTSDB resolves such names to the same series under tsd, and both can write
to one table side by side; refusing them instead would turn points OpenTSDB accepts into
errors. The reverse mapping (and so every query answer) shows the stored ``??`` name, as in
OpenTSDB. Stored bytes always decode, since every byte is an ISO-8859-1 character.

Assignment follows OpenTSDB's rules (``UniqueIdAllocator``: the same counter, reverse
mapping before forward mapping, the forward check-and-put settling races), in batches: names
that miss the cache are read from their forward rows, all at once; the N still missing take
N IDs from a block reserved by one increment of the counter row by N (a block as big as the
burst needs, at most ``tsd.core.uid.block_size``; an ID that does not fit in ``width`` bytes
is refused). No other writer (another TSD, OpenTSDB, ``tsdb uid assign``) can be handed an
ID of that block, since all take IDs from the same counter; so the reverse mappings are
plain puts, all in one :meth:`~tsd.storage.base.Storage.put_column`, and only the forward
mappings are check-and-puts (each must be absent), in one :meth:`~tsd.storage.base.Storage.
put_if_absent_column` (both take the batch as columns: no object per name where the store
makes its keys from the rows, as the embedded one does). On HBase a new name costs one
checkAndPut, not two. Losing a forward check-and-put means another writer assigned the name
first: its UID is read back and used, and the reverse mapping of the ID reserved here is
deleted (OpenTSDB leaves it, and both fsck tools report it; only this writer ever held that
ID, so removing it is safe); the ID stays a gap in the counter, as do the IDs of a block a
process stopped before using. A process killed between the reverse puts and the forward
check-and-puts leaves the reverse mappings of the names in flight without forward mappings;
``tsdb uid fsck fix`` removes them. A storage error of the forward check-and-puts removes,
once the forward rows are read back, the reverse mappings none of them points at (best
effort: what the store cannot take then stays for fsck). The trade-off: a counter row set
back below IDs in use (a damaged table) would let the reverse puts overwrite existing
mappings, where OpenTSDB's check-and-put refuses and logs; ``tsdb uid fsck`` finds such a
table.

With ``tsd.core.uid.random_metrics`` (OpenTSDB's random metric UIDs, which spread new series
over the regions of the data table), metric IDs are drawn at random (never 0, at most 7 bytes
wide) instead of taken from the counter, which stays untouched; an ID drawn must be free, so
the reverse mappings are check-and-puts there, and a name whose ID another name holds draws
again, up to MAX_ATTEMPTS_ASSIGN_RANDOM_ID times, as OpenTSDB does. The forward check-and-put
and the loser's clean-up are the same.

Within one process, concurrent callers asking for the same missing name share its pending
assignment, and misses of one event-loop turn (many single :meth:`get_or_create_id` calls, as
a burst of new series makes) go into one batch (:meth:`get_or_create_ids` takes a whole batch
directly).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from itertools import repeat
from typing import Any, TypeVar, cast

from tsd.codec.const import (
    MAX_UID_WIDTH,
    MIN_UID_WIDTH,
    UID_ID_FAMILY,
    UID_KIND_METRIC,
    UID_KIND_TAGK,
    UID_KIND_TAGV,
    UID_MAXID_ROW,
    UID_META_QUALIFIERS,
    UID_NAME_FAMILY,
)
from tsd.errors import (
    BadRequestError,
    CodecError,
    NameTooLong,
    NoSuchUniqueId,
    NoSuchUniqueName,
    StorageError,
    StorageRefused,
    StorageTimeout,
    StorageUnavailable,
    UidAlreadyExists,
    UidAssignmentError,
)
from tsd.java_text import format_java_bytes
from tsd.storage.base import CellColumn, Delete, Put, ScanSpec, Storage
from tsd.uid.cache import UidCache

#: The qualifiers of the three kinds, as text (OpenTSDB's METRICS_QUAL, TAG_NAME_QUAL, ...).
KINDS = tuple(kind.decode("ascii") for kind in (UID_KIND_METRIC, UID_KIND_TAGK, UID_KIND_TAGV))
#: Family of the forward rows and of the counter row.
ID_FAMILY = UID_ID_FAMILY
#: Family of the reverse rows (and of the UIDMeta cells).
NAME_FAMILY = UID_NAME_FAMILY
#: Row key of the counter that tracks the highest UID assigned (OpenTSDB's MAXID_ROW).
MAXID_ROW = UID_MAXID_ROW
#: Tries at an assignment before giving up on storage errors (OpenTSDB's MAX_ATTEMPTS_ASSIGN_ID).
MAX_ATTEMPTS_ASSIGN_ID = 3
#: Random IDs drawn for a name before giving up on collisions (OpenTSDB's
#: MAX_ATTEMPTS_ASSIGN_RANDOM_ID).
MAX_ATTEMPTS_ASSIGN_RANDOM_ID = 10
#: The widest random UID (OpenTSDB's RandomUniqueId draws them into a long).
MAX_RANDOM_UID_WIDTH = 7
#: Names assigned per batch (one mutate of their reverse mappings, one check_and_put_many).
MAX_ASSIGN_BATCH = 4096
#: The largest block of IDs one increment of the counter row reserves
#: (``tsd.core.uid.block_size`` sets a smaller bound).
MAX_BLOCK_SIZE = 4096
#: Default number of suggestions (OpenTSDB's MAX_SUGGESTIONS, /api/suggest's ``max``).
MAX_SUGGESTIONS = 25
#: Rows scanned for an empty suggest prefix: ``!`` (first printable ASCII) to ``~`` (excluded).
SUGGEST_START_ROW = b"!"
SUGGEST_STOP_ROW = b"~"
#: Rows fetched per scan round trip by suggest (OpenTSDB caps the scanner at 4096).
MAX_SUGGEST_BATCH_ROWS = 4096
#: The character set of names in the UID table (OpenTSDB's UniqueId.CHARSET).
CHARSET = "iso-8859-1"
#: How each kind's names are called in error messages (OpenTSDB's Tags.validateString).
NAME_WHAT = {"metrics": "metric name", "tagk": "tag name", "tagv": "tag value"}
#: Characters of a too-long name shown in its error message
SHOWN_NAME_CHARS = 64
#: Storage errors that say the store as a whole is failing: a batch that gets one is not
#: split to find a name to blame (every part would fail the same way)
SYSTEMIC_ERRORS = (StorageUnavailable, StorageTimeout, StorageRefused)

_T = TypeVar("_T")

#: ``int.to_bytes`` as ``map`` calls it (number, width, byte order): a block's IDs at C speed
_to_bytes = cast(Callable[[int, int, str], bytes], int.to_bytes)


def encode_name(name: str) -> bytes:
    """The stored bytes of ``name``: ISO-8859-1, with ``?`` for any other character (as
    Java's ``String.getBytes`` with OpenTSDB's CHARSET)."""
    return name.encode(CHARSET, "replace")


def decode_name(raw: bytes) -> str:
    """A stored name as text (never fails: every byte is an ISO-8859-1 character)."""
    return raw.decode(CHARSET)


def prefix_stop_row(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (b"" when there is none).

    OpenTSDB adds one to the last byte, which wraps for a trailing 0xFF; here trailing
    0xFF bytes are dropped first so the range stays correct.
    """
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b""
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


@dataclass(slots=True)
class UidStats:
    """Counters of one UniqueId (OpenTSDB's ``uid.*`` stats, per kind)."""

    cache_hits: int = 0
    cache_misses: int = 0
    #: UIDs this process assigned (forward mapping written here)
    assignments: int = 0
    #: forward check-and-puts lost to another writer (one unused ID each)
    lost_races: int = 0
    #: reverse mappings of lost races removed (the ID stays a gap in the counter)
    orphans_removed: int = 0
    #: reverse mappings that may be orphans, left for fsck (the store failed their clean-up)
    orphans_left: int = 0
    #: blocks of IDs reserved (one increment of the counter row each)
    blocks: int = 0
    #: random IDs drawn that another name already held (drawn again)
    random_collisions: int = 0
    #: get_or_create_id calls refused because auto-create is off for this kind
    refused_creations: int = 0


@dataclass(slots=True, eq=False)
class _Batch:
    """Names resolved together, and their outcome once done: per name, its UID or the
    exception its callers get."""

    names: list[str]
    done: asyncio.Future[dict[str, bytes | BaseException]]
    #: set once done: some name's outcome is an exception
    failed: bool = False

    def result(self, name: str) -> bytes:
        outcome = self.done.result()[name]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class UniqueId:
    """The UID mapping of one kind in one UID table, with its cache."""

    def __init__(
        self,
        storage: Storage,
        table: str,
        kind: str,
        width: int,
        cache: UidCache,
        *,
        auto_create: bool,
        block_size: int = MAX_BLOCK_SIZE,
        random_ids: bool = False,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if not MIN_UID_WIDTH <= width <= MAX_UID_WIDTH:
            raise ValueError(f"Invalid width: {width}")
        if not 1 <= block_size <= MAX_BLOCK_SIZE:
            raise ValueError(f"block_size must be between 1 and {MAX_BLOCK_SIZE}: {block_size}")
        if random_ids and width > MAX_RANDOM_UID_WIDTH:
            raise ValueError(f"random UIDs are at most {MAX_RANDOM_UID_WIDTH} bytes wide: {width}")
        self.storage = storage
        self.table = table
        self.kind = kind
        self.width = width
        self.cache = cache
        self.auto_create = auto_create
        self.stats = UidStats()
        self._qualifier = kind.encode("ascii")
        #: the longest name the store can key a forward row by (a name's stored form has
        #: one byte per character: ISO-8859-1, ``?`` for the others)
        self.max_name_length = storage.max_row_length(ID_FAMILY)
        self._max_id = (1 << (8 * width)) - 1
        #: the most IDs one increment of the counter reserves (tsd.core.uid.block_size)
        self.block_size = block_size
        #: IDs drawn at random, not from the counter (tsd.core.uid.random_metrics)
        self.random_ids = random_ids
        # name -> the batch resolving it (lookup, then assignment when missing)
        self._creating: dict[str, _Batch] = {}
        # batches filled this loop turn, started at the next
        self._filling: list[_Batch] = []
        self._running: set[asyncio.Task[None]] = set()
        # name -> the task looking it up in storage
        self._looking_up: dict[str, asyncio.Task[bytes | None]] = {}
        # UIDs (as bytes) and new names with a rename under way (OpenTSDB's renaming_id_names)
        self._renaming: set[bytes | str] = set()
        # True once a name outside ISO-8859-1 got a forward-only cache entry (see _remember)
        self._has_aliases = False

    def __repr__(self) -> str:
        # OpenTSDB's UniqueId.toString, which its rename error messages embed.
        return f"UniqueId({self.table}, {self.kind}, {self.width})"

    # -- name -> UID --------------------------------------------------------------------------

    def cached_id(self, name: str) -> bytes | None:
        """The UID of ``name`` if cached (counted as a hit), else None (not counted)."""
        uid = self.cache.get_id(name)
        if uid is not None:
            self.stats.cache_hits += 1
        return uid

    async def get_id(self, name: str) -> bytes:
        """The UID of ``name``; NoSuchUniqueName when it has none."""
        uid = self.cache.get_id(name)
        if uid is not None:
            self.stats.cache_hits += 1
            return uid
        self.stats.cache_misses += 1
        uid = await self._shared(self._looking_up, name, self._lookup_id)
        if uid is None:
            raise NoSuchUniqueName(self.kind, name)
        return uid

    async def get_or_create_id(self, name: str) -> bytes:
        """The UID of ``name``, assigning one if it has none and auto-create is on."""
        uid = self.cache.get_id(name)
        if uid is not None:
            self.stats.cache_hits += 1
            return uid
        self.stats.cache_misses += 1
        if not self.auto_create:
            uid = await self._shared(self._looking_up, name, self._lookup_id)
            if uid is None:
                self.stats.refused_creations += 1
                raise NoSuchUniqueName(self.kind, name)
            return uid
        return await self._resolved(name)

    async def get_or_create_ids(
        self, names: Iterable[str], errors: dict[str, BaseException] | None = None
    ) -> dict[str, bytes]:
        """The UIDs of many names, assigning those without one in batches (see the module
        docstring): ``{name: uid}``.

        With auto-create off, names without a UID are left out of the answer (counted in
        ``refused_creations``); the caller reports them (NoSuchUniqueName). A name that
        failed (NameTooLong, a storage error after MAX_ATTEMPTS_ASSIGN_ID tries,
        UidAssignmentError when IDs are exhausted) goes into ``errors`` with its error
        when given, each name alone (the others get their UIDs); without ``errors`` the
        first failure raises, names assigned before it keeping their UIDs.
        """
        found, misses = self._cached_ids(names)
        if not misses:
            return found
        if not self.auto_create:
            looked = await self._lookup_ids(misses)
            self.stats.refused_creations += len(misses) - len(looked)
            found.update(looked)
            return found
        batches = self._claim(misses)  # names too long are refused by their batch
        for batch in batches:
            await asyncio.shield(batch.done)
        if len(batches) == 1 and len(batches[0].names) == len(misses):
            # one batch of exactly these names (a burst's usual case): its answer whole
            (batch,) = batches
            if not batch.failed:
                answer = cast(dict[str, bytes], batch.done.result())
                if len(found) < len(answer):  # a copy of the bigger (a clone at C speed)
                    found, cached = dict(answer), found
                    found.update(cached)
                else:
                    found.update(answer)
                return found
        outcomes: dict[str, bytes | BaseException] = {}
        for batch in batches:
            outcomes.update(batch.done.result())
        for name in misses:
            outcome = outcomes[name]
            if isinstance(outcome, BaseException):
                if errors is None:
                    raise outcome  # the first failure
                errors[name] = outcome
            else:
                found[name] = outcome
        return found

    def _cached_ids(self, names: Iterable[str]) -> tuple[dict[str, bytes], list[str]]:
        """The cached UIDs among ``names`` (each name once) and the names that missed
        (distinct, in order), counted as hits and misses: one bulk read of the cache
        (:meth:`UidCache.get_ids`), no Python step per name."""
        found, misses = self.cache.get_ids(list(dict.fromkeys(names)))
        self.stats.cache_hits += len(found)
        self.stats.cache_misses += len(misses)
        return found, misses

    async def assign(self, name: str) -> bytes:
        """Assign a UID to a new ``name`` whatever auto-create says (``tsdb mkmetric``,
        ``/api/uid/assign``). A name that has a UID already raises UidAlreadyExists."""
        try:
            uid = await self.get_id(name)
        except NoSuchUniqueName:
            return await self._resolved(name)
        raise UidAlreadyExists(self.kind, name, uid)

    async def assign_many(self, names: Sequence[str]) -> dict[str, bytes | BaseException]:
        """:meth:`assign` of many names (``/api/uid/assign``) in the batches that writes
        use: the cached names and those found in one read of their forward rows are
        UidAlreadyExists, the others are assigned in :data:`MAX_ASSIGN_BATCH` batches, in
        ``names`` order. ``{name: its new UID, or its error}``; a name given twice is
        answered once."""
        cached, misses = self._cached_ids(names)
        outcomes: dict[str, bytes | BaseException] = {
            name: UidAlreadyExists(self.kind, name, uid) for name, uid in cached.items()
        }
        new: list[str] = []
        for start in range(0, len(misses), MAX_ASSIGN_BATCH):
            chunk = misses[start : start + MAX_ASSIGN_BATCH]
            found = await self._lookup_ids(chunk)
            for name in chunk:
                uid = found.get(name)
                if uid is None:
                    new.append(name)
                else:
                    outcomes[name] = UidAlreadyExists(self.kind, name, uid)
        settled: dict[str, bytes | BaseException] = {}
        for start in range(0, len(new), MAX_ASSIGN_BATCH):  # one after another: IDs in order
            batches = self._claim(new[start : start + MAX_ASSIGN_BATCH])
            for batch in batches:
                await asyncio.shield(batch.done)  # a cancelled caller leaves it running
                settled.update(batch.done.result())  # other callers' names too, maybe
        outcomes.update((name, settled[name]) for name in new)
        return outcomes

    # -- UID -> name --------------------------------------------------------------------------

    def cached_name(self, uid: bytes) -> str | None:
        """The name of ``uid`` if cached (counted as a hit), else None (not counted)."""
        name = self.cache.get_name(uid)
        if name is not None:
            self.stats.cache_hits += 1
        return name

    def cached_names(self, uids: Iterable[bytes]) -> tuple[dict[bytes, str], list[bytes]]:
        """:meth:`cached_name` of each of ``uids``: the names cached (counted as hits) and
        the uids not cached."""
        found, missing = self.cache.get_names(uids)
        self.stats.cache_hits += len(found)
        return found, missing

    async def get_name(self, uid: bytes) -> str:
        """The name of ``uid``; NoSuchUniqueId when it has none."""
        if len(uid) != self.width:
            raise BadRequestError(
                f"Wrong id.length = {len(uid)} which is != {self.width} required for '{self.kind}'"
            )
        name = self.cache.get_name(uid)
        if name is not None:
            self.stats.cache_hits += 1
            return name
        self.stats.cache_misses += 1
        raw = await self._get_cell(uid, NAME_FAMILY)
        if raw is None:
            raise NoSuchUniqueId(self.kind, uid)
        name = decode_name(raw)
        self.cache.put(name, uid)
        return name

    async def get_names(self, uids: Sequence[bytes], batch: int = 4096) -> dict[bytes, str]:
        """The names of ``uids`` not cached, read ``batch`` reverse rows per storage call
        (a query over 200,000 series resolves its tag values in 50 calls, not 200,000);
        NoSuchUniqueId for the first UID without a name."""
        names: dict[bytes, str] = {}
        for lo in range(0, len(uids), batch):
            part = uids[lo : lo + batch]
            self.stats.cache_misses += len(part)
            rows = await self.storage.get_many(self.table, part, (NAME_FAMILY,))
            for row in rows:
                raw = row.value(NAME_FAMILY, self._qualifier)
                if raw is not None:
                    name = decode_name(raw)
                    self.cache.put(name, row.key)
                    names[row.key] = name
            for uid in part:
                if uid not in names:
                    raise NoSuchUniqueId(self.kind, uid)
        return names

    # -- suggest, rename, delete --------------------------------------------------------------

    async def suggest(self, prefix: str = "", max_results: int = MAX_SUGGESTIONS) -> list[str]:
        """Names of this kind starting with ``prefix``, in byte order, at most ``max_results``.

        An empty prefix scans ``!`` to ``~`` (printable ASCII) as OpenTSDB does. Like OpenTSDB,
        at least one name is returned when any matches, even for ``max_results`` below 1.
        """
        if prefix:
            start = encode_name(prefix)
            stop = prefix_stop_row(start)
        else:
            start, stop = SUGGEST_START_ROW, SUGGEST_STOP_ROW
        spec = ScanSpec(
            start=start,
            stop=stop,
            families=(ID_FAMILY,),
            batch_rows=max(1, min(max_results, MAX_SUGGEST_BATCH_ROWS)),
        )
        names: list[str] = []
        async with aclosing(self.storage.scan(self.table, spec)) as rows:
            async for row in rows:
                uid = row.value(ID_FAMILY, self._qualifier)
                if uid is None or row.key == MAXID_ROW:
                    continue
                name = decode_name(row.key)
                if len(uid) == self.width and self.cache.get_id(name) is None:
                    self.cache.put(name, uid)
                names.append(name)
                if len(names) >= max_results:
                    break
        return names

    async def rename(self, old_name: str, new_name: str) -> None:
        """Give the UID of ``old_name`` to ``new_name``; ``old_name`` no longer resolves.

        Not atomic, as in OpenTSDB: reverse mapping first, then the new forward mapping, then
        the old forward mapping is deleted. NoSuchUniqueName when ``old_name`` has no UID;
        BadRequestError when ``new_name`` has one or a rename of either is under way.
        """
        uid = await self.get_id(old_name)
        new_raw = encode_name(new_name)
        try:
            taken = await self.get_id(new_name)
        except NoSuchUniqueName:
            pass
        else:
            raise BadRequestError(
                f'When trying rename("{old_name}", "{new_name}") on {self!r}: new name already'
                f" assigned ID={format_java_bytes(taken)}"
            )
        if uid in self._renaming or new_name in self._renaming:
            raise BadRequestError(
                f'Ongoing rename on the same ID("{format_java_bytes(uid)}") or an identical'
                f' new name("{new_name}")'
            )
        self._renaming.update((uid, new_name))
        try:
            await self.storage.put(self.table, [Put(uid, NAME_FAMILY, self._qualifier, new_raw)])
            await self.storage.put(self.table, [Put(new_raw, ID_FAMILY, self._qualifier, uid)])
            self._forget_name(old_name)
            self._remember(new_name, new_raw, uid)
            old_raw = encode_name(old_name)
            await self.storage.delete(self.table, [Delete(old_raw, ID_FAMILY, self._qualifier)])
        finally:
            self._renaming.difference_update((uid, new_name))

    async def delete(self, name: str) -> None:
        """Remove ``name``'s forward and reverse mappings and its UIDMeta (``tsdb uid delete``).

        Data points that use the UID stay in the data table, as in OpenTSDB.
        """
        uid = await self.get_id(name)
        raw = encode_name(name)
        try:
            await self.storage.delete(
                self.table,
                [
                    Delete(raw, ID_FAMILY, self._qualifier),
                    Delete(uid, NAME_FAMILY, self._qualifier),
                    Delete(uid, NAME_FAMILY, UID_META_QUALIFIERS[self._qualifier]),
                ],
            )
        finally:
            self._forget_name(name)
            self.cache.discard_id(uid)

    def drop_caches(self) -> None:
        """Forget every cached mapping (``/api/dropcaches``)."""
        self.cache.clear()

    # -- internals ----------------------------------------------------------------------------

    async def _shared(
        self,
        pending: dict[str, asyncio.Task[_T]],
        name: str,
        work: Callable[[str], Coroutine[Any, Any, _T]],
    ) -> _T:
        """Run ``work(name)`` once for all concurrent callers with the same ``name``.

        The work runs in its own task so that a cancelled caller does not cancel it for the
        others (hence the shield).
        """
        task = pending.get(name)
        if task is None:
            task = asyncio.create_task(work(name))
            pending[name] = task
            task.add_done_callback(lambda done: _forget(pending, name, done))
        return await asyncio.shield(task)

    async def _get_cell(self, row: bytes, family: str) -> bytes | None:
        found = await self.storage.get(self.table, row, (family,))
        return None if found is None else found.value(family, self._qualifier)

    def _too_long(self, name: str) -> NameTooLong:
        shown = name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "..."
        return NameTooLong(
            f'Invalid {NAME_WHAT[self.kind]} ("{shown}"): too long: {len(name)} characters,'
            f" at most {self.max_name_length} in this store"
        )

    async def _lookup_id(self, name: str) -> bytes | None:
        """Read the forward mapping of ``name`` (caching it when found); a name too long
        to be a row of this store has none."""
        if len(name) > self.max_name_length:
            return None
        raw = encode_name(name)
        uid = await self._get_cell(raw, ID_FAMILY)
        if uid is None:
            return None
        self._check_width(uid)
        self._remember(name, raw, uid)
        return uid

    def _check_width(self, uid: bytes) -> None:
        if len(uid) != self.width:
            raise CodecError(
                f"Found id.length = {len(uid)} which is != {self.width} required for '{self.kind}'"
            )

    async def _lookup_ids(self, names: Sequence[str]) -> dict[str, bytes]:
        """Read the forward mappings of ``names`` in one read; the ones found (cached).
        Names too long to be rows of this store have none (not read)."""
        limit = self.max_name_length
        if names and max(map(len, names)) > limit:  # (C speed: a burst's batch is 4,096)
            names = [name for name in names if len(name) <= limit]
        # ASCII names are stored as spelled (the common case: no Python step per name)
        raws = list(map(str.encode if "".join(names).isascii() else encode_name, names))
        distinct = list(dict.fromkeys(raws))
        uids = await self.storage.get_column(self.table, ID_FAMILY, self._qualifier, distinct)
        found: dict[str, bytes] = {}
        if uids.count(None) == len(uids):  # none assigned yet (a burst of new names)
            return found
        by_raw: dict[bytes, bytes] = {}
        for raw, uid in zip(distinct, uids, strict=True):
            if uid is not None:
                self._check_width(uid)
                by_raw[raw] = uid
        for name, raw in zip(names, raws, strict=True):
            uid = by_raw.get(raw)
            if uid is not None:
                self._remember(name, raw, uid)
                found[name] = uid
        return found

    # -- batched assignment -------------------------------------------------------------------

    async def _resolved(self, name: str) -> bytes:
        (batch,) = self._claim([name])
        await asyncio.shield(batch.done)  # a cancelled caller leaves the batch running
        return batch.result(name)

    def _claim(self, names: Sequence[str]) -> list[_Batch]:
        """The batches resolving ``names`` (distinct): a pending one is shared, the others
        join a batch that starts at the next loop turn. Names none of which is pending (a
        burst of new names) join in slices, a few dict and list operations per batch
        (:meth:`_claim_new`)."""
        creating = self._creating
        if len(names) > 1 and not (creating and any(map(creating.__contains__, names))):
            return self._claim_new(names)
        claimed: list[_Batch] = []
        last: _Batch | None = None
        filling = self._filling
        for name in names:
            batch = creating.get(name)
            if batch is None:
                if not filling or len(filling[-1].names) >= MAX_ASSIGN_BATCH:
                    loop = asyncio.get_running_loop()
                    if not filling:
                        loop.call_soon(self._start_batches)
                    filling.append(_Batch([], loop.create_future()))
                batch = creating[name] = filling[-1]
                batch.names.append(name)
            if batch is not last:
                if all(batch is not known for known in claimed):
                    claimed.append(batch)
                last = batch
        return claimed

    def _claim_new(self, names: Sequence[str]) -> list[_Batch]:
        """:meth:`_claim` of names none of which is pending: each filling batch takes the
        next slice that fits it (a name given twice joins once)."""
        creating, filling = self._creating, self._filling
        loop = asyncio.get_running_loop()
        claimed: list[_Batch] = []
        at = 0
        while at < len(names):
            if not filling or len(filling[-1].names) >= MAX_ASSIGN_BATCH:
                if not filling:
                    loop.call_soon(self._start_batches)
                filling.append(_Batch([], loop.create_future()))
            batch = filling[-1]
            part = names[at : at + MAX_ASSIGN_BATCH - len(batch.names)]
            at += len(part)
            before = len(creating)
            creating.update(zip(part, repeat(batch)))
            if len(creating) - before == len(part):
                batch.names += part
            else:  # a name given twice (not a caller's usual case): once in the batch
                have = set(batch.names)
                batch.names += [name for name in dict.fromkeys(part) if name not in have]
            claimed.append(batch)
        return claimed

    def _start_batches(self) -> None:
        batches, self._filling = self._filling, []
        for batch in batches:
            task = asyncio.get_running_loop().create_task(self._run_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: _Batch) -> None:
        """Resolve the batch's names and settle it (every name: its UID, or its error)."""
        try:
            results = await self._lookup_or_assign_many(batch.names)
        except BaseException as exc:  # cancelled (loop closing) included: no waiter hangs
            results = dict.fromkeys(batch.names, exc)
        batch.failed = any(map(isinstance, results.values(), repeat(BaseException)))
        creating = self._creating
        if not self._filling and len(self._running) <= 1:  # every entry is this batch's
            creating.clear()
        else:
            # A name joins one batch, and stays this batch's until here (_claim shares a
            # pending batch, _claim_new takes names none of which is pending): its entries
            # go at C speed, with no check per name.
            deque(map(creating.pop, batch.names, repeat(None)), maxlen=0)
        if not batch.done.done():
            batch.done.set_result(results)

    async def _lookup_or_assign_many(self, names: list[str]) -> dict[str, bytes | BaseException]:
        """Forward rows first; assign the names still missing; again for the names a
        corrupt reverse row or a vanished winner left, up to MAX_ATTEMPTS_ASSIGN_ID times
        (storage errors count as attempts). A name too long for the store is refused
        alone, up front (NameTooLong). When the last attempt fails with a storage error
        that is not systemic (:data:`SYSTEMIC_ERRORS`), the names left are tried again in
        halves, so that one name the store refuses fails alone rather than its whole
        batch; otherwise the error is every unresolved name's."""
        results: dict[str, bytes | BaseException] = {}
        limit = self.max_name_length
        if names and max(map(len, names)) > limit:
            results.update((n, self._too_long(n)) for n in names if len(n) > limit)
            names = [name for name in names if len(name) <= limit]
            if not names:
                return results
        todo = names
        last_error: BaseException | None = None
        for _attempt in range(MAX_ATTEMPTS_ASSIGN_ID):
            try:
                found = await self._lookup_ids(todo)
                if found:  # (a burst of new names finds none: no pass over them)
                    results.update(found)
                    todo = [name for name in todo if name not in results]
                if todo:
                    settled = await self._assign_many(todo)
                    results.update(settled)
                    # every name settled (its keys are todo's): no pass over them
                    todo = (
                        [] if len(settled) == len(todo) else [n for n in todo if n not in results]
                    )
            except (StorageError, CodecError) as exc:
                last_error = exc
                if isinstance(exc, CodecError):
                    break
            if not todo:
                return results
        if (
            len(todo) > 1
            and isinstance(last_error, StorageError)
            and not isinstance(last_error, SYSTEMIC_ERRORS)
        ):
            half = len(todo) // 2
            for part in (todo[:half], todo[half:]):
                results.update(await self._lookup_or_assign_many(part))
            return results
        for name in todo:
            results[name] = last_error or UidAssignmentError(
                f"Failed to assign an ID for kind='{self.kind}' name='{name}'"
            )
        return results

    async def _assign_many(self, names: list[str]) -> dict[str, bytes | BaseException]:
        """One increment by the number of new stored names, the reverse rows, the forward
        rows; returns the names settled (a UID, the winner's UID, or an exhaustion error).
        Names that share stored bytes (characters outside ISO-8859-1) share one UID.

        Whole lists at each step (a burst of new series assigns thousands of names a
        batch): ASCII names, the common case, are stored as spelled, so each is its own
        row and its mapping is cached with the others in one :meth:`UidCache.put_many`.
        """
        spellings: dict[bytes, list[str]] | None = None
        if "".join(names).isascii():
            raws = list(map(str.encode, names))
            spelled = names
        else:
            spellings = {}
            for name in names:
                spellings.setdefault(encode_name(name), []).append(name)
            raws = list(spellings)
            spelled = [decode_name(raw) for raw in raws]
        results: dict[str, bytes | BaseException] = {}
        width, qualifier = self.width, self._qualifier
        if self.random_ids:
            drawn = await self._random_reverse(raws)
            kept = [i for i, uid in enumerate(drawn) if uid is not None]
            if len(kept) < len(raws):
                for i, uid in enumerate(drawn):
                    if uid is None:
                        failed = UidAssignmentError(
                            f"Failed to assign a random ID for kind='{self.kind}'"
                            f" name='{spelled[i]}' after {MAX_ATTEMPTS_ASSIGN_RANDOM_ID}"
                            " attempts"
                        )
                        results.update(
                            dict.fromkeys(_names_of(spellings, raws[i], spelled[i]), failed)
                        )
                raws, spelled = _pick(raws, kept), _pick(spelled, kept)
            uids = [uid for uid in drawn if uid is not None]
        else:
            numbers = await self._reserve(len(raws))
            if len(numbers) < len(raws):
                exhausted = UidAssignmentError(
                    f"All Unique IDs for {self.kind} on {self.width} bytes are already assigned!"
                )
                usable = len(numbers)
                for raw, name in zip(raws[usable:], spelled[usable:], strict=True):
                    results.update(dict.fromkeys(_names_of(spellings, raw, name), exhausted))
                raws, spelled = raws[:usable], spelled[:usable]
            uids = list(map(_to_bytes, numbers, repeat(width), repeat("big")))
            # The IDs are this writer's alone (its increments reserved them): the reverse
            # mappings are plain puts, written (durably) before any forward mapping points
            # at them.
            await self.storage.put_column(
                self.table, CellColumn(NAME_FAMILY, qualifier, uids, raws)
            )
        if not raws:
            return results
        try:
            forward = await self.storage.put_if_absent_column(
                self.table, CellColumn(ID_FAMILY, qualifier, raws, uids)
            )
        except StorageError:
            await self._remove_unclaimed(raws, uids)
            raise
        lost: list[str] = []
        if not all(forward):  # another writer assigned some first: use its UIDs
            won = [i for i, applied in enumerate(forward) if applied]
            orphans: list[Delete] = []
            for i, applied in enumerate(forward):
                if not applied:
                    lost += _names_of(spellings, raws[i], spelled[i])
                    orphans.append(Delete(uids[i], NAME_FAMILY, qualifier))
            self.stats.lost_races += len(raws) - len(won)
            # Nothing points at a lost ID (no forward mapping does, and no other writer was
            # ever handed it): its reverse mapping is removed, the ID stays a gap.
            await self.storage.delete(self.table, orphans)
            self.stats.orphans_removed += len(orphans)
            raws, spelled, uids = _pick(raws, won), _pick(spelled, won), _pick(uids, won)
        self.stats.assignments += len(raws)
        if spellings is None:
            self.cache.put_many(spelled, uids)
            results.update(zip(spelled, uids, strict=True))
        else:
            for raw, uid in zip(raws, uids, strict=True):
                for name in spellings[raw]:
                    self._remember(name, raw, uid)
                    results[name] = uid
        if lost:
            results.update(await self._lookup_ids(lost))  # a winner deleted since: retried
        return results

    async def _remove_unclaimed(self, raws: list[bytes], uids: list[bytes]) -> None:
        """After forward check-and-puts that failed as a whole (some may have been applied
        before the failure): the reverse mappings of ``uids`` that no forward mapping points
        at are removed, as a lost race's are, so that a retry under new IDs leaves no
        orphan. Best effort: when the store cannot be read or written now, they stay for
        ``tsdb uid fsck --fix``."""
        try:
            rows = await self.storage.get_many(self.table, raws, (ID_FAMILY,))
            claimed = {row.value(ID_FAMILY, self._qualifier) for row in rows}
            orphans = [
                Delete(uid, NAME_FAMILY, self._qualifier) for uid in uids if uid not in claimed
            ]
            if orphans:
                await self.storage.delete(self.table, orphans)
        except StorageError:
            self.stats.orphans_left += len(uids)  # the call's own error is the caller's
            return
        self.stats.orphans_removed += len(orphans)

    async def _random_reverse(self, raws: list[bytes]) -> list[bytes | None]:
        """Random IDs for ``raws`` (OpenTSDB's random metric UIDs: no counter block): each
        reverse mapping is a check-and-put that the drawn ID is free, and a name whose ID
        another name holds draws again, up to MAX_ATTEMPTS_ASSIGN_RANDOM_ID times (None:
        every draw collided). The IDs kept are this writer's alone, as a block's are."""
        drawn: list[bytes | None] = [None] * len(raws)
        todo = list(range(len(raws)))
        for _attempt in range(MAX_ATTEMPTS_ASSIGN_RANDOM_ID):
            picked: dict[bytes, int] = {}  # distinct within the call (one check per cell)
            again: list[int] = []  # drew an ID another name of this call drew: next round
            for i in todo:
                uid = self._draw_id()
                if uid in picked:
                    again.append(i)
                else:
                    picked[uid] = i
            column = CellColumn(
                NAME_FAMILY, self._qualifier, list(picked), [raws[i] for i in picked.values()]
            )
            applied = await self.storage.put_if_absent_column(self.table, column)
            todo = again
            for (uid, i), free in zip(picked.items(), applied, strict=True):
                if free:
                    drawn[i] = uid
                else:
                    todo.append(i)
            self.stats.random_collisions += len(todo)
            if not todo:
                break
        return drawn

    def _draw_id(self) -> bytes:
        """A random ID of ``width`` bytes, never 0 (OpenTSDB's RandomUniqueId)."""
        return (secrets.randbelow(self._max_id) + 1).to_bytes(self.width, "big")

    async def _reserve(self, count: int) -> list[int]:
        """``count`` IDs of this writer's own: blocks reserved by one increment of the
        counter row each, a block as big as the batch needs (the burst's size, a batch
        holds up to MAX_ASSIGN_BATCH new names) up to ``block_size``; fewer IDs when those
        of ``width`` bytes run out. Nothing is reserved ahead of need, so the counter
        stays the highest ID in use but for the IDs of lost races and of a process
        stopped between its increment and its forward mappings (gaps nothing reads).
        """
        numbers: list[int] = []
        while len(numbers) < count:
            size = min(self.block_size, count - len(numbers))
            top = await self.storage.increment(
                self.table, MAXID_ROW, ID_FAMILY, self._qualifier, size
            )
            if top <= 0:
                raise UidAssignmentError(f"Got a negative ID from storage: {top}")
            self.stats.blocks += 1
            numbers += range(top - size + 1, min(top, self._max_id) + 1)
            if top >= self._max_id:
                break  # exhausted (the last ID, or past it)
        return numbers

    def _remember(self, name: str, raw: bytes, uid: bytes) -> None:
        """Cache a mapping under its stored name. A name with characters outside ISO-8859-1
        also gets a forward-only alias entry, so the next point spelling it so still hits."""
        if name.isascii():  # stored as it is spelled (the common case: no decoding)
            self.cache.put(name, uid)
            return
        stored = decode_name(raw)
        self.cache.put(stored, uid)
        if stored != name:
            self.cache.put_id(name, uid)
            self._has_aliases = True

    def _forget_name(self, name: str) -> None:
        """Drop ``name``'s forward entries. Aliases of its stored form cannot be found one by
        one, so once any exist the whole cache of this kind goes (rename/delete are rare)."""
        if self._has_aliases:
            self.cache.clear()
            self._has_aliases = False
        else:
            self.cache.discard_name(name)


def _names_of(spellings: dict[bytes, list[str]] | None, raw: bytes, name: str) -> list[str]:
    """The names stored as ``raw`` (``name`` alone when every name is ASCII)."""
    return [name] if spellings is None else spellings[raw]


def _pick(items: list[_T], indexes: list[int]) -> list[_T]:
    return [items[i] for i in indexes]


def _forget(pending: dict[str, asyncio.Task[_T]], name: str, done: asyncio.Task[_T]) -> None:
    """Drop a finished task from its map, marking its exception as seen.

    Every caller awaiting the task gets the exception; retrieving it here only keeps asyncio
    from logging "exception was never retrieved" when all of them were cancelled.
    """
    if pending.get(name) is done:
        del pending[name]
    if not done.cancelled():
        done.exception()
