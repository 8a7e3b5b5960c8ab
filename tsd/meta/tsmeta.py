"""TSMeta: metadata of one time series, in the meta table.

Layout (OpenTSDB 2.4.1 ``src/meta/TSMeta.java``; behaviour doc §4.6, ERRATA.md): row = the
TSUID bytes (never salted), family ``name``:

* ``ts_meta``: JSON in this fixed order (non-finite doubles quoted, as Jackson writes them)::

      {"tsuid":"000001000001000001","displayName":"","description":"","notes":"",
       "created":1350425579,"custom":null,"units":"","dataType":"","retention":0,
       "max":"NaN","min":"NaN"}

* ``ts_ctr``: an 8-byte big-endian counter (``totalDatapoints``).

The HTTP form adds the UIDMeta of the metric and of every tag key and value (``metric``,
``tags``), ``lastReceived`` and ``totalDatapoints``. OpenTSDB takes ``lastReceived`` from the
counter cell's HBase timestamp; the storage interface has no cell timestamps, so tsd answers
0 there (documented departure).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import orjson

from tsd.codec import KeyLayout, parse_tsuid_hex, split_tsuid
from tsd.codec.const import TSMETA_COUNTER_QUALIFIER, TSMETA_FAMILY, TSMETA_QUALIFIER
from tsd.errors import BadRequestError, CodecError, NotModified
from tsd.java_text import jackson_double
from tsd.meta.binding import (
    as_custom,
    as_double,
    as_int,
    as_long,
    as_object,
    as_text,
)
from tsd.meta.uidmeta import UidMeta, UidMetaStore, java_map, save_if_unchanged, sync_meta
from tsd.storage.base import Delete, Put, RowFilter, ScanSpec, Storage
from tsd.uid.service import UidService

#: User-writable fields, in the storage order.
USER_FIELDS = (
    "display_name",
    "description",
    "notes",
    "custom",
    "units",
    "data_type",
    "retention",
    "max",
    "min",
)


@dataclass(slots=True)
class TsMeta:
    """One TSMeta object (``tsuid`` upper-case hex)."""

    tsuid: str
    display_name: str = ""
    description: str = ""
    notes: str = ""
    created: int = 0
    custom: dict[str, str] | None = None
    units: str = ""
    data_type: str = ""
    retention: int = 0
    max: float = math.nan
    min: float = math.nan
    last_received: int = 0
    total_dps: int = 0
    metric: UidMeta | None = None
    tags: list[UidMeta] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """The HTTP representation (Jackson's order; ``metric``, ``tags``, ``custom`` left
        out when null, as ``@JsonInclude(NON_NULL)`` does)."""
        out: dict[str, Any] = {"tsuid": self.tsuid}
        if self.metric is not None:
            out["metric"] = self.metric.to_json()
        if self.tags is not None:
            out["tags"] = [tag.to_json() for tag in self.tags]
        out["description"] = self.description
        out["notes"] = self.notes
        out["created"] = self.created
        if self.custom is not None:
            out["custom"] = java_map(self.custom)
        out.update(
            units=self.units,
            retention=self.retention,
            max=jackson_double(self.max),
            min=jackson_double(self.min),
            displayName=self.display_name,
            dataType=self.data_type,
            lastReceived=self.last_received,
            totalDatapoints=self.total_dps,
        )
        return out

    def storage_json(self) -> bytes:
        """The ``ts_meta`` cell (TSMeta.getStorageJSON's fixed order)."""
        return orjson.dumps(
            {
                "tsuid": self.tsuid,
                "displayName": self.display_name,
                "description": self.description,
                "notes": self.notes,
                "created": self.created,
                "custom": java_map(self.custom),
                "units": self.units,
                "dataType": self.data_type,
                "retention": self.retention,
                "max": jackson_double(self.max),
                "min": jackson_double(self.min),
            }
        )


def parse_stored_tsmeta(raw: bytes, row_tsuid: str) -> TsMeta:
    """A stored ``ts_meta`` cell (the row key fills a missing ``tsuid``)."""
    try:
        doc = as_object(orjson.loads(raw), "TSMeta")
        return TsMeta(
            tsuid=as_text(doc.get("tsuid"), "tsuid") or row_tsuid,
            display_name=as_text(doc.get("displayName"), "displayName") or "",
            description=as_text(doc.get("description"), "description") or "",
            notes=as_text(doc.get("notes"), "notes") or "",
            created=as_long(doc.get("created"), "created"),
            custom=as_custom(doc.get("custom")),
            units=as_text(doc.get("units"), "units") or "",
            data_type=as_text(doc.get("dataType"), "dataType") or "",
            retention=as_int(doc.get("retention"), "retention"),
            max=as_double(doc.get("max"), "max"),
            min=as_double(doc.get("min"), "min"),
        )
    except (orjson.JSONDecodeError, BadRequestError) as exc:
        raise CodecError(f"Unable to parse the stored TSMeta of {row_tsuid}: {exc}") from None


# -- updates from clients ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TsMetaUpdate:
    """What a client sent: the TSUID (may be empty) and the fields it set."""

    tsuid: str
    changes: Mapping[str, Any]


_TEXT_FIELDS = (
    ("displayName", "display_name"),
    ("description", "description"),
    ("notes", "notes"),
    ("units", "units"),
    ("dataType", "data_type"),
)


def tsmeta_update_from_json(document: object) -> TsMetaUpdate:
    """Bind a body the way TSMeta's setters see it (a field is changed when set to
    something other than a fresh object's default; ``max``/``min`` whenever present,
    since Java's ``NaN != x`` is always true)."""
    doc = as_object(document, "TSMeta")
    changes: dict[str, Any] = {}
    for key, attr in _TEXT_FIELDS:
        value = as_text(doc.get(key), key)
        if value:
            changes[attr] = value
    custom = as_custom(doc.get("custom"))
    if custom is not None:
        changes["custom"] = custom
    created = as_long(doc.get("created"), "created")
    if created:
        changes["created"] = created
    retention = as_int(doc.get("retention"), "retention")
    if retention:
        changes["retention"] = retention
    for key in ("max", "min"):
        if doc.get(key) is not None:
            changes[key] = as_double(doc[key], key)
    return TsMetaUpdate(as_text(doc.get("tsuid"), "tsuid") or "", changes)


def tsmeta_update_from_params(params: Mapping[str, str]) -> TsMetaUpdate:
    """Bind the query-string form (UniqueIdRpc.parseTSMetaQS)."""
    changes: dict[str, Any] = {}
    for attr in ("display_name", "description", "notes", "units", "data_type"):
        if params.get(attr):
            changes[attr] = params[attr]
    retention = params.get("retention")
    if retention:
        try:
            changes["retention"] = int(retention)
        except ValueError:
            raise BadRequestError("Unable to parse 'retention' value") from None
        if changes["retention"] == 0:
            del changes["retention"]
    for attr in ("max", "min"):
        text = params.get(attr)
        if text:
            try:
                changes[attr] = float(text)
            except ValueError:
                raise BadRequestError(f"Unable to parse '{attr}' value") from None
    return TsMetaUpdate(params.get("tsuid", ""), changes)


def merge_tsmeta(
    tsuid: str, changes: Mapping[str, Any], stored: TsMeta | None, overwrite: bool
) -> TsMeta:
    """TSMeta.syncMeta: the object to store given the client's changes and the stored one."""
    local = TsMeta(tsuid=tsuid, **changes)
    return sync_meta(local, stored, changes, overwrite, USER_FIELDS)


# -- storage ----------------------------------------------------------------------------------


def parse_client_tsuid(layout: KeyLayout, text: str) -> bytes:
    """A TSUID from a client, checked like UniqueId.getTagsFromTSUID (400 when malformed)."""
    if not text:
        raise BadRequestError("Missing TSUID", "Missing TSUID")
    try:
        tsuid = parse_tsuid_hex(text)
        split_tsuid(layout, tsuid)
    except CodecError as exc:
        raise BadRequestError(exc.message, exc.message) from None
    return tsuid


class TsMetaStore:
    """Reads and writes TSMeta rows in the meta table."""

    def __init__(
        self,
        storage: Storage,
        meta_table: str,
        layout: KeyLayout,
        uids: UidService,
        uid_metas: UidMetaStore,
    ) -> None:
        self._storage = storage
        self._table = meta_table
        self._layout = layout
        self._uids = uids
        self._uid_metas = uid_metas

    async def get(self, tsuid: bytes, *, load_uids: bool = True) -> TsMeta | None:
        """TSMeta.getTSMeta: None when the row has no ``ts_meta`` cell. With ``load_uids``
        the UIDMeta of the metric and tags are attached (NoSuchUniqueId when one has no
        name)."""
        row = await self._storage.get(self._table, tsuid, (TSMETA_FAMILY,))
        if row is None:
            return None
        raw = row.value(TSMETA_FAMILY, TSMETA_QUALIFIER)
        if raw is None:
            return None
        meta = parse_stored_tsmeta(raw, tsuid.hex().upper())
        counter = row.value(TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER)
        if counter is not None and len(counter) == 8:
            meta.total_dps = int.from_bytes(counter, "big", signed=True)
        if load_uids:
            await self._attach_uid_metas(meta, tsuid)
        return meta

    async def exists(self, tsuid: bytes) -> bool:
        """TSMeta.metaExistsInStorage."""
        row = await self._storage.get(self._table, tsuid, (TSMETA_FAMILY,))
        return row is not None and row.value(TSMETA_FAMILY, TSMETA_QUALIFIER) is not None

    async def sync(self, tsuid: bytes, changes: Mapping[str, Any], overwrite: bool) -> TsMeta:
        """TSMeta.syncToStorage then the stored result. NotModified when nothing was set,
        NoSuchUniqueId for a UID without a name, 400 when there is no TSMeta to update."""
        if not changes:
            raise NotModified("No changes detected in TSUID meta data")
        await self._resolve_names(tsuid)
        row = await self._storage.get(self._table, tsuid, (TSMETA_FAMILY,))
        original = None if row is None else row.value(TSMETA_FAMILY, TSMETA_QUALIFIER)
        if original is None:
            raise BadRequestError(
                "Requested TSMeta did not exist", "Requested TSMeta did not exist"
            )
        tsuid_hex = tsuid.hex().upper()
        stored = parse_stored_tsmeta(original, tsuid_hex)
        merged = merge_tsmeta(tsuid_hex, changes, stored, overwrite)
        await save_if_unchanged(
            self._storage,
            self._table,
            (tsuid, TSMETA_FAMILY, TSMETA_QUALIFIER),
            original,
            merged.storage_json(),
            "TSMeta",
        )
        return await self._get_existing(tsuid)

    async def create(self, tsuid: bytes, changes: Mapping[str, Any]) -> TsMeta:
        """``POST /api/uid/tsmeta?m=...&create=true`` for a series without a TSMeta: a zero
        counter when there is none, then the TSMeta as given (TSMeta.storeNew)."""
        zero = (0).to_bytes(8, "big")
        await self._storage.check_and_put(
            self._table,
            tsuid,
            TSMETA_FAMILY,
            TSMETA_COUNTER_QUALIFIER,
            None,
            Put(tsuid, TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER, zero),
        )
        meta = TsMeta(tsuid=tsuid.hex().upper(), **changes)
        await self._storage.put(
            self._table, [Put(tsuid, TSMETA_FAMILY, TSMETA_QUALIFIER, meta.storage_json())]
        )
        return await self._get_existing(tsuid)

    async def store_new_if_missing(self, tsuid: bytes, created_s: int) -> bool:
        """TSMeta.storeIfNecessary (``enable_realtime_ts``): True when written now."""
        meta = TsMeta(tsuid=tsuid.hex().upper(), created=created_s)
        return await self._storage.check_and_put(
            self._table,
            tsuid,
            TSMETA_FAMILY,
            TSMETA_QUALIFIER,
            None,
            Put(tsuid, TSMETA_FAMILY, TSMETA_QUALIFIER, meta.storage_json()),
        )

    async def backdate(self, tsuid: bytes, created_s: int, now_s: int, realtime: bool) -> bool:
        """MetaSync's TSMeta step for a series first stored at ``created_s``: with no
        ``ts_meta`` and no ``ts_ctr``, the counter goes to 1 (and with ``realtime``, as
        ``enable_realtime_ts``, a TSMeta created ``now_s``); with the counter alone, a TSMeta
        created at ``created_s``; a stored TSMeta whose ``created`` is 0 or over an hour
        later gets ``created_s``. True when a TSMeta or counter was written."""
        row = await self._storage.get(self._table, tsuid, (TSMETA_FAMILY,))
        raw = None if row is None else row.value(TSMETA_FAMILY, TSMETA_QUALIFIER)
        if raw is None:
            if row is None or row.value(TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER) is None:
                count = await self._storage.increment(
                    self._table, tsuid, TSMETA_FAMILY, TSMETA_COUNTER_QUALIFIER
                )
                if realtime and count == 1:
                    await self.store_new_if_missing(tsuid, now_s)
                return True
            return await self.store_new_if_missing(tsuid, created_s)
        meta = parse_stored_tsmeta(raw, tsuid.hex().upper())
        if meta.created != 0 and meta.created <= created_s + 3600:
            return False
        meta.created = created_s
        return await self._storage.check_and_put(
            self._table,
            tsuid,
            TSMETA_FAMILY,
            TSMETA_QUALIFIER,
            raw,
            Put(tsuid, TSMETA_FAMILY, TSMETA_QUALIFIER, meta.storage_json()),
        )

    async def delete(self, tsuid: bytes) -> None:
        """TSMeta.delete: only the ``ts_meta`` cell (the counter stays)."""
        await self._storage.delete(self._table, [Delete(tsuid, TSMETA_FAMILY, TSMETA_QUALIFIER)])

    async def list_matching(self, metric_uid: bytes, row_regex: bytes | None) -> list[TsMeta]:
        """TSUIDQuery.getTSMetas: the stored TSMeta of the metric's series whose TSUID
        matches ``row_regex`` (full match), with their UIDMeta, in TSUID order."""
        stop = _next_key(metric_uid)
        spec = ScanSpec(
            start=metric_uid,
            stop=stop,
            families=(TSMETA_FAMILY,),
            row_filter=RowFilter(row_regex) if row_regex is not None else None,
        )
        found: list[TsMeta] = []
        async with aclosing(self._storage.scan(self._table, spec)) as rows:
            async for row in rows:
                raw = row.value(TSMETA_FAMILY, TSMETA_QUALIFIER)
                if raw is not None:
                    found.append(parse_stored_tsmeta(raw, row.key.hex().upper()))
        for meta in found:
            tsuid = parse_tsuid_hex(meta.tsuid)
            loaded = await self.get(tsuid, load_uids=True)
            if loaded is not None:
                meta.total_dps = loaded.total_dps
                meta.metric, meta.tags = loaded.metric, loaded.tags
        return found

    async def _get_existing(self, tsuid: bytes) -> TsMeta:
        meta = await self.get(tsuid)
        if meta is None:  # deleted in between
            raise BadRequestError("Could not find Timeseries meta data", status=404)
        return meta

    async def _resolve_names(self, tsuid: bytes) -> None:
        metric_uid, pairs = split_tsuid(self._layout, tsuid)
        await self._uids.metrics.get_name(metric_uid)
        for tagk, tagv in pairs:
            await self._uids.tagk.get_name(tagk)
            await self._uids.tagv.get_name(tagv)

    async def _attach_uid_metas(self, meta: TsMeta, tsuid: bytes) -> None:
        metric_uid, pairs = split_tsuid(self._layout, tsuid)
        meta.metric = await self._uid_metas.get_by_uid(self._uids.metrics, metric_uid)
        tags: list[UidMeta] = []
        for tagk, tagv in pairs:
            tags.append(await self._uid_metas.get_by_uid(self._uids.tagk, tagk))
            tags.append(await self._uid_metas.get_by_uid(self._uids.tagv, tagv))
        meta.tags = tags


def _next_key(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (b"": to the end)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b""
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


def tsuid_pairs_regex(layout: KeyLayout, pairs: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """A meta-table row regex: TSUIDs holding every (tagk, tagv) pair (TSUIDQuery's
    scanner filter). None when there are no pairs."""
    if not pairs:
        return None
    gap = b"(?:.{%d})*" % layout.tag_pair_width
    parts = [b".{%d}" % layout.metric_width]
    for tagk, tagv in sorted(pairs):
        parts += [gap, re.escape(tagk + tagv)]
    parts.append(gap)
    return b"".join(parts)
