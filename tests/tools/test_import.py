"""``tsdb import`` through the real command line: what is stored and reported, exit statuses."""

from __future__ import annotations

import asyncio
import gzip
import os
import pty
import re
import sys
from pathlib import Path

import pytest

from tests.tools.toolkit import (
    TARGET_PARAMS,
    Target,
    embedded_only,
    make_target,
    open_target,
    tsdb,
)
from tests.write.readback import StoredPoint, data_rows, stored_points
from tsd.errors import BadRequestError
from tsd.protocol.telnet import parse_put
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage

pytestmark = pytest.mark.slow  # the CLI in subprocesses

HOUR = 1_356_998_400  # 2013-01-01T00:00:00Z, long closed: its rows are compacted at the end
TAGS = (("cpu", "0"), ("host", "web01"))


@pytest.fixture(params=TARGET_PARAMS)
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


def point(timestamp_ms: int, value: int | float, metric: str = "sys.cpu.user") -> StoredPoint:
    return StoredPoint(metric, TAGS, timestamp_ms, value)


async def stored(target: Target) -> list[StoredPoint]:
    async with open_target(target) as store:
        return await stored_points(store.storage, store.cfg.storage, store.uids)


def rate_lines(out: str) -> list[str]:
    """stdout with the figures replaced by N, for exact comparison."""
    return re.sub(r"\d+(\.\d+)?", "N", out).splitlines()


async def test_import_stores_each_line_as_a_telnet_put(target: Target) -> None:
    lines = [
        f"sys.cpu.user {HOUR} 42 host=web01 cpu=0",
        f"sys.cpu.user {HOUR + 1} 42.5 cpu=0 host=web01\r",  # CRLF
        f"sys.cpu.user {HOUR + 2}250 -7 host=web01  cpu=0 ",  # ms; empty words between tags
        f"sys.cpu.user {HOUR + 3}.500 1e3 host=web01 cpu=0",  # dotted ms, as telnet reads it
        f"sys.cpu.nice {HOUR} 9223372036854775807 host=web01 cpu=0",  # no final newline
    ]
    (target.cwd / "points.txt").write_text("\n".join(lines))
    done = await target.run("import", "points.txt", "--auto-metric")
    assert (done.code, done.err) == (0, "")
    assert rate_lines(done.out) == [
        "Processed points.txt in N ms, N data points (N points/s)",
        "Total: imported N data points in Ns (N points/s)",
        "Compacted N rows in Ns",
    ]
    assert "imported 5 data points" in done.out
    assert await stored(target) == [
        point(HOUR * 1000, 9223372036854775807, "sys.cpu.nice"),
        point(HOUR * 1000, 42),
        point(HOUR * 1000 + 1000, 42.5),
        point(HOUR * 1000 + 2250, -7),
        point(HOUR * 1000 + 3500, 1000.0),
    ]


#: values and timestamps of one series: after the first line, each takes the hot path
#: (series known from its words) unless the hot path declines its numbers
HOT = [
    ("1356998400", "1"),
    ("1356998401", "-1"),
    ("1356998402", "1.5"),
    ("1356998403", "1e3"),
    ("1356998404", "9223372036854775807"),
    ("1356998405", "-9223372036854775808"),
    ("1356998406", "0.1"),
    ("1356998407", "+5"),
    ("1356998408", "1E-2"),
    ("1356998409", ".5"),
    ("1356998410", "5."),
    ("1356998411", "00042"),
    ("1356998412000", "7"),
    ("1356998412.5", "8"),
    ("1356998413", "abc"),
    ("1356998414", "1e999"),
    ("0", "1"),
    ("1356998415", "9223372036854775808"),
    ("99999999999999", "1"),
    ("1356998416", "0x1p3"),
]


@embedded_only
async def test_known_series_lines_store_what_the_full_parser_reads(target: Target) -> None:
    lines = [f"sys.cpu.user {ts} {value} host=web01 cpu=0" for ts, value in HOT]
    (target.cwd / "hot.txt").write_text("\n".join(lines) + "\n")
    expected: list[StoredPoint] = []
    reports = []
    for lineno, line in enumerate(lines, start=1):
        try:
            parsed = parse_put(f"put {line}".split(" "))
        except BadRequestError as exc:
            reason = exc.message.removeprefix("put: ")
            reports.append(f"hot.txt:{lineno}: {reason} line=[{line}]")
            continue
        expected.append(point(parsed.timestamp_ms, parsed.value))
    assert len(reports) == 6  # the table has both kinds of line
    done = await target.run("import", "hot.txt", "--auto-metric", "--skip-errors")
    assert done.code == 0
    assert done.err.splitlines() == [*reports, "6 bad line(s)"]
    got = await stored(target)
    assert [(p.timestamp_ms, p.value, type(p.value)) for p in got] == [
        (p.timestamp_ms, p.value, type(p.value)) for p in sorted(expected, key=_time)
    ]


def _time(p: StoredPoint) -> int:
    return p.timestamp_ms


