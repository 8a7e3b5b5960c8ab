"""``tsdb fsck`` and ``tsdb uid fsck`` beside OpenTSDB 2.4.1's own Fsck and UidManager's
fsck on the same HBase tables: the stored corruptions of tests/tools/test_fsck.py and
test_uid_fsck.py, found with the same messages and counters, and fixed to the same cells.

What cannot be identical: OpenTSDB logs each cell with its HBase write time (tsd's storage
keeps none), so lines naming a cell (``KeyValue(...)``) and the duplicates' detail lines
are left out; its "Rows Processed" counts row changes per scanner thread (one less than
the rows, plus the last row when it had points), tsd counts every row; its own progress
lines ("Spooling up", "Thread [...] Finished", the duration) have no tsd counterpart.
OpenTSDB runs with ``--threads 1`` so its findings come in scan order.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests.hbase.opentsdb import tool_logback
from tests.hbase.test_cli_parity import Clis
from tests.hbase_harness import HBaseServer
from tests.tools.test_fsck import corrupt, stored_rows
from tests.tools.test_uid_fsck import corrupt_uids, uid_cells
from tests.tools.toolkit import Target
from tsd.config import StorageConfig
from tsd.storage.base import Row

pytestmark = pytest.mark.hbase

LOGBACK = tool_logback("net.opentsdb.tools.Fsck")

#: OpenTSDB's own progress lines, and the one counter that differs (see above)
NOT_COMPARED = (
    "Starting full table scan",
    "Spooling up",
    "Thread [",
    "Completed fsck in",
    "Rows Processed:",
)

#: every fix but --compact (which --fix-all turns on in OpenTSDB: it rewrites every row)
FIX = [
    "--fix",
    "--resolve-duplicates",
    "--delete-orphans",
    "--delete-unknown-columns",
    "--delete-bad-values",
    "--delete-bad-rows",
    "--delete-bad-compacts",
]


def comparable(text: str) -> list[str]:
    """The lines both print alike: messages and counters, without cells or write times."""
    kept = []
    for line in text.splitlines():
        if not line or "KeyValue(" in line or line.startswith(NOT_COMPARED):
            continue
        if line.startswith((" ", "\t")) and not line.startswith(("\tKey: ", "    row key: ")):
            continue
        kept.append(line)
    return kept


def assert_same(ours: str, theirs: str) -> None:
    """tsd's lines equal OpenTSDB's, the difference shown when not."""
    mine, reference = comparable(ours), comparable(theirs)
    assert mine == reference, "\n".join(difflib.unified_diff(reference, mine, "opentsdb", "tsd"))


def clis_on(server: HBaseServer, tables: tuple[StorageConfig, ...], tmp_path: Path) -> list[Clis]:
    """Both command lines on each of ``tables``, each in a work directory of its own."""
    clis = []
    for i, cfg in enumerate(tables):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        clis.append(Clis(server, cfg, workdir))
    return clis


async def test_fsck_finds_and_fixes_what_opentsdb_finds_and_fixes(
    hbase_server: HBaseServer, two_tables: tuple[StorageConfig, ...], tmp_path: Path
) -> None:
    clis = clis_on(hbase_server, two_tables, tmp_path)
    theirs_cli, ours_cli = clis
    logback = tmp_path / "fsck-logback.xml"
    logback.write_text(LOGBACK)
    targets = [Target(c.workdir, c.tsd_conf, "hbase") for c in clis]
    for target in targets:
        await corrupt(target)

    # The check alone, both on the same tables.
    theirs = await theirs_cli.run_opentsdb("Fsck", "--full-scan", "--threads", "1", logback=logback)
    ours = await targets[0].run("fsck", "--full-scan")
    assert (ours.code, theirs.returncode) == (1, 1), theirs.stderr
    assert_same(ours.out, theirs.stderr)
    assert "Total Errors: 8" in comparable(ours.out)

    # The fixes, each on its own copy: the same cells are left.
    theirs = await theirs_cli.run_opentsdb(
        "Fsck", "--full-scan", "--threads", "1", *FIX, logback=logback
    )
    ours = await targets[1].run("fsck", "--full-scan", *FIX)
    assert (ours.code, theirs.returncode) == (1, 1), theirs.stderr
    assert_same(ours.out, theirs.stderr)

    def cells(rows: dict[bytes, Row]) -> dict[bytes, set[tuple[bytes, bytes]]]:
        return {key: {(c.qualifier, c.value) for c in row.cells} for key, row in rows.items()}

    assert cells(await stored_rows(targets[0])) == cells(await stored_rows(targets[1]))

    # Each finds nothing left where the other fixed.
    theirs = await theirs_cli.run_opentsdb("Fsck", "--full-scan", "--threads", "1", logback=logback)
    assert theirs.returncode == 0, theirs.stderr
    ours = await targets[0].run("fsck", "--full-scan")
    assert ours.code == 0, ours.out
    assert_same(ours.out, theirs.stderr)


UID_LOGBACK = tool_logback("net.opentsdb.tools.UidManager")

#: UidManager runs with --verbose: without it, OpenTSDB's CLI turns every logger down to WARN
#: (its info lines, "Maximum ID for metrics: 2", vanish); tsd always prints them.
#: UidManager's lines with no tsd counterpart (its shutdown, its timing)
UID_NOT_COMPARED = ("Shutting down TSD", "Gracefully shutdown the TSD")


def uid_lines(text: str) -> list[str]:
    """uid fsck's lines, sorted: OpenTSDB walks its kinds and maps in HashMap order."""
    return sorted(
        line
        for line in text.splitlines()
        if line and " KVs analyzed" not in line and not line.startswith(UID_NOT_COMPARED)
    )


async def test_uid_fsck_finds_and_fixes_what_opentsdb_finds_and_fixes(
    hbase_server: HBaseServer, two_tables: tuple[StorageConfig, ...], tmp_path: Path
) -> None:
    clis = clis_on(hbase_server, two_tables, tmp_path)
    logback = tmp_path / "uid-logback.xml"
    logback.write_text(UID_LOGBACK)
    targets = [Target(c.workdir, c.tsd_conf, "hbase") for c in clis]
    for target in targets:
        await corrupt_uids(target)

    theirs = await clis[0].run_opentsdb("UidManager", "--verbose", "fsck", logback=logback)
    ours = await targets[0].run("uid", "fsck")
    assert theirs.returncode == 4, theirs.stderr  # OpenTSDB exits with the error count
    assert ours.code == 1, ours.err
    assert uid_lines(ours.out) == uid_lines(theirs.stderr), theirs.stderr

    fix = ["fsck", "fix", "delete_unknown"]
    theirs = await clis[0].run_opentsdb("UidManager", "--verbose", *fix, logback=logback)
    ours = await targets[1].run("uid", *fix)
    assert uid_lines(ours.out) == uid_lines(theirs.stderr), theirs.stderr
    assert await uid_cells(targets[0]) == await uid_cells(targets[1])

    theirs = await clis[1].run_opentsdb("UidManager", "--verbose", "fsck", logback=logback)
    ours = await targets[0].run("uid", "fsck")
    assert (theirs.returncode, ours.code) == (0, 0), theirs.stderr
    assert uid_lines(ours.out) == uid_lines(theirs.stderr), theirs.stderr
