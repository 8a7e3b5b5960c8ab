"""``tsdb uid fsck [fix] [delete_unknown]``: check the UID table's two maps against each other
(OpenTSDB's UidManager fsck).

Every cell of the UID table is read once. Per kind (metrics, tagk, tagv) the forward map
(name -> UID, family ``id``) and the reverse map (UID -> name, family ``name``) are
compared, UID widths checked against each other, and the counter row against the largest
UID found. The lines are OpenTSDB's: its errors ("Forward metrics mapping is missing
reverse mapping: a -> 000001", ...), its warnings (a reverse mapping without a forward
one, a counter above the entries found, an unknown qualifier), then "KIND: Found N
errors." and "N errors found." or "No errors found.".

``fix`` repairs as OpenTSDB does: a missing reverse mapping is written back; a reverse
mapping without its forward one is removed; several names sharing one UID are renamed to
``fsck.NAME1.NAME2`` (their forward mappings removed, the new one pointing at the UID);
a counter below the largest UID is raised to it. ``delete_unknown`` (with ``fix``) removes
cells with qualifiers OpenTSDB does not know.

Departures: the lines go to stdout (OpenTSDB logs them); a cell prints without its write
time; the timing line reads "N KVs analyzed" only; the exit status is 1 when errors were
found (OpenTSDB exits with the number of errors, which wraps at 256).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass, field

from tsd.codec.tsuid import parse_tsuid_hex, uid_to_hex
from tsd.storage.base import Cell, Delete, Put, ScanSpec
from tsd.tools import status
from tsd.tools.common import ToolStore
from tsd.tools.fsck import kv_text
from tsd.uid.uniqueid import ID_FAMILY, KINDS, MAXID_ROW, NAME_FAMILY, decode_name, encode_name

__all__ = ["uid_fsck"]

#: qualifiers of the UID table that hold meta data, not mappings (skipped)
META_QUALIFIERS = {b"ts_meta", b"ts_ctr", b"metric_meta", b"tagk_meta", b"tagv_meta"}
KIND_QUALIFIERS = {kind.encode(): kind for kind in KINDS}
#: the UIDMeta qualifier of each kind
META_OF = {"metrics": b"metric_meta", "tagk": b"tagk_meta", "tagv": b"tagv_meta"}


@dataclass
class _Kind:
    """One kind's maps as read (UidManager's Uids): UIDs as uppercase hex."""

    say: Callable[[str], None]
    errors: int = 0
    maxid: int = 0
    max_found_id: int = 0
    width: int = 0
    id2name: dict[str, str] = field(default_factory=dict)
    name2id: dict[str, str] = field(default_factory=dict)

    def error(self, message: str) -> None:
        self.say(message)
        self.errors += 1


class UidFsck:
    """One run over the UID table."""

    def __init__(self, store: ToolStore, fix: bool, fix_unknowns: bool, say: Callable[[str], None]):
        self.store = store
        self.fix = fix
        self.fix_unknowns = fix_unknowns
        self.say = say
        self.table = store.cfg.storage.uid_table
        self.kinds: dict[str, _Kind] = {}
        self.cells = 0

    async def read(self) -> None:
        spec = ScanSpec(batch_rows=1024)
        async with aclosing(self.store.storage.scan(self.table, spec)) as rows:
            async for row in rows:
                for cell in row.cells:
                    self.cells += 1
                    await self._cell(row.key, cell)

    async def _cell(self, key: bytes, cell: Cell) -> None:
        qualifier = cell.qualifier
        if qualifier in META_QUALIFIERS:
            return
        kind = KIND_QUALIFIERS.get(qualifier)
        if kind is None:
            where = f"{uid_to_hex(qualifier)} in row {uid_to_hex(key)}"
            self.say(f"Unknown qualifier {where}")
            if self.fix and self.fix_unknowns:
                await self.store.storage.delete(self.table, [Delete(key, cell.family, qualifier)])
                self.say(f"FIX: Removed unknown qualifier {where}")
            return
        uids = self.kinds.setdefault(kind, _Kind(self.say))
        kv = kv_text(key, cell)
        if key == MAXID_ROW:
            if len(cell.value) != 8:
                uids.error(f"Invalid maximum ID for {kind}: should be on 8 bytes: .  kv={kv}")
            else:
                uids.maxid = int.from_bytes(cell.value, "big", signed=True)
                self.say(f"Maximum ID for {kind}: {uids.maxid}")
            return
        width = 0
        if cell.family == ID_FAMILY:
            width = len(cell.value)
            name, uid = decode_name(key), uid_to_hex(cell.value)
            uids.max_found_id = max(uids.max_found_id, int.from_bytes(cell.value, "big"))
            previous = uids.name2id.get(name)
            uids.name2id[name] = uid
            if previous is not None:
                uids.error(
                    f"Duplicate forward {kind} mapping: {name} -> {previous} and {name} -> "
                    f"{uid}.  kv={kv}"
                )
        elif cell.family == NAME_FAMILY:
            width = len(key)
            uid, name = uid_to_hex(key), decode_name(cell.value)
            previous = uids.id2name.get(uid)
            uids.id2name[uid] = name
            if previous is not None:
                uids.error(
                    f"Duplicate reverse {kind}  mapping: {name} -> {previous} and {name} -> "
                    f"{uid}.  kv={kv}"
                )
        if uids.width == 0:
            uids.width = width
        elif uids.width != width:
            uids.error(f"Invalid {kind} ID of length {width} (expected: {uids.width}).  kv={kv}")

    async def _restore_reverse(self, kind: str, uids: _Kind, name: str, uid: str) -> None:
        put = Put(parse_tsuid_hex(uid), NAME_FAMILY, kind.encode(), encode_name(name))
        await self.store.storage.put(self.table, [put])
        uids.id2name[uid] = name
        self.say(f"FIX: Restoring {kind} reverse mapping: {uid} -> {name}")

    async def _remove_reverse(self, kind: str, name: str, uid: str) -> None:
        row = parse_tsuid_hex(uid)
        deletes = [Delete(row, NAME_FAMILY, q) for q in (kind.encode(), META_OF[kind])]
        await self.store.storage.delete(self.table, deletes)
        self.say(f"FIX: Removed {kind} reverse mapping: {uid} -> {name}")

    async def check(self, kind: str, uids: _Kind) -> None:
        fix = self.fix
        collisions: dict[str, list[str]] | None = None
        for name, uid in list(uids.name2id.items()):
            found = uids.id2name.get(uid)
            if found is None:
                uids.error(f"Forward {kind} mapping is missing reverse mapping: {name} -> {uid}")
                if fix:
                    await self._restore_reverse(kind, uids, name, uid)
                continue
            if found == name:
                continue
            uids.error(
                f"Forward {kind} mapping {name} -> {uid} is different than reverse mapping: "
                f"{uid} -> {found}"
            )
            other = uids.name2id.get(found)
            if other is None:
                uids.error(f"Duplicate forward {kind} mapping {name} -> {uid} and null -> {found}")
                if fix:
                    await self._restore_reverse(kind, uids, name, uid)
                continue
            uids.error(
                f"Inconsistent forward {kind} mapping {name} -> {uid} vs {name} -> {found} / "
                f"{found} -> {other}"
            )
            if fix:
                if collisions is None:
                    collisions = {}
                    for each_name, each_uid in uids.name2id.items():
                        collisions.setdefault(each_uid, []).append(each_name)
                if len(collisions.get(uid, [])) <= 1:
                    await self._restore_reverse(kind, uids, name, uid)
        for uid, names in (collisions or {}).items():
            if len(names) > 1:
                await self._rename_collision(kind, uids, uid, sorted(names))
        for uid, name in list(uids.id2name.items()):
            found = uids.name2id.get(name)
            if found is None:
                self.say(f"Reverse {kind} mapping is missing forward mapping: {name} -> {uid}")
            elif found != uid:
                other = uids.id2name.get(found)
                if other is not None:
                    uids.error(
                        f"Inconsistent reverse {kind} mapping {uid} -> {name} vs {found} -> "
                        f"{name} / {other} -> {found}"
                    )
                else:
                    uids.error(
                        f"Duplicate reverse {kind} mapping {uid} -> {name} and {found} -> null"
                    )
            else:
                continue
            if fix:
                await self._remove_reverse(kind, name, uid)
        await self._check_counter(kind, uids)

    async def _rename_collision(self, kind: str, uids: _Kind, uid: str, names: list[str]) -> None:
        """Several names on one UID: each loses its forward mapping, ``fsck.A.B`` gets it."""
        for name in names:
            delete = Delete(encode_name(name), ID_FAMILY, kind.encode())
            await self.store.storage.delete(self.table, [delete])
            uids.name2id.pop(name, None)
            self.say(f"FIX: Removed forward {kind} mapping for {name} -> {uid}")
        fsck_name = ".".join(["fsck", *names])
        put = Put(encode_name(fsck_name), ID_FAMILY, kind.encode(), parse_tsuid_hex(uid))
        await self.store.storage.put(self.table, [put])
        self.say(f"FIX: Created forward {kind} mapping for fsck'd UID {fsck_name} -> {uid}")
        uids.name2id[fsck_name] = uid
        await self._restore_reverse(kind, uids, fsck_name, uid)
        self.say("----------------------------------")
        self.say("-     UID COLLISION DETECTED     -")
        self.say(f"Corrupted UID [{uid}] renamed to [{fsck_name}]")
        self.say("----------------------------------")

    async def _check_counter(self, kind: str, uids: _Kind) -> None:
        entries = max(len(uids.id2name), len(uids.name2id))
        if uids.maxid > entries:
            self.say(
                f"Max ID for {kind} is {uids.maxid} but only {entries} entries were found."
                f"  Maybe {uids.maxid - entries} IDs were deleted?"
            )
        elif uids.maxid < uids.max_found_id:
            uids.error(
                f"We found an ID of {uids.max_found_id} for {kind} but the max ID is only "
                f"{uids.maxid}!  Future IDs may be double-assigned!"
            )
            if self.fix:
                await self.store.storage.increment(
                    self.table, MAXID_ROW, ID_FAMILY, kind.encode(), uids.max_found_id - uids.maxid
                )
                self.say(f"FIX: Updated max ID for {kind} to {uids.max_found_id}")


async def uid_fsck(store: ToolStore, fix: bool, fix_unknowns: bool) -> int:
    """Check (and with ``fix``, repair) the UID table; the exit status."""

    def say(line: str) -> None:
        print(line)

    if fix:
        say("----------------------------------")
        say("-    Running fsck in FIX mode    -")
        say(f"-      Remove Unknowns: {'true' if fix_unknowns else 'false'}     -")
        say("----------------------------------")
    else:
        say("Running in log only mode")
    run = UidFsck(store, fix, fix_unknowns, say)
    await run.read()
    errors = 0
    for kind, uids in run.kinds.items():
        await run.check(kind, uids)
        if uids.errors:
            say(f"{kind}: Found {uids.errors} errors.")
            errors += uids.errors
    say(f"{run.cells} KVs analyzed")
    if not errors:
        say("No errors found.")
        return status.OK
    say(f"{errors} errors found.")
    return status.FAILED