async def test_rows_of_closed_hours_are_compacted_as_the_daemon_does(target: Target) -> None:
    text = "".join(f"m.x {HOUR + 10 * i} {i} host=web01 cpu=0\n" for i in range(100))
    (target.cwd / "x.txt").write_text(text)
    done = await target.run("import", "x.txt", "--auto-metric")
    assert done.code == 0, done.err
    assert "Compacted 1 rows" in done.out
    async with open_target(target) as store:
        rows = await data_rows(store.storage, store.cfg.storage)
    assert len(rows) == 1
    [cell] = rows[0].cells  # one compacted cell: 100 two-byte qualifiers
    assert len(cell.qualifier) == 200
    assert [p.value for p in await stored(target)] == list(range(100))


@embedded_only
@pytest.mark.parametrize(
    ("extra", "qualifiers"),
    [
        pytest.param("", {b"tsd_series"}, id="series-index"),
        pytest.param(
            "tsd.core.meta.enable_tsuid_tracking = true\n",
            {b"ts_ctr"},
            id="tsuid-tracking",
        ),
    ],
)
async def test_new_series_reach_the_meta_table_as_from_the_daemon(
    target: Target, extra: str, qualifiers: set[bytes]
) -> None:
    target.write_config(extra)
    lines = [f"a.b {HOUR} 1 host=web01 cpu=0", f"a.b {HOUR} 1 host=web02 cpu=0"]
    (target.cwd / "p.txt").write_text("\n".join(lines * 3))
    done = await target.run("import", "p.txt", "--auto-metric")
    assert (done.code, done.err) == (0, "")
    async with open_target(target) as store:
        table = store.cfg.storage.meta_table
        rows = [row async for row in store.storage.scan(table, ScanSpec())]
    # one row per series, keyed by its TSUID: metric 1, tagk cpu=1 host=2, tagv 0=1 web0N=N+1
    assert [row.key.hex() for row in rows] == [
        "000001000001000001000002000002",
        "000001000001000001000002000003",
    ]
    assert all({cell.qualifier for cell in row.cells} == qualifiers for row in rows)


@embedded_only
@pytest.mark.parametrize(
    ("name", "compress"),
    [
        pytest.param("points.txt.gz", True, id="gz-extension"),
        pytest.param("points.dat", True, id="gzip-magic"),
        pytest.param("points.txt", False, id="plain"),
    ],
)
async def test_gzip_by_extension_or_magic(target: Target, name: str, compress: bool) -> None:
    text = "".join(f"sys.cpu.user {HOUR + i} {i} host=web01 cpu=0\n" for i in range(50)).encode()
    (target.cwd / name).write_bytes(gzip.compress(text) if compress else text)
    done = await target.run("import", name, "--auto-metric")
    assert (done.code, done.err) == (0, "")
    assert await stored(target) == [point((HOUR + i) * 1000, i) for i in range(50)]


@embedded_only
async def test_files_in_order_and_stdin(target: Target) -> None:
    (target.cwd / "a.txt").write_text(f"sys.cpu.user {HOUR} 1 host=web01 cpu=0\n")
    (target.cwd / "b.txt").write_text(f"sys.cpu.user {HOUR} 2 host=web01 cpu=0\n")
    stdin = f"sys.cpu.user {HOUR + 1} 3 host=web01 cpu=0\n".encode()
    done = await target.run("import", "a.txt", "b.txt", "-", "--auto-metric", stdin=stdin)
    assert (done.code, done.err) == (0, "")
    assert rate_lines(done.out)[:3] == [
        "Processed a.txt in N ms, N data points (N points/s)",
        "Processed b.txt in N ms, N data points (N points/s)",
        "Processed - in N ms, N data points (N points/s)",
    ]
    assert "Total: imported 3 data points" in done.out
    # the same point in two files: the last one written wins, as with two puts
    assert await stored(target) == [point(HOUR * 1000, 2), point((HOUR + 1) * 1000, 3)]


BAD = [
    f"sys.cpu.user {HOUR} 1 host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 1} abc host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 2} 3 ",
    "",
    f"sys.cpu.user {HOUR + 4} 5 host=web01 cpu=0",
    f"sys.cpu.user -{HOUR} 6 host=web01 cpu=0",
    f"sys.cpu.user {HOUR + 6} 7 host=web01 cpu",
    f"sys.cpu.user {HOUR + 7} 8 host=web01 cpu=0\rsys.cpu.user {HOUR + 8} 9 cpu=0 host=web01",
]
BAD_REPORTS = [
    "points.txt:2: invalid value: Invalid character 'a' in abc"
    f" line=[sys.cpu.user {HOUR + 1} abc host=web01 cpu=0]",
    "points.txt:3: illegal argument: Need at least one tag (metric=sys.cpu.user, tags={})"
    f" line=[sys.cpu.user {HOUR + 2} 3 ]",
    "points.txt:4: illegal argument: not enough arguments (need least 4, got 1) line=[]",
    "points.txt:6: illegal argument: invalid timestamp: -1356998400"
    f" line=[sys.cpu.user -{HOUR} 6 host=web01 cpu=0]",
    "points.txt:7: illegal argument: invalid tag: cpu"
    f" line=[sys.cpu.user {HOUR + 6} 7 host=web01 cpu]",
]


