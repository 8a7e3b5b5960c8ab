"""``tsdb search lookup`` through the real command line: the series found, their lines, the
limit, and the exit statuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.toolkit import Target, embedded_only, make_target, open_target
from tsd.protocol.names import java_hash_order

pytestmark = pytest.mark.slow  # the CLI in subprocesses

POINTS = [
    "sys.cpu.user 1356998400 1 host=web01 cpu=0",
    "sys.cpu.user 1356998400 2 host=web02 cpu=0",
    "sys.cpu.user 1356998400 3 host=web02 cpu=1",
    "sys.mem.free 1356998400 4 host=web01",
]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


async def line_of(target: Target, metric: str, tags: dict[str, str]) -> str:
    """The expected line: the TSUID from the store's UIDs, tags in HashMap order."""
    async with open_target(target) as store:
        uids = store.uids
        pairs = sorted(
            [(await uids.tagk.get_id(k), await uids.tagv.get_id(v)) for k, v in tags.items()]
        )
        tsuid = await uids.metrics.get_id(metric) + b"".join(k + v for k, v in pairs)
    words = "".join(f"{k}={tags[k]} " for k in java_hash_order(tags))
    return f"{tsuid.hex().upper()} {metric} {words}"


async def lookup(target: Target, *words: str) -> list[str]:
    done = await target.run("search", "lookup", *words)
    assert done.code == 0, done.err
    return done.out.splitlines()


@embedded_only
async def test_search_lookup(target: Target) -> None:
    (target.cwd / "points.txt").write_text("\n".join(POINTS) + "\n")
    assert (await target.run("import", "--auto-metric", "points.txt")).code == 0
    web01 = await line_of(target, "sys.cpu.user", {"host": "web01", "cpu": "0"})
    web02_0 = await line_of(target, "sys.cpu.user", {"host": "web02", "cpu": "0"})
    web02_1 = await line_of(target, "sys.cpu.user", {"host": "web02", "cpu": "1"})
    mem = await line_of(target, "sys.mem.free", {"host": "web01"})

    assert sorted(await lookup(target, "sys.cpu.user")) == sorted([web01, web02_0, web02_1])
    assert sorted(await lookup(target, "sys.cpu.user", "host=web02")) == sorted([web02_0, web02_1])
    assert sorted(await lookup(target, "host=web01")) == sorted([web01, mem])
    assert sorted(await lookup(target, "=1")) == [web02_1]
    assert sorted(await lookup(target, "sys.mem.free", "host=")) == [mem]
    assert len(await lookup(target, "sys.cpu.user", "--limit", "2")) == 2

    unknown = await target.run("search", "lookup", "no.such")
    assert (unknown.code, unknown.err) == (
        1,
        "tsdb search: No such name for 'metrics': 'no.such'\n",
    )
    wrong = await target.run("search", "find", "x")
    assert wrong.code == 2
    assert wrong.err.startswith("tsdb search: Unknown sub command: find\n")
