"""UIDMeta: descriptive metadata of one metric, tag key or tag value UID.

Layout (OpenTSDB 2.4.1 ``src/meta/UIDMeta.java``; behaviour doc §4.5, ERRATA.md): in the UID
table, row = the UID bytes, family ``name``, qualifier ``metric_meta`` / ``tagk_meta`` /
``tagv_meta``, value = JSON written in this fixed order (so that a compare-and-set against
the stored bytes works)::

    {"type":"METRIC","displayName":"","description":"","notes":"","created":1350425579,
     "custom":null}

The name and the UID are not stored in the JSON: they come from the row and the reverse
mapping. The HTTP form (``/api/uid/uidmeta``) is Jackson's view of the object::

    {"uid":"00002A","type":"METRIC","name":"sys.cpu.0","description":"","notes":"",
     "created":1350425579,"custom":null,"displayName":""}

A UID without a stored UIDMeta still answers GET with a default object (``created`` 0), as
OpenTSDB does for data written before meta tracking was turned on.

Updates follow ``UIDMeta.syncToStorage``: only the fields the client set count as changes
(none -> :class:`~tsd.errors.NotModified`); POST keeps the stored values of the fields not
given, PUT resets them; ``created`` keeps the earliest known time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson

from tsd.codec import parse_tsuid_hex
from tsd.codec.const import UID_META_QUALIFIERS, UID_NAME_FAMILY
from tsd.errors import BadRequestError, CodecError, NotModified
from tsd.meta.binding import as_custom, as_long, as_object, as_text
from tsd.protocol.names import java_hash_order
from tsd.storage.base import Delete, Put, Storage
from tsd.uid.service import UidService
from tsd.uid.uniqueid import UniqueId

#: UniqueId kind -> OpenTSDB's UniqueIdType name, as written in the JSON.
TYPE_NAMES = {"metrics": "METRIC", "tagk": "TAGK", "tagv": "TAGV"}
#: The user-writable fields (and ``created``), in OpenTSDB's storage order.
USER_FIELDS = ("display_name", "description", "notes", "custom")


@dataclass(slots=True)
class UidMeta:
    """One UIDMeta object. ``uid`` is upper-case hex, ``type`` METRIC, TAGK or TAGV."""

    uid: str
    type: str
    name: str = ""
    display_name: str = ""
    description: str = ""
    notes: str = ""
    created: int = 0
    custom: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The HTTP representation (Jackson's property order)."""
        return {
            "uid": self.uid,
            "type": self.type,
            "name": self.name,
            "description": self.description,
            "notes": self.notes,
            "created": self.created,
            "custom": java_map(self.custom),
            "displayName": self.display_name,
        }

    def storage_json(self) -> bytes:
        """The stored cell value (UIDMeta.getStorageJSON's fixed order)."""
        return orjson.dumps(
            {
                "type": self.type,
                "displayName": self.display_name,
                "description": self.description,
                "notes": self.notes,
                "created": self.created,
                "custom": java_map(self.custom),
            }
        )


def java_map(custom: Mapping[str, str] | None) -> dict[str, str] | None:
    """A custom map in the iteration order of the HashMap OpenTSDB keeps it in."""
    if custom is None:
        return None
    return {key: custom[key] for key in java_hash_order(custom)}


def parse_stored_uidmeta(raw: bytes, uid: str, type_name: str, name: str) -> UidMeta:
    """A stored UIDMeta cell; ``uid`` and ``name`` come from the row and the UID table."""
    try:
        document = as_object(orjson.loads(raw), "UIDMeta")
    except (orjson.JSONDecodeError, BadRequestError) as exc:
        raise CodecError(f"Unable to parse the stored UIDMeta of {uid}: {exc}") from None
    stored_type = document.get("type")
    return UidMeta(
        uid=uid,
        type=stored_type.upper() if isinstance(stored_type, str) and stored_type else type_name,
        name=name,
        display_name=as_text(document.get("displayName"), "displayName") or "",
        description=as_text(document.get("description"), "description") or "",
        notes=as_text(document.get("notes"), "notes") or "",
        created=as_long(document.get("created"), "created"),
        custom=as_custom(document.get("custom")),
    )


# -- updates from clients ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UidMetaUpdate:
    """What a client sent: the target and the fields it set (UIDMeta's ``changed`` map)."""

    uid: str
    type: str
    changes: Mapping[str, Any]


