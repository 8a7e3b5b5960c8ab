"""Annotations: notes on a series or on everything (global), kept in the data table.

Layout (OpenTSDB 2.4.1 ``src/meta/Annotation.java``; behaviour doc §4.7):

* series note: the series' data row of the note's hour (salted like the data), family ``t``,
  qualifier ``01`` + offset (2 bytes for a seconds time, 4 for milliseconds; see
  :func:`tsd.codec.encode_annotation_qualifier` for OpenTSDB's quirk with seconds that are a
  multiple of 1000);
* global note: row = salt-width zero bytes + metric-width zero bytes + base time, no tags,
  never salted;
* value: JSON in this order, ``tsuid`` only for series notes, ``custom`` sorted::

      {"tsuid":"000001000001000001","startTime":1369141261,"endTime":0,
       "description":"Network Outage","notes":"","custom":null}

The HTTP form is Jackson's view (``custom`` left out when null)::

      {"tsuid":"...","description":"...","notes":"","custom":{..},"endTime":0,
       "startTime":1369141261}

Range reads trust the JSON's ``startTime``/``endTime`` (as OpenTSDB's getGlobalAnnotations
does); range deletes use the qualifier's time (as its deleteRange does).

API for the query engine (``/api/query`` ``annotations`` / ``globalAnnotations``):

* :func:`annotation_json` turns a stored cell value (``AnnotationCell.json`` from
  ``tsd.codec.decode_cells`` or ``tsd.query.decode``) into the object to emit;
* :meth:`AnnotationStore.global_in_range` reads the global notes of a time range.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

import orjson

from tsd.codec import (
    KeyLayout,
    decode_annotation_qualifier,
    encode_annotation_qualifier,
    parse_tsuid_hex,
    row_key_from_tsuid,
)
from tsd.codec.const import ANNOTATION_PREFIX, FAMILY, MAX_TIMESPAN, SECOND_MASK, TIMESTAMP_BYTES
from tsd.errors import BadRequestError, CodecError, NotModified
from tsd.meta.binding import as_custom, as_long, as_object, as_text
from tsd.meta.uidmeta import changed_meanwhile, save_if_unchanged
from tsd.protocol.names import java_hash_order
from tsd.storage.base import CheckAndPut, Delete, Put, RowFilter, ScanSpec, Storage


@dataclass(frozen=True, slots=True)
class Annotation:
    """One note. ``tsuid`` is "" for a global note; times as given (seconds usually)."""

    start_time: int
    tsuid: str = ""
    end_time: int = 0
    description: str = ""
    notes: str = ""
    custom: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The HTTP representation."""
        out: dict[str, Any] = {
            "tsuid": self.tsuid,
            "description": self.description,
            "notes": self.notes,
        }
        if self.custom is not None:
            out["custom"] = {k: self.custom[k] for k in java_hash_order(self.custom)}
        out["endTime"] = self.end_time
        out["startTime"] = self.start_time
        return out

    def storage_json(self) -> bytes:
        """The stored cell value (Annotation.getStorageJSON's order)."""
        out: dict[str, Any] = {}
        if self.tsuid:
            out["tsuid"] = self.tsuid
        out.update(
            startTime=self.start_time,
            endTime=self.end_time,
            description=self.description,
            notes=self.notes,
            custom=None if self.custom is None else dict(sorted(self.custom.items())),
        )
        return orjson.dumps(out)


def parse_annotation(document: object) -> Annotation:
    """Bind a JSON object (stored or from a client) to an Annotation."""
    doc = as_object(document, "Annotation")
    return Annotation(
        start_time=as_long(doc.get("startTime"), "startTime"),
        tsuid=as_text(doc.get("tsuid"), "tsuid") or "",
        end_time=as_long(doc.get("endTime"), "endTime"),
        description=as_text(doc.get("description"), "description") or "",
        notes=as_text(doc.get("notes"), "notes") or "",
        custom=as_custom(doc.get("custom")),
    )


def parse_stored_annotation(raw: bytes) -> Annotation | None:
    """A stored note, or None when the cell is not a readable note."""
    try:
        return parse_annotation(orjson.loads(raw))
    except (orjson.JSONDecodeError, BadRequestError):
        return None


def annotation_json(raw: bytes) -> dict[str, Any] | None:
    """The ``/api/query`` object of a stored note cell (None when unreadable)."""
    note = parse_stored_annotation(raw)
    return None if note is None else note.to_json()


# -- client updates ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnnotationUpdate:
    """A client's note: the key (tsuid, start time) and the fields it set (the Java
    object's ``changed`` map: endTime, description, notes, custom)."""

    tsuid: str
    start_time: int
    changes: Mapping[str, Any]


