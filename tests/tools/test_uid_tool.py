"""``tsdb uid`` through the real command line: OpenTSDB UidManager's output and exit statuses."""

from __future__ import annotations

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
from tsd.config import Config, build_config
from tsd.errors import NoSuchUniqueId, NoSuchUniqueName
from tsd.storage.embedded import EmbeddedStorage
from tsd.tools.common import open_store
from tsd.tools.uid import USAGE, id_bytes

pytestmark = pytest.mark.slow  # the CLI in subprocesses


@pytest.fixture(params=TARGET_PARAMS)
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


@pytest.fixture
async def filled(target: Target) -> Target:
    """metrics sys.cpu.user=1 sys.cpu.nice=2 net.bytes=3; tagk host=1 cpu=2; tagv web01=1."""
    async with open_target(target) as store:
        for kind, names in (
            ("metric", ("sys.cpu.user", "sys.cpu.nice", "net.bytes")),
            ("tagk", ("host", "cpu")),
            ("tagv", ("web01",)),
        ):
            for name in names:
                await store.uids.assign(kind, name)
    return target


async def test_assign_prints_each_mapping_in_java_array_form(target: Target) -> None:
    done = await target.run("uid", "assign", "tagv", "web01", "web02", "web01")
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines() == [
        "tagv web01: [0, 0, 1]",
        "tagv web02: [0, 0, 2]",
        "tagv web01: [0, 0, 1]",
    ]
    async with open_target(target) as store:
        assert await store.uids.tagv.get_name(b"\x00\x00\x02") == "web02"
        with pytest.raises(NoSuchUniqueName):
            await store.uids.metrics.get_id("web01")


async def test_assign_shows_signed_bytes_as_java_does(tmp_path: Path) -> None:
    # UID 200 is the byte 0xC8, which Java's Arrays.toString prints as -56.
    data = tmp_path / "data"
    async with open_store(_cfg(data)) as store:
        await store.storage.increment(store.cfg.storage.uid_table, b"\x00", "id", b"tagk", 199)
    done = await tsdb(tmp_path, "uid", "assign", "tagk", "dc", "--data-dir", str(data))
    assert done.out == "tagk dc: [0, 0, -56]\n"


async def test_grep_matches_anywhere_in_the_name(filled: Target) -> None:
    done = await filled.run("uid", "grep", "cpu")
    assert (done.code, done.err) == (0, "")
    # rows in key order; each kind the row maps
    assert done.out.splitlines() == [
        "tagk cpu: [0, 0, 2]",
        "metrics sys.cpu.nice: [0, 0, 2]",
        "metrics sys.cpu.user: [0, 0, 1]",
    ]


@embedded_only
@pytest.mark.parametrize(
    ("words", "code", "lines"),
    [
        pytest.param(["grep", "tagk", "o"], 0, ["tagk host: [0, 0, 1]"], id="one-kind"),
        pytest.param(["grep", "metric", "^net"], 0, ["metrics net.bytes: [0, 0, 3]"], id="metric"),
        pytest.param(["grep", "HOST"], 1, [], id="case-sensitive"),
        pytest.param(["grep", "-i", "HOST"], 0, ["tagk host: [0, 0, 1]"], id="ignore-case"),
        pytest.param(["grep", "tagv", "cpu"], 1, [], id="no-match"),
        pytest.param(["grep", "."], 0, None, id="counter-row-skipped"),
    ],
)
async def test_grep(filled: Target, words: list[str], code: int, lines: list[str] | None) -> None:
    done = await filled.run("uid", *words)
    assert done.code == code
    if lines is not None:
        assert done.out.splitlines() == lines
    else:
        assert len(done.out.splitlines()) == 6
        assert "\x00" not in done.out


@embedded_only
async def test_grep_with_a_bad_regexp_is_a_usage_error(filled: Target) -> None:
    done = await filled.run("uid", "grep", "(")
    assert done.code == 2
    assert done.err.startswith("Invalid regular expression '(': ")


@embedded_only
@pytest.mark.parametrize(
    ("words", "code", "out", "err"),
    [
        pytest.param(["metrics", "net.bytes"], 0, "metrics net.bytes: [0, 0, 3]\n", "", id="name"),
        pytest.param(["host"], 0, "tagk host: [0, 0, 1]\n", "", id="name-any-kind"),
        pytest.param(
            ["tagk", "nope"], 1, "", "No such name for 'tagk': 'nope'\n", id="name-missing"
        ),
        pytest.param(["nope"], 1, "", "", id="name-missing-any-kind"),
        pytest.param(["tagk", "2"], 0, "tagk cpu: [0, 0, 2]\n", "", id="id"),
        pytest.param(
            ["1"],
            0,
            "metrics sys.cpu.user: [0, 0, 1]\ntagk host: [0, 0, 1]\ntagv web01: [0, 0, 1]\n",
            "",
            id="id-any-kind",
        ),
        pytest.param(
            ["tagv", "9"], 1, "", "No such unique ID for 'tagv': [0, 0, 9]\n", id="id-missing"
        ),
        pytest.param(
            ["16777216"],
            1,
            "",
            "16777216 is too large to fit on 3 bytes.  Maybe you forgot to adjust --idwidth?\n",
            id="id-too-large",
        ),
    ],
)
async def test_lookups(filled: Target, words: list[str], code: int, out: str, err: str) -> None:
    done = await filled.run("uid", *words)
    assert (done.code, done.out, done.err) == (code, out, err)