def update_from_json(document: object) -> UidMetaUpdate:
    """Bind a POST/PUT/DELETE body. Setters mark a field changed only when the value
    differs from a fresh object's default, as UIDMeta's do."""
    fields = as_object(document, "UIDMeta")
    changes: dict[str, Any] = {}
    for key, attr in (("displayName", "display_name"), ("description", "description")):
        _set_text(changes, attr, as_text(fields.get(key), key))
    _set_text(changes, "notes", as_text(fields.get("notes"), "notes"))
    custom = as_custom(fields.get("custom"))
    if custom is not None:
        changes["custom"] = custom
    created = as_long(fields.get("created"), "created")
    if created:
        changes["created"] = created
    return UidMetaUpdate(
        uid=as_text(fields.get("uid"), "uid") or "",
        type=as_text(fields.get("type"), "type") or "",
        changes=changes,
    )


def update_from_params(params: Mapping[str, str]) -> UidMetaUpdate:
    """Bind the query-string form (``uid``, ``type``, ``display_name``, ``description``,
    ``notes``); the caller has checked that ``uid`` and ``type`` are present."""
    changes: dict[str, Any] = {}
    for attr in ("display_name", "description", "notes"):
        _set_text(changes, attr, params.get(attr))
    return UidMetaUpdate(uid=params["uid"], type=params["type"], changes=changes)


def _set_text(changes: dict[str, Any], attr: str, value: str | None) -> None:
    if value:  # a setter given the default ("") changes nothing
        changes[attr] = value


def merge_uidmeta(
    uid: str, type_name: str, changes: Mapping[str, Any], stored: UidMeta | None, overwrite: bool
) -> UidMeta:
    """UIDMeta.syncMeta: the object to store given the client's changes and the stored one."""
    local = UidMeta(uid=uid, type=type_name, **changes)
    return sync_meta(local, stored, changes, overwrite, USER_FIELDS)


class _Meta(Protocol):
    created: int


_M = TypeVar("_M", bound=_Meta)


def sync_meta(
    local: _M,
    stored: _M | None,
    changes: Mapping[str, Any],
    overwrite: bool,
    user_fields: tuple[str, ...],
) -> _M:
    """OpenTSDB's syncMeta rule shared by UIDMeta and TSMeta: keep the older creation time
    and, unless overwriting, every user field the client did not send."""
    if stored is None:
        return local
    if stored.created > 0 and (stored.created < local.created or local.created == 0):
        local.created = stored.created
    if not overwrite:
        for attr in user_fields:
            if attr not in changes:
                setattr(local, attr, getattr(stored, attr))
    return local


# -- storage ----------------------------------------------------------------------------------


async def save_if_unchanged(
    storage: Storage,
    table: str,
    key: tuple[bytes, str, bytes],
    original: bytes | None,
    value: bytes,
    what: str,
) -> None:
    """The compare-and-set save of a meta cell (``syncToStorage`` of UIDMeta, TSMeta and
    Annotation): ``key`` (row, family, qualifier) must still hold ``original``, else
    OpenTSDB's 500 for a cell another process changed meanwhile."""
    row, family, qualifier = key
    put = Put(row, family, qualifier, value)
    if not await storage.check_and_put(table, row, family, qualifier, original, put):
        raise changed_meanwhile(what)


def changed_meanwhile(what: str) -> BadRequestError:
    """OpenTSDB's 500 for a meta cell another process changed between read and save."""
    return BadRequestError(
        f"Failed to save the {what} to storage",
        "This may be caused by another process modifying storage data",
        status=500,
    )


def meta_qualifier(unique_id: UniqueId) -> bytes:
    """``metric_meta``, ``tagk_meta`` or ``tagv_meta`` for a UniqueId's kind."""
    return UID_META_QUALIFIERS[unique_id.kind.encode("ascii")]


def parse_uid(text: str) -> bytes:
    """UniqueId.stringToUid for a client-supplied UID (400 when it is not hex)."""
    if not text:
        raise BadRequestError("Missing UID", "Missing UID")
    try:
        return parse_tsuid_hex(text)
    except CodecError as exc:
        raise BadRequestError(exc.message, exc.message) from None


