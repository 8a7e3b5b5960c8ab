"""``tsdb uid``: find, assign, rename and delete UIDs, as OpenTSDB 2.4's ``tsdb uid`` does.

Sub-commands and output (OpenTSDB ``src/tools/UidManager.java``). Every mapping is printed
as ``<kind> <name>: <uid>`` with the UID as Java's ``Arrays.toString(byte[])`` prints it
(signed decimal bytes): ``metrics sys.cpu.user: [0, 0, 1]``.

* ``assign KIND NAME...``: gives each name a UID unless it has one, then prints its mapping.
  A name that already has a UID is not an error: its mapping is printed and the exit status
  is 0, as in OpenTSDB (its ``getOrCreateId``), so provisioning scripts can run it again.
  Unlike OpenTSDB, names are checked first with the rules the write path applies
  (``tsd.core.tag.allow_specialchars``): a name no put could ever use is refused
  (reported, exit 1) instead of being given a UID.
* ``grep [KIND] REGEXP``: every forward mapping whose name the regexp matches anywhere
  (HBase's RegexStringComparator uses ``find``), ``-i`` to ignore case; 0 when something
  matched, else 1. The counter row (``\\x00``) that OpenTSDB would print too is skipped.
* ``rename KIND OLD NEW``: prints ``KIND OLD -> NEW``; 1 when OLD has no UID.
* ``delete KIND NAME``: removes the mappings (data points stay); 1 when NAME has no UID.
* ``[KIND] NAME`` / ``[KIND] ID``: lookups. An argument that parses as a Java long is an
  ID; without KIND every kind is shown. 0 when found, else 1.

Exit statuses are OpenTSDB's: 2 for a wrong number of arguments, 3 for a storage failure
(4 for ``delete``). Kinds are ``metrics`` (or ``metric``), ``tagk``, ``tagv``; the kind word
is echoed as given. UID widths come from the configuration (``tsd.storage.uid.width.*``)
where OpenTSDB's tool takes ``--idwidth`` (default 3). ``metasync`` writes OpenTSDB's
meta cells whatever the tracking settings, as its MetaSync does
(:func:`tsd.meta.sync.sync_opentsdb_meta`; ``tsdb meta-sync`` follows the settings);
``metapurge`` deletes OpenTSDB's UIDMeta and TSMeta cells (:mod:`tsd.meta.purge`);
``fsck [fix] [delete_unknown]`` checks the two maps against each other
(:mod:`tsd.tools.uid_fsck`). The ``treesync`` and ``treepurge`` sub-commands are not
implemented.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import NoReturn

from tsd.codec.value import parse_long
from tsd.config import Config
from tsd.errors import (
    BadRequestError,
    NoSuchUniqueId,
    NoSuchUniqueName,
    NumberFormatError,
    StorageError,
    UidAlreadyExists,
)
from tsd.java_text import format_java_bytes
from tsd.meta.purge import purge_meta
from tsd.meta.service import MetaService
from tsd.meta.sync import sync_opentsdb_meta
from tsd.protocol.names import validate_string
from tsd.storage.base import ScanSpec
from tsd.tools import status
from tsd.tools.common import ToolStore, add_store_options, open_store, run_async, tool_config
from tsd.tools.uid_fsck import uid_fsck
from tsd.uid.uniqueid import (
    ID_FAMILY,
    KINDS,
    MAXID_ROW,
    NAME_FAMILY,
    UniqueId,
    decode_name,
    encode_name,
)

USAGE = """\
Usage: tsdb uid <subcommand> args
Sub commands:
  grep [kind] <RE>: Finds matching IDs.
  assign <kind> <name> [names]: Assign an ID for the given name(s).
  rename <kind> <name> <newname>: Renames this UID.
  delete <kind> <name>: Deletes this UID.
  metasync: Generates missing TSUID and UID meta entries, updates
             created timestamps
  metapurge: Removes meta data entries from the UID and meta tables.
  fsck: [fix] [delete_unknown] Checks the consistency of UIDs.

  [kind] <name>: Lookup the ID of this name.
  [kind] <ID>: Lookup the name of this ID.

