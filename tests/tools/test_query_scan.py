"""``tsdb version``, ``tsdb query`` and ``tsdb scan`` through the real command line: the
words OpenTSDB's CliQuery takes, its output lines, and scan --import lines that
``tsdb import`` reads back into the same points."""

from __future__ import annotations

import contextlib
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
from tests.write.readback import stored_points
from tsd.buildinfo import version_reply
from tsd.errors import UsageError
from tsd.java_text import format_java_bytes
from tsd.protocol.cli_query import CliQuery, parse_cli_query
from tsd.protocol.query_json import parse_query_params
from tsd.query.engine import QueryEngine
from tsd.tools.query import java_percent_f

pytestmark = pytest.mark.slow  # the CLI in subprocesses

HOUR = 1_356_998_400  # 2013-01-01T00:00:00Z

#: import lines: ints of every width, 4- and 8-byte floats, a millisecond point, two hours,
#: two series of one host and one of another
POINTS = "\n".join(
    [
        f"sys.cpu.user {HOUR} 42 host=web01 cpu=0",
        f"sys.cpu.user {HOUR + 10} 1.5 host=web01 cpu=0",
        f"sys.cpu.user {HOUR + 20} -300000 host=web01 cpu=0",
        f"sys.cpu.user {HOUR + 3600} 9223372036854775807 host=web01 cpu=0",
        f"sys.cpu.user {(HOUR + 30) * 1000 + 250} 7 host=web01 cpu=0",
        f"sys.cpu.user {HOUR} 0.1 host=web02 cpu=0",
        f"sys.cpu.user {HOUR + 60} 3 host=web02 cpu=0",
        f"sys.mem.free {HOUR + 5} 100 host=web01",
    ]
)


@pytest.fixture(params=TARGET_PARAMS)
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


async def load(target: Target) -> None:
    (target.cwd / "points.txt").write_text(POINTS + "\n")
    done = await target.run("import", "--auto-metric", "points.txt")
    assert done.code == 0, done.err


# -- the words ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["1h-ago", "sum", "m"], CliQuery("1h-ago", None, ("sum:m",))),
        (
            ["2013/01/01-00:00", "2013/01/02-00:00", "avg", "m", "host=a", "max", "n"],
            CliQuery("2013/01/01-00:00", "2013/01/02-00:00", ("avg:m{host=a}", "max:n")),
        ),
        # a positive number as the second word is the end; +params are skipped
        (
            ["1356998400", "1357000000", "+key=v", "sum", "m"],
            CliQuery("1356998400", "1357000000", ("sum:m",)),
        ),
        (
            ["1d-ago", "sum", "rate", "counter,1000,5", "downsample", "60000", "avg", "m", "a=b"],
            CliQuery("1d-ago", None, ("sum:rate{counter,1000,5}:60000ms-avg:m{a=b}",)),
        ),
        (
            ["1d-ago", "sum", "rate", "counter", "m"],
            CliQuery("1d-ago", None, ("sum:rate{counter,,}:m",)),
        ),
        (["1d-ago", "sum", "rate", "m", "w 2 title"], CliQuery("1d-ago", None, ("sum:rate:m",))),
        # three words: the second is never an end date
        (["1d-ago", "sum", "m"], CliQuery("1d-ago", None, ("sum:m",))),
    ],
)
def test_cli_query_words(words: list[str], expected: CliQuery) -> None:
    assert parse_cli_query(words) == expected


@pytest.mark.parametrize("words", [["1h-ago"], ["1h-ago", "sum"], ["1h-ago", "sum", "rate"]])
def test_cli_query_needs_a_whole_query(words: list[str]) -> None:
    with pytest.raises(UsageError):
        parse_cli_query(words)


def test_percent_f_rounds_half_up_as_java() -> None:
    assert java_percent_f(0.0078125) == "0.007813"  # an exact tie: Python's %f gives ...812
    assert java_percent_f(1.5) == "1.500000"
    assert java_percent_f(-2.0) == "-2.000000"
    assert java_percent_f(float("nan")) == "NaN"


# -- the commands -------------------------------------------------------------------------------


async def test_version(tmp_path: Path) -> None:
    done = await tsdb(tmp_path, "version")
    assert done.code == 0
    assert done.out == version_reply().decode()
    assert done.out.startswith("tsd ")


@embedded_only
async def test_query_prints_cliquery_lines(target: Target) -> None:
    await load(target)
    words = ["2013/01/01-00:00", "2013/01/01-03:00", "sum", "sys.cpu.user", "host=*"]
    done = await target.run("query", *words)
    assert done.code == 0, done.err
    # The same query through the engine /api/query uses, printed as CliQuery prints it:
    # integers as they are, other values with %f, the group's tags as a Java HashMap.
    async with open_target(target) as store:
        engine = QueryEngine(store.storage, store.uids, store.cfg)
        params = {"start": [words[0]], "end": [words[1]], "m": ["sum:sys.cpu.user{host=*}"]}
        result = await engine.execute(parse_query_params(params))
    expected = []
    for series in result.series:
        tags = "{" + ", ".join(f"{k}={series.tags[k]}" for k in ("host", "cpu")) + "}"
        for timestamp_ms, value in series.dps.points():
            shown = str(value) if isinstance(value, int) else f"{value:.6f}"
            expected.append(f"sys.cpu.user {timestamp_ms} {shown} {tags}")
    assert len(expected) == 7
    assert done.out.splitlines() == expected