@embedded_only
async def test_the_first_bad_line_stops_the_import(target: Target) -> None:
    (target.cwd / "points.txt").write_text("\n".join(BAD) + "\n")
    done = await target.run("import", "points.txt", "--auto-metric")
    assert done.code == 1
    assert done.err.splitlines() == [BAD_REPORTS[0], "1 bad line(s): import stopped"]
    assert "Total: imported 1 data points" in done.out
    assert await stored(target) == [point(HOUR * 1000, 1)]  # what came before it is kept


@embedded_only
async def test_skip_errors_reports_every_bad_line_with_its_number(target: Target) -> None:
    (target.cwd / "points.txt").write_text("\n".join(BAD) + "\n")
    done = await target.run("import", "points.txt", "--auto-metric", "--skip-errors")
    assert done.code == 0
    assert done.err.splitlines() == [*BAD_REPORTS, "5 bad line(s)"]
    assert "Total: imported 4 data points" in done.out
    # a lone CR ends a line too (Java's readLine); the line after it is line 9
    assert [p.value for p in await stored(target)] == [1, 5, 8, 9]


@embedded_only
async def test_new_metrics_need_auto_metric_or_mkmetric(target: Target) -> None:
    (target.cwd / "p.txt").write_text(f"new.metric {HOUR} 1 host=web01 cpu=0\n")
    refused = await target.run("import", "p.txt")
    assert refused.code == 1
    assert refused.err.splitlines()[0] == (
        "p.txt:1: No such name for 'metrics': 'new.metric'"
        f" line=[new.metric {HOUR} 1 host=web01 cpu=0]"
    )
    assert await stored(target) == []
    assert (await target.run("mkmetric", "new.metric")).code == 0
    done = await target.run("import", "p.txt")  # OpenTSDB's workflow: mkmetric, then import
    assert (done.code, done.err) == (0, "")
    assert await stored(target) == [point(HOUR * 1000, 1, "new.metric")]


@embedded_only
async def test_auto_create_metrics_from_the_config(target: Target) -> None:
    target.write_config("tsd.core.auto_create_metrics = true\n")
    (target.cwd / "p.txt").write_text(f"cfg.metric {HOUR} 1 host=web01 cpu=0\n")
    done = await target.run("import", "p.txt")
    assert (done.code, done.err) == (0, "")
    assert await stored(target) == [point(HOUR * 1000, 1, "cfg.metric")]


@embedded_only
async def test_utf8_names_are_read_as_opentsdbs_importer_reads_them(target: Target) -> None:
    # Java's InputStreamReader (UTF-8) turns the bytes into "température"; the UID table
    # stores names as ISO-8859-1, so the name's bytes there are 74 65 6D 70 E9 ...
    (target.cwd / "p.txt").write_bytes(f"température {HOUR} 1 host=web01 cpu=0\n".encode())
    done = await target.run("import", "p.txt", "--auto-metric")
    assert (done.code, done.err) == (0, "")
    async with open_target(target) as store:
        row = await store.storage.get(store.cfg.storage.uid_table, "température".encode("latin-1"))
    assert row is not None


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("missing.txt", None, "tsdb import: missing.txt: no such file", id="missing"),
        pytest.param(
            "cut.gz",
            gzip.compress(b"sys.cpu.user 1356998400 1 host=a\n" * 100)[:-30],
            "tsdb import: cut.gz: Compressed file ended before the end-of-stream marker was"
            " reached",
            id="truncated-gzip",
        ),
    ],
)
async def test_unreadable_files(tmp_path: Path, name: str, content: bytes | None, message: str):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    done = await tsdb(tmp_path, "import", name, "--data-dir", "data", "--auto-metric")
    assert done.code == 1
    assert message in done.err.splitlines()


async def test_import_needs_a_file(tmp_path: Path) -> None:
    done = await tsdb(tmp_path, "import", "--data-dir", "data")
    assert done.code == 2
    assert "required: FILE" in done.err


async def test_a_store_held_by_a_daemon_is_shared(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text(f"sys.cpu.user {HOUR} 1 host=web01 cpu=0\n")
    held = EmbeddedStorage(tmp_path / "data")  # the daemon's exclusive opener
    try:
        done = await tsdb(tmp_path, "import", "p.txt", "--data-dir", "data", "--auto-metric")
        rows = [row async for row in held.scan("tsdb", ScanSpec())]
    finally:
        await held.close()
    assert done.code == 0, done.err
    assert len(rows) == 1


async def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text(f"sys.cpu.user {HOUR} 1 host=web01 cpu=0\n" * 10)
    master, slave = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tsd",
            "import",
            "p.txt",
            "--data-dir",
            "data",
            "--auto-metric",
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        out, _ = await proc.communicate()
        seen = await asyncio.to_thread(_read_all, master)
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert "p.txt: 100.0% [##############################] 10 points, " in seen
    assert seen.rstrip().endswith("\r\x1b[K")  # the bar is erased when done
    assert b"\r" not in out  # stdout (a pipe) only has the report


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()