async def test_rename_moves_the_uid_to_the_new_name(filled: Target) -> None:
    done = await filled.run("uid", "rename", "metrics", "sys.cpu.nice", "sys.cpu.niced")
    assert (done.code, done.out, done.err) == (0, "metrics sys.cpu.nice -> sys.cpu.niced\n", "")
    async with open_target(filled) as store:
        assert await store.uids.metrics.get_id("sys.cpu.niced") == b"\x00\x00\x02"
        assert await store.uids.metrics.get_name(b"\x00\x00\x02") == "sys.cpu.niced"
        with pytest.raises(NoSuchUniqueName):
            await store.uids.metrics.get_id("sys.cpu.nice")


@embedded_only
@pytest.mark.parametrize(
    ("old", "new", "err"),
    [
        pytest.param("nope", "other", "No such name for 'metrics': 'nope'", id="missing"),
        pytest.param(
            "net.bytes",
            "sys.cpu.user",
            'When trying rename("net.bytes", "sys.cpu.user") on UniqueId(',
            id="taken",
        ),
        pytest.param("net.bytes", "a b", 'Invalid metric name ("a b")', id="invalid"),
    ],
)
async def test_rename_failures(filled: Target, old: str, new: str, err: str) -> None:
    done = await filled.run("uid", "rename", "metrics", old, new)
    assert (done.code, done.out) == (1, "")
    assert done.err.startswith(err)
    async with open_target(filled) as store:  # nothing changed
        assert await store.uids.metrics.get_id("net.bytes") == b"\x00\x00\x03"
        assert await store.uids.metrics.get_id("sys.cpu.user") == b"\x00\x00\x01"


async def test_delete_removes_both_mappings(filled: Target) -> None:
    done = await filled.run("uid", "delete", "tagk", "cpu")
    assert (done.code, done.out, done.err) == (0, "UID tagk cpu deleted.\n", "")
    async with open_target(filled) as store:
        with pytest.raises(NoSuchUniqueName):
            await store.uids.tagk.get_id("cpu")
        with pytest.raises(NoSuchUniqueId):
            await store.uids.tagk.get_name(b"\x00\x00\x02")
    again = await filled.run("uid", "delete", "tagk", "cpu")
    assert (again.code, again.err) == (1, "No such name for 'tagk': 'cpu'\n")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        pytest.param([], "Not enough arguments", id="nothing"),
        pytest.param(["assign", "metrics"], "Wrong number of arguments", id="assign"),
        pytest.param(["grep"], "Wrong number of arguments", id="grep"),
        pytest.param(["grep", "a", "b", "c"], "Wrong number of arguments", id="grep-many"),
        pytest.param(["rename", "tagk", "a"], "Wrong number of arguments", id="rename"),
        pytest.param(["delete", "tagk"], "Wrong number of arguments", id="delete"),
        pytest.param(["tagk", "a", "b"], "Wrong number of arguments", id="lookup"),
        pytest.param(["fsck"], "The fsck sub-command is not implemented by tsd", id="fsck"),
    ],
)
async def test_usage_errors_exit_2(tmp_path: Path, words: list[str], message: str) -> None:
    done = await tsdb(tmp_path, "uid", *words, "--data-dir", str(tmp_path / "data"))
    assert (done.code, done.out) == (2, "")
    assert done.err == f"{message}\n{USAGE}\n"
    assert not (tmp_path / "data").exists()  # nothing was opened


@embedded_only
async def test_an_unknown_kind_is_refused(filled: Target) -> None:
    done = await filled.run("uid", "assign", "metricz", "a")
    assert (done.code, done.out) == (1, "")
    assert done.err == "tsdb uid: Invalid type requested: metricz\n"


async def test_lookups_and_grep_work_beside_a_running_daemon(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_store(_cfg(data)) as store:
        await store.uids.metrics.assign("live.metric")
    held = EmbeddedStorage(data)  # a daemon holds the store open for writing
    try:
        looked = await tsdb(tmp_path, "uid", "metrics", "live.metric", "--data-dir", str(data))
        grepped = await tsdb(tmp_path, "uid", "grep", "live", "--data-dir", str(data))
        assigned = await tsdb(tmp_path, "uid", "assign", "tagk", "x", "--data-dir", str(data))
    finally:
        await held.close()
    assert (looked.code, looked.out) == (0, "metrics live.metric: [0, 0, 1]\n")
    assert (grepped.code, grepped.out) == (0, "metrics live.metric: [0, 0, 1]\n")
    # Writing shares the store with the daemon (tests/tools/test_beside_daemon.py).
    assert (assigned.code, assigned.out) == (0, "tagk x: [0, 0, 1]\n")


@pytest.mark.parametrize(
    ("number", "width", "expected"),
    [
        pytest.param(1, 3, b"\x00\x00\x01", id="one"),
        pytest.param(0xFFFFFF, 3, b"\xff\xff\xff", id="max-3"),
        pytest.param(0x1000000, 3, None, id="over-3"),
        pytest.param(0x1000000, 4, b"\x01\x00\x00\x00", id="fits-4"),
        pytest.param(-1, 3, None, id="negative"),
        pytest.param(-1, 8, b"\xff" * 8, id="negative-8"),
    ],
)
def test_id_bytes(number: int, width: int, expected: bytes | None) -> None:
    assert id_bytes(number, width) == expected


def _cfg(data: Path) -> Config:
    return build_config({"tsd.storage.data_dir": str(data)})