@embedded_only
async def test_query_runs_each_query_in_order(target: Target) -> None:
    await load(target)
    done = await target.run(
        "query",
        f"{HOUR}",
        f"{HOUR + 7200}",
        "max",
        "sys.mem.free",
        "sum",
        "sys.cpu.user",
        "host=web02",
    )
    assert done.code == 0, done.err
    assert done.out.splitlines() == [
        f"sys.mem.free {(HOUR + 5) * 1000} 100 {{host=web01}}",
        f"sys.cpu.user {HOUR * 1000} 0.100000 {{host=web02, cpu=0}}",
        f"sys.cpu.user {(HOUR + 60) * 1000} 3 {{host=web02, cpu=0}}",
    ]


@embedded_only
async def test_query_errors(target: Target) -> None:
    await load(target)
    unknown = await target.run("query", "1h-ago", "sum", "no.such.metric")
    assert (unknown.code, unknown.err) == (
        1,
        "tsdb query: No such name for 'metrics': 'no.such.metric'\n",
    )
    usage = await target.run("query", "1h-ago", "sum")
    assert usage.code == 2
    assert usage.err.startswith(
        "tsdb query: Not enough arguments, need at least one query.\nusage:"
    )


@embedded_only
async def test_scan_shows_the_stored_cells(target: Target) -> None:
    await load(target)
    done = await target.run("scan", f"{HOUR}", f"{HOUR + 60}", "sum", "sys.mem.free")
    assert done.code == 0, done.err
    async with open_target(target) as store:
        uids = store.uids
        key = (
            await uids.metrics.get_id("sys.mem.free")
            + HOUR.to_bytes(4, "big")
            + await uids.tagk.get_id("host")
            + await uids.tagv.get_id("web01")
        )
    assert done.out.splitlines() == [
        f"{format_java_bytes(key)} sys.mem.free 1356998400 "
        "(Tue Jan 01 00:00:00 UTC 2013) {host=web01}",
        "  [0, 80]\t[100]\t5\tl\t1356998405\t(Tue Jan 01 00:00:05 UTC 2013)",
    ]


@pytest.mark.parametrize("backend", TARGET_PARAMS)
async def test_scan_import_lines_import_back_to_the_same_points(
    backend: str, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    target_of = contextlib.contextmanager(make_target)
    with target_of(backend, tmp_path / "a") as first, target_of(backend, tmp_path / "b") as second:
        await scan_and_import_back(first, second)


async def scan_and_import_back(first: Target, second: Target) -> None:
    await load(first)
    done = await first.run(
        "scan", "--import", f"{HOUR - 3600}", f"{HOUR + 7200}", "sum", "sys.cpu.user"
    )
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert f"sys.cpu.user {(HOUR + 30) * 1000 + 250} 7 host=web01 cpu=0" in lines
    assert f"sys.cpu.user {HOUR + 10} 1.5 host=web01 cpu=0" in lines
    assert f"sys.cpu.user {HOUR} 0.1 host=web02 cpu=0" in lines
    (second.cwd / "scan.txt").write_text(done.out)
    imported = await second.run("import", "--auto-metric", "scan.txt")
    assert imported.code == 0, imported.err
    async with open_target(first) as store:
        before = [
            p
            for p in await stored_points(store.storage, store.cfg.storage, store.uids)
            if p.metric == "sys.cpu.user"
        ]
    async with open_target(second) as store:
        after = await stored_points(store.storage, store.cfg.storage, store.uids)
    assert len(before) == 7
    assert after == before


@embedded_only
async def test_scan_delete_removes_the_rows_it_prints(target: Target) -> None:
    await load(target)
    done = await target.run(
        "scan", "--delete", f"{HOUR}", f"{HOUR + 600}", "sum", "sys.cpu.user", "host=web02"
    )
    assert done.code == 0, done.err
    assert done.out.splitlines() == [
        f"sys.cpu.user {HOUR} 0.1 host=web02 cpu=0",
        f"sys.cpu.user {HOUR + 60} 3 host=web02 cpu=0",
    ]
    async with open_target(target) as store:
        left = await stored_points(store.storage, store.cfg.storage, store.uids)
    assert {p.tags for p in left if p.metric == "sys.cpu.user"} == {
        (("cpu", "0"), ("host", "web01"))
    }
    again = await target.run(
        "scan", "--import", f"{HOUR}", f"{HOUR + 600}", "sum", "sys.cpu.user", "host=web02"
    )
    assert (again.code, again.out) == (0, "")
