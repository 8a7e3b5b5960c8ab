"""``tsdb fsck`` through the real command line on the embedded store: each kind of stored
corruption is reported with OpenTSDB's message and counter, left alone without ``--fix``,
and repaired with ``--fix-all`` (a second run then finds nothing)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.tools.toolkit import Target, make_target, open_target
from tsd.codec import KeyLayout, encode_row_key
from tsd.codec.qualifier import encode_ms_qualifier, encode_seconds_qualifier
from tsd.storage.base import Put, Row, ScanSpec

pytestmark = pytest.mark.slow  # the CLI in subprocesses

HOUR = 1_356_998_400  # 2013-01-01T00:00:00Z
POINTS = [
    f"sys.cpu.user {HOUR} 42 host=web01",
    f"sys.cpu.user {HOUR + 10} 45 host=web01",
]


@pytest.fixture
def target(tmp_path: Path):
    yield from make_target("embedded", tmp_path)


def counters(out: str) -> dict[str, int]:
    """The report lines ``Label: N`` of fsck's output."""
    found = {}
    for line in out.splitlines():
        label, sep, number = line.rpartition(": ")
        if sep and number.isdigit() and not line.startswith((" ", "\t")):
            found[label] = int(number)
    return found


class Corrupted:
    """The row keys of the corruptions written by :func:`corrupt`."""

    def __init__(self, layout: KeyLayout, metric: bytes, tags: tuple[tuple[bytes, bytes], ...]):
        self.key = {
            name: encode_row_key(layout, metric, HOUR + 3600 * hours, tags)
            for hours, name in enumerate(
                ["good", "unknown", "dup", "bad_value", "bad_compact", "float8", "vle"]
            )
        }
        self.orphan = encode_row_key(layout, b"\x00\x0f\xff", HOUR, tags)
        self.bad_key = b"\x00\x00\x01\x50"


async def corrupt(target: Target) -> Corrupted:
    """Import two good points, then store one corruption of each kind, each in its own row."""
    (target.cwd / "points.txt").write_text("\n".join(POINTS) + "\n")
    done = await target.run("import", "--auto-metric", "points.txt")
    assert done.code == 0, done.err
    async with open_target(target) as store:
        layout = KeyLayout.from_storage_config(store.cfg.storage)
        metric = await store.uids.metrics.get_id("sys.cpu.user")
        tags = ((await store.uids.tagk.get_id("host"), await store.uids.tagv.get_id("web01")),)
        rows = Corrupted(layout, metric, tags)
        k = rows.key
        second = encode_seconds_qualifier
        cells = [
            (rows.bad_key, b"\x00\x00", b"\x01"),
            (rows.orphan, second(5, 0), b"\x01"),
            (k["unknown"], b"\x07", b"\x01"),  # a 1-byte qualifier
            (k["unknown"], b"\x00\x10\x00\x20\x00\x30\x00", b"\x01"),  # 7 bytes
            (k["unknown"], second(1, 0), b"\x01"),
            (k["dup"], second(10, 0), b"\x05"),
            (k["dup"], encode_ms_qualifier(10_000, 0), b"\x06"),
            (k["bad_value"], second(1, 0), b"\x00\x00\x07"),  # 1-byte flag, 3 bytes
            (k["bad_compact"], second(1, 0) + second(2, 0), b"\x01\x00"),  # one value short
            (k["float8"], second(1, 0x8 | 0x3), b"\0\0\0\0" + struct.pack(">f", 1.5)),
            (k["vle"], second(1, 0x7), (5).to_bytes(8, "big")),
        ]
        puts = [Put(key, "t", qualifier, value) for key, qualifier, value in cells]
        await store.storage.put(store.cfg.storage.data_table, puts)
    return rows


async def stored_rows(target: Target) -> dict[bytes, Row]:
    async with open_target(target) as store:
        table = store.cfg.storage.data_table
        return {row.key: row async for row in store.storage.scan(table, ScanSpec())}