def annotation_update_from_json(document: object) -> AnnotationUpdate:
    doc = as_object(document, "Annotation")
    changes: dict[str, Any] = {}
    end_time = as_long(doc.get("endTime"), "endTime")
    if end_time:
        changes["end_time"] = end_time
    for key in ("description", "notes"):
        value = as_text(doc.get(key), key)
        if value:
            changes[key] = value
    custom = as_custom(doc.get("custom"))
    if custom is not None:
        changes["custom"] = custom
    return AnnotationUpdate(
        tsuid=as_text(doc.get("tsuid"), "tsuid") or "",
        start_time=as_long(doc.get("startTime"), "startTime"),
        changes=changes,
    )


def merge_annotation(
    update: AnnotationUpdate, stored: Annotation | None, overwrite: bool
) -> Annotation:
    """Annotation.syncNote: POST keeps stored fields the client did not set, PUT resets."""
    local = Annotation(start_time=update.start_time, tsuid=update.tsuid, **update.changes)
    if stored is None:
        return local
    start = local.start_time
    if stored.start_time > 0 and (stored.start_time < start or start == 0):
        start = stored.start_time
    kept: dict[str, Any] = {}
    if not overwrite:
        for attr in ("end_time", "description", "notes", "custom"):
            if attr not in update.changes:
                kept[attr] = getattr(stored, attr)
    return replace(local, start_time=start, **kept)


# -- storage ----------------------------------------------------------------------------------


def base_time_of(start_time: int) -> int:
    """Annotation.getRowKey's base time: from seconds, or ms when beyond 32 bits."""
    seconds = start_time // 1000 if start_time & SECOND_MASK else start_time
    return seconds - seconds % MAX_TIMESPAN


def global_row_key(layout: KeyLayout, base_time_s: int) -> bytes:
    """The unsalted row of global notes for a base time."""
    zeros = bytes(layout.salt_width + layout.metric_width)
    return zeros + (base_time_s & 0xFFFFFFFF).to_bytes(TIMESTAMP_BYTES, "big")


def _is_note_qualifier(qualifier: bytes) -> bool:
    return len(qualifier) in (3, 5) and qualifier[0] == ANNOTATION_PREFIX


#: Notes read and saved together by :meth:`AnnotationStore.sync_many`.
SYNC_BATCH = 4096


