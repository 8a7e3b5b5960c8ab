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

Assignment follows OpenTSDB exactly: atomically increment the counter; refuse an ID that does
not fit in ``width`` bytes; check-and-put the reverse mapping (must be absent); check-and-put
the forward mapping (must be absent). Losing the forward check-and-put means another writer
(another TSD) assigned the name first: its UID is read back and used, and the ID allocated here
is leaked, as in OpenTSDB. Within one process, concurrent callers asking for the same missing
name share one in-flight task, so they cost one increment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

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
    NoSuchUniqueId,
    NoSuchUniqueName,
    StorageError,
    UidAlreadyExists,
    UidAssignmentError,
)
from tsd.java_text import format_java_bytes
from tsd.storage.base import Delete, Put, ScanSpec, Storage
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
#: Default number of suggestions (OpenTSDB's MAX_SUGGESTIONS, /api/suggest's ``max``).
MAX_SUGGESTIONS = 25
#: Rows scanned for an empty suggest prefix: ``!`` (first printable ASCII) to ``~`` (excluded).
SUGGEST_START_ROW = b"!"
SUGGEST_STOP_ROW = b"~"
#: Rows fetched per scan round trip by suggest (OpenTSDB caps the scanner at 4096).
MAX_SUGGEST_BATCH_ROWS = 4096
#: The character set of names in the UID table (OpenTSDB's UniqueId.CHARSET).
CHARSET = "iso-8859-1"

_T = TypeVar("_T")


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
    #: forward check-and-puts lost to another writer (one leaked ID each)
    lost_races: int = 0
    #: reverse check-and-puts that found the fresh UID already mapped (a corrupt table)
    reverse_conflicts: int = 0
    #: get_or_create_id calls refused because auto-create is off for this kind
    refused_creations: int = 0


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
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if not MIN_UID_WIDTH <= width <= MAX_UID_WIDTH:
            raise ValueError(f"Invalid width: {width}")
        self.storage = storage
        self.table = table
        self.kind = kind
        self.width = width
        self.cache = cache
        self.auto_create = auto_create
        self.stats = UidStats()
        self._qualifier = kind.encode("ascii")
        self._max_id = (1 << (8 * width)) - 1
        # name -> the task resolving it (lookup, then assignment when missing)
        self._creating: dict[str, asyncio.Task[bytes]] = {}
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
        return await self._shared(self._creating, name, self._lookup_or_assign)

    async def assign(self, name: str) -> bytes:
        """Assign a UID to a new ``name`` whatever auto-create says (``tsdb mkmetric``,
        ``/api/uid/assign``). A name that has a UID already raises UidAlreadyExists."""
        try:
            uid = await self.get_id(name)
        except NoSuchUniqueName:
            return await self._shared(self._creating, name, self._lookup_or_assign)
        raise UidAlreadyExists(self.kind, name, uid)

    # -- UID -> name --------------------------------------------------------------------------

    def cached_name(self, uid: bytes) -> str | None:
        """The name of ``uid`` if cached (counted as a hit), else None (not counted)."""
        name = self.cache.get_name(uid)
        if name is not None:
            self.stats.cache_hits += 1
        return name

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

    async def _lookup_id(self, name: str) -> bytes | None:
        """Read the forward mapping of ``name`` (caching it when found)."""
        raw = encode_name(name)
        uid = await self._get_cell(raw, ID_FAMILY)
        if uid is None:
            return None
        if len(uid) != self.width:
            raise CodecError(
                f"Found id.length = {len(uid)} which is != {self.width} required for '{self.kind}'"
            )
        self._remember(name, raw, uid)
        return uid

    async def _lookup_or_assign(self, name: str) -> bytes:
        uid = await self._lookup_id(name)
        if uid is not None:
            return uid
        return await self._assign_new(name)

    async def _assign_new(self, name: str) -> bytes:
        """OpenTSDB's UniqueIdAllocator: increment, CAS reverse, CAS forward."""
        raw = encode_name(name)
        last_error: StorageError | None = None
        for _attempt in range(MAX_ATTEMPTS_ASSIGN_ID):
            try:
                new_id = await self.storage.increment(
                    self.table, MAXID_ROW, ID_FAMILY, self._qualifier
                )
            except StorageError as exc:
                last_error = exc
                continue
            if new_id <= 0:
                raise UidAssignmentError(f"Got a negative ID from storage: {new_id}")
            if new_id > self._max_id:
                raise UidAssignmentError(
                    f"All Unique IDs for {self.kind} on {self.width} bytes are already assigned!"
                )
            uid = new_id.to_bytes(self.width, "big")
            try:
                if not await self.storage.check_and_put(
                    self.table,
                    uid,
                    NAME_FAMILY,
                    self._qualifier,
                    None,
                    Put(uid, NAME_FAMILY, self._qualifier, raw),
                ):
                    # A fresh ID already has a name: the table is corrupt (OpenTSDB says
                    # "run an fsck"). Skip this ID and allocate another.
                    self.stats.reverse_conflicts += 1
                    continue
                if not await self.storage.check_and_put(
                    self.table,
                    raw,
                    ID_FAMILY,
                    self._qualifier,
                    None,
                    Put(raw, ID_FAMILY, self._qualifier, uid),
                ):
                    # Another writer assigned this name first; use its UID, leak ours.
                    self.stats.lost_races += 1
                    winner = await self._lookup_id(name)
                    if winner is not None:
                        return winner
                    continue  # deleted in between: try again
            except StorageError as exc:
                last_error = exc
                continue
            self.stats.assignments += 1
            self._remember(name, raw, uid)
            return uid
        if last_error is not None:
            raise last_error
        raise UidAssignmentError(f"Failed to assign an ID for kind='{self.kind}' name='{name}'")

    def _remember(self, name: str, raw: bytes, uid: bytes) -> None:
        """Cache a mapping under its stored name. A name with characters outside ISO-8859-1
        also gets a forward-only alias entry, so the next point spelling it so still hits."""
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


def _forget(pending: dict[str, asyncio.Task[_T]], name: str, done: asyncio.Task[_T]) -> None:
    """Drop a finished task from its map, marking its exception as seen.

    Every caller awaiting the task gets the exception; retrieving it here only keeps asyncio
    from logging "exception was never retrieved" when all of them were cancelled.
    """
    if pending.get(name) is done:
        del pending[name]
    if not done.cancelled():
        done.exception()