class UidMetaStore:
    """Reads and writes UIDMeta cells in the UID table."""

    def __init__(self, storage: Storage, uid_table: str, uids: UidService) -> None:
        self._storage = storage
        self._table = uid_table
        self._uids = uids

    async def get(self, type_name: str, uid_text: str) -> UidMeta:
        """UIDMeta.getUIDMeta: the stored object or a default one; NoSuchUniqueId when the
        UID has no name."""
        unique_id = self._uids.by_type(type_name)
        uid = parse_uid(uid_text)
        return await self.get_by_uid(unique_id, uid)

    async def get_by_uid(self, unique_id: UniqueId, uid: bytes) -> UidMeta:
        name = await unique_id.get_name(uid)
        raw = await self._read(unique_id, uid)
        uid_hex = uid.hex().upper()
        type_name = TYPE_NAMES[unique_id.kind]
        if raw is None:
            return UidMeta(uid=uid_hex, type=type_name, name=name)
        return parse_stored_uidmeta(raw, uid_hex, type_name, name)

    async def sync(self, update: UidMetaUpdate, overwrite: bool) -> UidMeta:
        """UIDMeta.syncToStorage, then the stored result. NotModified when nothing was set;
        NoSuchUniqueId when the UID has no name; 500 when the cell changed meanwhile."""
        if not update.uid:
            raise BadRequestError("Missing UID", "Missing UID")
        if not update.type:
            raise BadRequestError("Missing type", "Missing type")
        unique_id = self._uids.by_type(update.type)
        uid = parse_uid(update.uid)
        if not update.changes:
            raise NotModified("No changes detected in UID meta data")
        await unique_id.get_name(uid)
        original = await self._read(unique_id, uid)
        type_name = TYPE_NAMES[unique_id.kind]
        uid_hex = uid.hex().upper()
        stored = (
            None if original is None else parse_stored_uidmeta(original, uid_hex, type_name, "")
        )
        merged = merge_uidmeta(uid_hex, type_name, update.changes, stored, overwrite)
        qualifier = meta_qualifier(unique_id)
        await save_if_unchanged(
            self._storage,
            self._table,
            (uid, UID_NAME_FAMILY, qualifier),
            original,
            merged.storage_json(),
            "UIDMeta",
        )
        return await self.get_by_uid(unique_id, uid)

    async def delete(self, type_name: str, uid_text: str) -> None:
        """UIDMeta.delete: drop the cell (the UID itself stays)."""
        unique_id = self._uids.by_type(type_name)
        uid = parse_uid(uid_text)
        await self._storage.delete(
            self._table, [Delete(uid, UID_NAME_FAMILY, meta_qualifier(unique_id))]
        )

    async def store_new_if_missing(
        self, unique_id: UniqueId, uid: bytes, name: str, created_s: int
    ) -> bool:
        """Write a fresh UIDMeta (``tsd.core.meta.enable_realtime_uid``) unless one exists;
        True when written."""
        meta = UidMeta(uid=uid.hex().upper(), type=TYPE_NAMES[unique_id.kind], name=name)
        return await self._put_if(
            unique_id, uid, None, dataclasses.replace(meta, created=created_s)
        )

    async def backdate(self, unique_id: UniqueId, uid: bytes, name: str, created_s: int) -> bool:
        """MetaSync's UIDMeta step: write a fresh UIDMeta created at ``created_s`` when none
        is stored; set ``created`` of a stored one whose time is 0 or over an hour later.
        True when written."""
        raw = await self._read(unique_id, uid)
        if raw is None:
            return await self.store_new_if_missing(unique_id, uid, name, created_s)
        meta = parse_stored_uidmeta(raw, uid.hex().upper(), TYPE_NAMES[unique_id.kind], name)
        if meta.created != 0 and meta.created <= created_s + 3600:
            return False
        return await self._put_if(unique_id, uid, raw, dataclasses.replace(meta, created=created_s))

    async def _put_if(
        self, unique_id: UniqueId, uid: bytes, expected: bytes | None, meta: UidMeta
    ) -> bool:
        """Store ``meta`` if the cell still holds ``expected`` (None: no cell)."""
        qualifier = meta_qualifier(unique_id)
        return await self._storage.check_and_put(
            self._table,
            uid,
            UID_NAME_FAMILY,
            qualifier,
            expected,
            Put(uid, UID_NAME_FAMILY, qualifier, meta.storage_json()),
        )

    async def _read(self, unique_id: UniqueId, uid: bytes) -> bytes | None:
        row = await self._storage.get(self._table, uid, (UID_NAME_FAMILY,))
        return None if row is None else row.value(UID_NAME_FAMILY, meta_qualifier(unique_id))