class AnnotationStore:
    """Reads and writes notes in the data table."""

    def __init__(self, storage: Storage, data_table: str, layout: KeyLayout) -> None:
        self._storage = storage
        self._table = data_table
        self._layout = layout

    def cell_address(self, tsuid: str, start_time: int) -> tuple[bytes, bytes]:
        """(row key, qualifier) of a note; 400 for a bad time or TSUID."""
        if start_time < 1:
            raise BadRequestError(
                "The start timestamp has not been set", "The start timestamp has not been set"
            )
        try:
            qualifier = encode_annotation_qualifier(start_time)
            if not tsuid:
                return global_row_key(self._layout, base_time_of(start_time)), qualifier
            raw = parse_tsuid_hex(tsuid)
            return row_key_from_tsuid(self._layout, raw, start_time), qualifier
        except CodecError as exc:
            raise BadRequestError(exc.message, exc.message) from None

    async def get(self, tsuid: str, start_time: int) -> Annotation | None:
        """Annotation.getAnnotation."""
        row, qualifier = self.cell_address(tsuid, start_time)
        raw = await self._read(row, qualifier)
        return None if raw is None else parse_stored_annotation(raw)

    async def sync(self, update: AnnotationUpdate, overwrite: bool) -> Annotation:
        """Annotation.syncToStorage, then the stored note. NotModified when the client set
        nothing; 500 when the cell changed meanwhile."""
        row, qualifier = self.cell_address(update.tsuid, update.start_time)
        if not update.changes:
            raise NotModified("No changes detected in Annotation data")
        original = await self._read(row, qualifier)
        stored = None if original is None else parse_stored_annotation(original)
        merged = merge_annotation(update, stored, overwrite)
        await save_if_unchanged(
            self._storage,
            self._table,
            (row, FAMILY, qualifier),
            original,
            merged.storage_json(),
            "Annotation",
        )
        saved = await self.get(update.tsuid, update.start_time)
        return saved if saved is not None else merged

    async def sync_many(
        self, updates: Sequence[AnnotationUpdate], overwrite: bool
    ) -> list[Annotation]:
        """:meth:`sync` of many notes (``/api/annotation/bulk``) in a few storage round
        trips: the saved notes in order, leaving out those that set nothing. Up to
        ``SYNC_BATCH`` cells are read in one ``get_many`` and saved in one
        ``check_and_put_many``; a cell given twice is saved again in a later round, over
        the first. 500 when a cell changed meanwhile (the others of its round are saved)."""
        pending = [(u, self.cell_address(u.tsuid, u.start_time)) for u in updates if u.changes]
        saved: list[Annotation | None] = [None] * len(pending)
        todo = list(range(len(pending)))
        while todo:
            batch: list[int] = []
            later: list[int] = []
            cells: set[tuple[bytes, bytes]] = set()
            for i in todo:
                cell = pending[i][1]
                if cell in cells or len(batch) >= SYNC_BATCH:
                    later.append(i)
                else:
                    cells.add(cell)
                    batch.append(i)
            rows = await self._storage.get_many(
                self._table, list(dict.fromkeys(pending[i][1][0] for i in batch)), (FAMILY,)
            )
            by_key = {row.key: row for row in rows}
            checks: list[CheckAndPut] = []
            for i in batch:
                update, (key, qualifier) = pending[i]
                row = by_key.get(key)
                original = None if row is None else row.value(FAMILY, qualifier)
                stored = None if original is None else parse_stored_annotation(original)
                merged = merge_annotation(update, stored, overwrite)
                value = merged.storage_json()
                checks.append(
                    CheckAndPut(FAMILY, qualifier, original, Put(key, FAMILY, qualifier, value))
                )
                saved[i] = parse_stored_annotation(value) or merged
            if not all(await self._storage.check_and_put_many(self._table, checks)):
                raise changed_meanwhile("Annotation")
            todo = later
        return [note for note in saved if note is not None]

    async def delete(self, tsuid: str, start_time: int) -> None:
        """Annotation.delete."""
        row, qualifier = self.cell_address(tsuid, start_time)
        await self._storage.delete(self._table, [Delete(row, FAMILY, qualifier)])

    async def global_in_range(self, start_s: int, end_s: int) -> list[Annotation]:
        """Annotation.getGlobalAnnotations: global notes with ``startTime >= start_s`` and
        ``endTime <= end_s``, in storage order (by hour, then qualifier)."""
        if end_s < 1:
            raise BadRequestError("The end timestamp has not been set")
        if end_s < start_s:
            raise BadRequestError("The end timestamp cannot be less than the start timestamp")
        spec = ScanSpec(
            start=global_row_key(self._layout, start_s - start_s % MAX_TIMESPAN),
            stop=global_row_key(self._layout, end_s - end_s % MAX_TIMESPAN + MAX_TIMESPAN),
            families=(FAMILY,),
        )
        found: list[Annotation] = []
        async with aclosing(self._storage.scan(self._table, spec)) as rows:
            async for row in rows:
                for cell in row.cells:
                    if not _is_note_qualifier(cell.qualifier):
                        continue
                    note = parse_stored_annotation(cell.value)
                    if note is None or note.start_time < start_s or note.end_time > end_s:
                        continue
                    found.append(note)
        return found

    async def delete_range(self, tsuid: bytes | None, start_ms: int, end_ms: int) -> int:
        """Annotation.deleteRange: delete the notes (global when ``tsuid`` is None) whose
        qualifier time lies in [start_ms, end_ms]; the number deleted."""
        if end_ms < 1:
            raise BadRequestError("The end timestamp has not been set")
        if end_ms < start_ms:
            raise BadRequestError("The end timestamp cannot be less than the start timestamp")
        first = start_ms // 1000 - (start_ms // 1000) % MAX_TIMESPAN
        last = end_ms // 1000 - (end_ms // 1000) % MAX_TIMESPAN + MAX_TIMESPAN
        spec = self._range_spec(tsuid, first, last)
        deletes: list[Delete] = []
        async with aclosing(self._storage.scan(self._table, spec)) as rows:
            async for row in rows:
                base_ms = int.from_bytes(row.key[self._time_at : self._time_at + 4], "big") * 1000
                for cell in row.cells:
                    if not _is_note_qualifier(cell.qualifier):
                        continue
                    when = base_ms + decode_annotation_qualifier(cell.qualifier)
                    if start_ms <= when <= end_ms:
                        deletes.append(Delete(row.key, FAMILY, cell.qualifier))
        if deletes:
            await self._storage.delete(self._table, deletes)
        return len(deletes)

    @property
    def _time_at(self) -> int:
        return self._layout.salt_width + self._layout.metric_width

    def _range_spec(self, tsuid: bytes | None, first_s: int, last_s: int) -> ScanSpec:
        if tsuid is None:
            return ScanSpec(
                start=global_row_key(self._layout, first_s),
                stop=global_row_key(self._layout, last_s),
                families=(FAMILY,),
            )
        start = row_key_from_tsuid(self._layout, tsuid, first_s)
        stop = row_key_from_tsuid(self._layout, tsuid, last_s)
        prefix_end = self._time_at
        # Only this series' rows: its salt and metric, any base time, exactly its tags.
        regex = re.escape(start[:prefix_end]) + b".{4}" + re.escape(start[prefix_end + 4 :])
        return ScanSpec(
            start=start[: prefix_end + 4],
            stop=stop[: prefix_end + 4],
            families=(FAMILY,),
            row_filter=RowFilter(regex),
        )

    async def _read(self, row: bytes, qualifier: bytes) -> bytes | None:
        found = await self._storage.get(self._table, row, (FAMILY,))
        return None if found is None else found.value(FAMILY, qualifier)