async def test_each_corruption_is_reported_and_left_alone_without_fix(target: Target) -> None:
    rows = await corrupt(target)
    before = await stored_rows(target)
    done = await target.run("fsck", "--full-scan")
    assert done.code == 1, done.err
    found = counters(done.out)
    assert found["Invalid Row Keys Found"] == 1
    assert found["Orphaned UID Rows"] == 1
    assert found["Unknown Objects"] == 2
    assert found["Duplicate Datapoints"] == 1
    assert found["Unparseable Datapoint Values"] == 1
    assert found["Unparseable Compacted Columns"] == 1
    assert found["Improperly Encoded Floating Point Values"] == 1
    assert found["Datapoints Qualified for VLE "] == 1
    assert found["Bytes Saved with VLE"] == 7
    assert found["Total Errors"] == 8
    assert found["Total Errors Fixed"] == 0
    assert found["Rows Processed"] == 9
    for message in [
        f"Invalid row key.\n\tKey: {rows.bad_key.hex().upper()}",
        f"Unable to resolve the metric from the row key.\n\tKey: {rows.orphan.hex().upper()}\n\t"
        "No such unique ID for 'metrics': [0, 15, -1]",
        "Invalid qualifier, must be on 2 bytes or more.",
        "Unknown qualifier, must be 2, 3, 5 or an even number of bytes.",
        "More than one column had a value for the same timestamp: "
        f"({(HOUR + 2 * 3600 + 10) * 1000} - Tue Jan 01 02:00:10 UTC 2013)",
        "The integer value is 3 bytes long but should be 1 bytes.",
        "Corrupted value: couldn't break down into individual values",
        "Floating point value was marked as 4 bytes long but was actually 8 bytes long\n",
        "One or more errors found in row that were not marked for repair",
    ]:
        assert message in done.out, message
    assert await stored_rows(target) == before  # nothing changed


async def test_fix_all_repairs_every_kind_and_a_second_run_finds_nothing(
    target: Target,
) -> None:
    rows = await corrupt(target)
    # --fix alone rewrites encodings but deletes nothing
    done = await target.run("fsck", "--full-scan", "--fix")
    assert done.code == 1, done.err
    assert counters(done.out)["Improperly Encoded Floating Point Values Fixed"] == 1
    assert rows.bad_key in await stored_rows(target)

    done = await target.run("fsck", "--full-scan", "--fix-all")
    assert done.code == 1, done.err  # errors were found (and fixed)
    found = counters(done.out)
    assert found["Invalid Rows Deleted"] == 1
    assert found["Orphaned UID Rows Deleted"] == 1
    assert found["Unknown Objects Deleted"] == 2
    assert found["Duplicate Datapoints Resolved"] == 1
    assert found["Unparseable Datapoint Values Deleted"] == 1
    assert found["Unparseable Compacted Columns Deleted"] == 1

    stored = await stored_rows(target)
    assert rows.bad_key not in stored
    assert rows.orphan not in stored
    k = rows.key
    cells = {
        key: {c.qualifier: c.value for c in stored[key].cells}
        for key in k.values()
        if key in stored
    }
    assert list(cells[k["unknown"]]) == [b"\x00\x10"]
    assert cells[k["dup"]] == {b"\x00\xa0": b"\x05"}  # the first stored kept
    assert k["bad_value"] not in cells
    assert k["bad_compact"] not in cells
    assert cells[k["float8"]] == {b"\x00\x1b": struct.pack(">f", 1.5)}
    assert cells[k["vle"]] == {b"\x00\x10": b"\x05"}  # 8 bytes -> 1 byte

    again = await target.run("fsck", "--full-scan")
    assert again.code == 0, again.out
    found = counters(again.out)
    assert found["Total Errors"] == 0
    assert found["Datapoints Qualified for VLE "] == 0
    assert found["Valid Datapoints"] == 6


async def test_a_query_limits_the_rows_checked(target: Target) -> None:
    await corrupt(target)
    words = [str(HOUR), str(HOUR + 3 * 3600), "sum", "sys.cpu.user", "host=web01"]
    done = await target.run("fsck", *words)
    assert done.code == 1, done.err
    found = counters(done.out)
    # the rows of hours 0..3 (good, unknown, dup, bad value): not the bad key or the orphan
    assert found["Rows Processed"] == 4
    assert found["Total Errors"] == 4
    assert found["Invalid Row Keys Found"] == 0


async def test_usage_without_a_query_or_full_scan(target: Target) -> None:
    done = await target.run("fsck")
    assert done.code == 2
    assert "Must supply a query or use the '--full-scan' flag" in done.err