Example values for [kind]: metrics, tagk (tag name), tagv (tag value)."""

#: exit statuses (UidManager's, which tsd.tools.status keeps for every command)
OK, NOT_FOUND, USAGE_ERROR = status.OK, status.FAILED, status.USAGE
STORAGE_ERROR, DELETE_ERROR = status.UNAVAILABLE, status.PARTIAL_DELETE
#: sub-commands of OpenTSDB's tool that tsd does not implement
NOT_IMPLEMENTED = ("treesync", "treepurge")
#: what Tags.validateString calls each kind in its messages
_NOUNS = {"metrics": "metric name", "tagk": "tag name", "tagv": "tag value"}


class _UsageError(Exception):
    pass


class _WordsParser(argparse.ArgumentParser):
    """Parses the words after the sub-command (``grep -i RE --config F``), options anywhere
    as OpenTSDB's ArgP allows; errors become a usage message rather than an exit."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _add_options(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)
    parser.add_argument(
        "-i", "--ignore-case", action="store_true", help="grep: ignore case distinctions"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.usage = "tsdb uid [options] <subcommand> args"
    parser.epilog = USAGE
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _add_options(parser)
    parser.add_argument(
        "words", nargs=argparse.REMAINDER, metavar="ARG", help="sub-command and its arguments"
    )


def parse_words(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the options found among its words applied and the words left."""
    parser = _WordsParser(prog="tsdb uid", add_help=False)
    _add_options(parser)
    parser.add_argument("words", nargs="*")
    namespace = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "words"})
    return parser.parse_intermixed_args(args.words, namespace)


def mapping_line(kind: str, name: str, uid: bytes) -> str:
    """``metrics sys.cpu.user: [0, 0, 1]``: UidManager's line for one mapping."""
    return f"{kind} {name}: {format_java_bytes(uid)}"


def error(message: str) -> None:
    print(message, file=sys.stderr)


def usage(message: str) -> int:
    error(message)
    error(USAGE)
    return USAGE_ERROR


# -- assign -----------------------------------------------------------------------------------


async def assign(store: ToolStore, kind: str, names: Sequence[str]) -> int:
    """Assign (or look up) each name's UID and print its mapping; OpenTSDB's exit status."""
    uids = store.uids.by_type(kind)
    special = store.cfg.core.tag_allow_specialchars
    status = OK
    for name in names:
        try:
            validate_string(_NOUNS[uids.kind], name, special)
        except BadRequestError as exc:
            error(exc.message)
            status = NOT_FOUND
            continue
        try:
            uid = await uids.assign(name)
        except UidAlreadyExists as exc:
            uid = exc.uid
        except StorageError as exc:
            error(f"error while processing {name}: {exc}")
            return STORAGE_ERROR
        print(mapping_line(kind, name, uid))
    return status


# -- grep -------------------------------------------------------------------------------------


async def grep(store: ToolStore, kind: str | None, regexp: str, ignore_case: bool) -> int:
    """Print the forward mappings whose name matches; 0 when at least one did."""
    try:
        pattern = re.compile(regexp, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        return usage(f"Invalid regular expression {regexp!r}: {exc}")
    qualifiers = [store.uids.by_type(kind).kind] if kind is not None else list(KINDS)
    spec = ScanSpec(families=(ID_FAMILY,), batch_rows=1024)
    found = False
    async with aclosing(store.storage.scan(store.cfg.storage.uid_table, spec)) as rows:
        async for row in rows:
            if row.key == MAXID_ROW:
                continue
            name = decode_name(row.key)
            if pattern.search(name) is None:
                continue
            for qualifier in qualifiers:
                uid = row.value(ID_FAMILY, qualifier.encode("ascii"))
                if uid is not None:
                    print(mapping_line(qualifier, name, uid))
                    found = True
    return OK if found else NOT_FOUND


# -- rename and delete ------------------------------------------------------------------------


async def rename(store: ToolStore, kind: str, old: str, new: str) -> int:
    uids = store.uids.by_type(kind)
    try:
        validate_string(_NOUNS[uids.kind], new, store.cfg.core.tag_allow_specialchars)
        await uids.rename(old, new)
    except NoSuchUniqueName as exc:
        error(exc.message)
        return NOT_FOUND
    except BadRequestError as exc:  # the new name is taken or invalid
        error(exc.message)
        return NOT_FOUND
    except StorageError as exc:
        error(f"error while processing renaming {old} to {new}: {exc}")
        return STORAGE_ERROR
    print(f"{kind} {old} -> {new}")
    return OK


async def delete(store: ToolStore, kind: str, name: str) -> int:
    uids = store.uids.by_type(kind)
    try:
        await uids.delete(name)
    except NoSuchUniqueName as exc:
        error(exc.message)
        return NOT_FOUND
    except StorageError as exc:
        error(f"error while processing delete {name}: {exc}")
        return DELETE_ERROR
    print(f"UID {kind} {name} deleted.")
    return OK


# -- lookups ----------------------------------------------------------------------------------


def id_bytes(number: int, width: int) -> bytes | None:
    """``number`` on ``width`` bytes, or None when it does not fit (as UidManager.idInBytes:
    the long's 8 big-endian bytes, whose leading ones must all be zero)."""
    raw = number.to_bytes(8, "big", signed=True)
    if any(raw[: 8 - width]):
        return None
    return raw[8 - width :]


async def lookup_id(store: ToolStore, kind: str | None, number: int) -> int:
    """Print the name(s) of UID ``number``: for ``kind``, or for every kind."""
    kinds = [store.uids.by_type(kind)] if kind is not None else _all_kinds(store)
    fitting = [(uids, id_bytes(number, uids.width)) for uids in kinds]
    fitting = [(uids, uid) for uids, uid in fitting if uid is not None]
    if not fitting:
        width = max(uids.width for uids in kinds)
        error(
            f"{number} is too large to fit on {width} bytes.  Maybe you forgot to adjust --idwidth?"
        )
        return NOT_FOUND
    found = False
    for uids, uid in fitting:
        assert uid is not None
        if kind is not None:
            try:
                name = await uids.get_name(uid)
            except NoSuchUniqueId as exc:
                error(exc.message)
                return NOT_FOUND
            print(mapping_line(kind, name, uid))
            return OK
        row = await store.storage.get(store.cfg.storage.uid_table, uid, (NAME_FAMILY,))
        raw = None if row is None else row.value(NAME_FAMILY, uids.kind.encode("ascii"))
        if raw is not None:
            print(mapping_line(uids.kind, decode_name(raw), uid))
            found = True
    return OK if found else NOT_FOUND


async def lookup_name(store: ToolStore, kind: str | None, name: str) -> int:
    """Print the UID(s) of ``name``: for ``kind``, or for every kind."""
    if kind is not None:
        try:
            uid = await store.uids.by_type(kind).get_id(name)
        except NoSuchUniqueName as exc:
            error(exc.message)
            return NOT_FOUND
        print(mapping_line(kind, name, uid))
        return OK
    row = await store.storage.get(store.cfg.storage.uid_table, encode_name(name), (ID_FAMILY,))
    found = False
    for qualifier in KINDS:
        cell = None if row is None else row.value(ID_FAMILY, qualifier.encode("ascii"))
        if cell is not None:
            print(mapping_line(qualifier, name, cell))
            found = True
    return OK if found else NOT_FOUND


def _all_kinds(store: ToolStore) -> list[UniqueId]:
    return [store.uids.metrics, store.uids.tagk, store.uids.tagv]


async def lookup(store: ToolStore, kind: str | None, word: str) -> int:
    try:
        number = parse_long(word)
    except NumberFormatError:
        return await lookup_name(store, kind, word)
    return await lookup_id(store, kind, number)


async def metasync(store: ToolStore) -> int:
    """MetaSync: UIDMeta and TSMeta counters for every stored series; one report line."""
    meta = MetaService(store.storage, store.uids, store.cfg)
    report = await sync_opentsdb_meta(
        store.storage,
        store.cfg.storage.data_table,
        meta,
        realtime_ts=store.cfg.core.meta_enable_realtime_ts,
        now_s=int(time.time()),
    )
    print(f"{report.rows} rows scanned, {report.series} series synced")
    return OK


async def metapurge(store: ToolStore) -> int:
    """MetaPurge: delete the UIDMeta and TSMeta cells; how many, on one line."""
    report = await purge_meta(store.storage, store.cfg.storage)
    print(f"Purged {report.uid_columns} UIDMeta and {report.ts_columns} TSMeta columns")
    return OK


# -- dispatch ---------------------------------------------------------------------------------

#: sub-command -> (does it write?, accepted argument counts after the sub-command word)
_ARITY: dict[str, tuple[bool, Callable[[int], bool]]] = {
    "assign": (True, lambda n: n >= 2),
    "grep": (False, lambda n: 1 <= n <= 2),
    "rename": (True, lambda n: n == 3),
    "delete": (True, lambda n: n == 2),
    "metasync": (True, lambda n: n == 0),
    "metapurge": (True, lambda n: n == 0),
    "fsck": (False, lambda n: True),  # writes with "fix" (see run_words)
}


def _command(words: Sequence[str], ignore_case: bool) -> Callable[[ToolStore], Awaitable[int]]:
    name, rest = words[0], list(words[1:])
    if name == "assign":
        return lambda store: assign(store, rest[0], rest[1:])
    if name == "grep":
        kind = rest[0] if len(rest) == 2 else None
        return lambda store: grep(store, kind, rest[-1], ignore_case)
    if name == "rename":
        return lambda store: rename(store, rest[0], rest[1], rest[2])
    if name == "delete":
        return lambda store: delete(store, rest[0], rest[1])
    if name == "metasync":
        return metasync
    if name == "metapurge":
        return metapurge
    if name == "fsck":
        return lambda store: uid_fsck(store, "fix" in rest, "delete_unknown" in rest)
    kind = words[0] if len(words) == 2 else None
    return lambda store: lookup(store, kind, words[-1])


def run_words(cfg: Config, words: Sequence[str], *, ignore_case: bool = False) -> int:
    """Run ``tsdb uid`` with its positional words (``["assign", "metrics", "a"]``)."""
    if not words:
        return usage("Not enough arguments")
    if words[0] in NOT_IMPLEMENTED:
        return usage(f"The {words[0]} sub-command is not implemented by tsd")
    writes, arity_ok = _ARITY.get(words[0], (False, lambda n: n <= 1))
    writes = writes or (words[0] == "fsck" and "fix" in words[1:])
    if not arity_ok(len(words) - 1):
        return usage("Wrong number of arguments")
    command = _command(words, ignore_case)

    async def main() -> int:
        try:
            async with open_store(cfg, read_only=not writes) as store:
                return await command(store)
        except StorageError as exc:
            error(f"storage error: {exc}")
            return DELETE_ERROR if words[0] == "delete" else STORAGE_ERROR

    return run_async(main())


def run(args: argparse.Namespace) -> int:
    try:
        args = parse_words(args)
    except _UsageError as exc:
        return usage(str(exc))
    return run_words(tool_config(args), args.words, ignore_case=args.ignore_case)
