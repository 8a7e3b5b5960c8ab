"""``tsdb mkmetric`` through the real command line: output, exit status and the stored UIDs."""

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
from tsd.codec.const import UID_ID_FAMILY, UID_MAXID_ROW
from tsd.errors import NoSuchUniqueName
from tsd.storage.embedded import EmbeddedStorage

pytestmark = pytest.mark.slow  # the CLI in subprocesses


@pytest.fixture(params=TARGET_PARAMS)
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


async def max_id(target: Target, kind: bytes = b"metrics") -> int:
    async with open_target(target) as store:
        row = await store.storage.get(store.cfg.storage.uid_table, UID_MAXID_ROW)
        raw = None if row is None else row.value(UID_ID_FAMILY, kind)
        return 0 if raw is None else int.from_bytes(raw, "big")


async def test_mkmetric_assigns_and_prints_each_uid(target: Target) -> None:
    done = await target.run("mkmetric", "sys.cpu.user", "sys.cpu.nice")
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines() == [
        "metrics sys.cpu.user: [0, 0, 1]",
        "metrics sys.cpu.nice: [0, 0, 2]",
    ]
    async with open_target(target) as store:
        assert await store.uids.metrics.get_id("sys.cpu.user") == b"\x00\x00\x01"
        assert await store.uids.metrics.get_name(b"\x00\x00\x02") == "sys.cpu.nice"
        with pytest.raises(NoSuchUniqueName):  # metrics only: no tag key was made
            await store.uids.tagk.get_id("sys.cpu.user")


@embedded_only
async def test_mkmetric_on_an_existing_name_prints_its_uid_and_succeeds(target: Target) -> None:
    # OpenTSDB's UidManager.assign uses getOrCreateId: an existing name is printed, exit 0,
    # so provisioning scripts can run mkmetric again.
    assert (await target.run("mkmetric", "a.b")).code == 0
    done = await target.run("mkmetric", "new.one", "a.b")
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines() == ["metrics new.one: [0, 0, 2]", "metrics a.b: [0, 0, 1]"]
    assert await max_id(target) == 2  # no UID was spent on the existing name


@embedded_only
async def test_mkmetric_refuses_names_that_no_put_could_use(target: Target) -> None:
    done = await target.run("mkmetric", "bad name", "good.name", "")
    assert done.code == 1
    assert done.out.splitlines() == ["metrics good.name: [0, 0, 1]"]
    assert done.err.splitlines() == [
        'Invalid metric name ("bad name"): illegal character:  ',
        "Invalid metric name: empty string",
    ]
    assert await max_id(target) == 1


@embedded_only
async def test_mkmetric_follows_the_configured_width_and_special_characters(
    target: Target,
) -> None:
    target.write_config("tsd.storage.uid.width.metric = 4\ntsd.core.tag.allow_specialchars = :\n")
    done = await target.run("mkmetric", "app:latency")
    assert (done.code, done.err) == (0, "")
    assert done.out == "metrics app:latency: [0, 0, 0, 1]\n"


@embedded_only
async def test_mkmetric_data_dir_flag_overrides_the_config(target: Target) -> None:
    other = target.cwd / "other"
    done = await target.run("mkmetric", "x.y", "--data-dir", str(other))
    assert done.code == 0
    storage = EmbeddedStorage(other, read_only=True)
    try:
        row = await storage.get("tsdb-uid", b"x.y")
        assert row is not None
        assert row.value("id", b"metrics") == b"\x00\x00\x01"
    finally:
        await storage.close()
    assert await max_id(target) == 0  # the configured store was not touched


async def test_mkmetric_needs_a_name(tmp_path: Path) -> None:
    done = await tsdb(tmp_path, "mkmetric", "--data-dir", str(tmp_path / "d"))
    assert done.code == 2
    assert "required: NAME" in done.err


async def test_mkmetric_on_a_store_held_by_a_daemon_shares_it(tmp_path: Path) -> None:
    held = EmbeddedStorage(tmp_path / "data")  # the running daemon's exclusive opener
    try:
        done = await tsdb(tmp_path, "mkmetric", "a.b", "--data-dir", str(tmp_path / "data"))
    finally:
        await held.close()
    assert (done.code, done.out, done.err) == (0, "metrics a.b: [0, 0, 1]\n", "")
