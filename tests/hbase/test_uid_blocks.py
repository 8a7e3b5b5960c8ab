"""UIDs from reserved blocks on the real HBase (issue 28): OpenTSDB racing two tsds, and a
tsd killed in the middle of a block (two tsds racing alone: tests/hbase/test_two_tsds.py),
checked with ``tsdb uid fsck`` and OpenTSDB 2.4.1's own ``UidManager fsck`` on the same
tables.

A tsd reserves a block of IDs with one increment of the counter row, writes the reverse
mappings as plain puts, then the forward mappings as check-and-puts; the loser of a race
for a name deletes the reverse mapping of the ID it had reserved (only it ever held that
ID). OpenTSDB leaves such a mapping behind ("... was leaked") and both fsck tools report it
as an error ("Inconsistent reverse ... mapping"): those are the only findings left when
OpenTSDB races too, listed here by ID from OpenTSDB's own log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import signal
from pathlib import Path

import aiohttp
import pytest

from tests.hbase.fault_proxy import fault_proxy
from tests.hbase.opentsdb import (
    UidTable,
    fresh_tables,
    put_telnet,
    read_uid_table,
    running_opentsdb,
    tool_logback,
)
from tests.hbase.test_cli_parity import Clis
from tests.hbase.tsd_process import launch, tsd_process, wait_ready
from tests.hbase_harness import HBaseServer
from tests.tools.toolkit import Result, Target
from tsd.config import StorageConfig
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

pytestmark = pytest.mark.hbase

H0 = 1356998400
NAMES = 150
#: OpenTSDB's points are this much later than the tsds' (same series, its own cells)
OPENTSDB_OFFSET_S = 1
QUERIES_PER_BODY = 25
KINDS = ("metrics", "tagk", "tagv")
UID_LOGBACK = tool_logback("net.opentsdb.tools.UidManager")
#: OpenTSDB's UniqueId when it loses the forward check-and-put (its ID stays mapped)
OPENTSDB_LEAK = re.compile(r"Race condition: tried to assign ID (\d+) to (\w+):")


def race_lines(offset_s: int = 0) -> list[str]:
    """Each line a new metric, tag key and tag value, plus a tag pair every line shares."""
    return [
        f"put blk.metric.{i} {H0 + i + offset_s} {i} blkk{i}=blkv{i} shared=all"
        for i in range(NAMES)
    ]


async def series_read_by(url: str) -> dict[int, tuple[int, int]]:
    """Series i -> the point at its tsd timestamp, as OpenTSDB's /api/query reads it (in
    bodies of QUERIES_PER_BODY sub-queries: OpenTSDB takes 8 KiB a body)."""
    found: dict[int, tuple[int, int]] = {}
    async with aiohttp.ClientSession() as http:
        for first in range(0, NAMES, QUERIES_PER_BODY):
            queries = [
                {"aggregator": "sum", "metric": f"blk.metric.{i}", "tags": {f"blkk{i}": f"blkv{i}"}}
                for i in range(first, min(NAMES, first + QUERIES_PER_BODY))
            ]
            body = json.dumps({"start": H0, "end": H0 + 3600, "queries": queries})
            headers = {"Content-Type": "application/json"}
            async with http.post(f"{url}/api/query", data=body, headers=headers) as reply:
                assert reply.status == 200, await reply.text()
                answers = await reply.json()
            for answer in answers:
                i = int(answer["metric"].rsplit(".", 1)[1])
                assert answer["tags"] == {f"blkk{i}": f"blkv{i}", "shared": "all"}
                found[i] = (H0 + i, answer["dps"][str(H0 + i)])
    return found


def expected_names() -> dict[str, set[str]]:
    return {
        "metrics": {f"blk.metric.{i}" for i in range(NAMES)},
        "tagk": {f"blkk{i}" for i in range(NAMES)} | {"shared"},
        "tagv": {f"blkv{i}" for i in range(NAMES)} | {"all"},
    }


async def uid_table(cfg: StorageConfig) -> UidTable:
    storage = HBaseStorage(hbase_settings(cfg))
    try:
        return await read_uid_table(storage, cfg)
    finally:
        await storage.close()


class Fscks:
    """``tsdb uid fsck`` and OpenTSDB's ``UidManager fsck`` on one set of tables."""

    def __init__(self, server: HBaseServer, cfg: StorageConfig, workdir: Path) -> None:
        workdir.mkdir()
        self.clis = Clis(server, cfg, workdir)
        self.target = Target(workdir, self.clis.tsd_conf, "hbase")
        self.logback = workdir / "uid-logback.xml"
        self.logback.write_text(UID_LOGBACK)

    async def tsd(self, *args: str) -> Result:
        return await self.target.run("uid", "fsck", *args)

    async def opentsdb(self) -> tuple[int, str]:
        done = await self.clis.run_opentsdb("UidManager", "--verbose", "fsck", logback=self.logback)
        return done.returncode, done.stderr


def assert_one_uid_per_name(uids: UidTable) -> None:
    """Every name has one UID, every UID one name, every forward mapping its reverse one."""
    assert uids.problems() == []
    for kind, names in expected_names().items():
        assert {name.decode() for name in uids.forward[kind]} == names, kind


async def test_opentsdb_racing_too_leaves_only_its_own_leaked_ids(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    """Two tsds and OpenTSDB 2.4.1 on the same new names at once: one UID per name; the
    only orphan reverse mappings are the IDs OpenTSDB says it leaked, and they are all
    the fsck tools report. OpenTSDB then reads every series the tsds wrote (its own points
    are a second later, so the tsds' are told apart)."""
    lines = race_lines()
    its_lines = race_lines(OPENTSDB_OFFSET_S)
    no_compaction = {"tsd.storage.enable_compaction": "false"}
    async with fresh_tables(hbase_server) as cfg:
        async with running_opentsdb(
            hbase_server, cfg, tmp_path / "opentsdb", no_compaction
        ) as opentsdb:
            async with (
                tsd_process(cfg, tmp_path / "tsd1.log") as first,
                tsd_process(cfg, tmp_path / "tsd2.log") as second,
            ):
                replies = await asyncio.gather(
                    put_telnet(first, lines),
                    put_telnet(second, lines),
                    put_telnet(opentsdb.port, its_lines),
                )
                assert list(replies) == [[], [], []]
            # the tsds have stopped, having written every point they took
            assert await series_read_by(opentsdb.url) == {i: (H0 + i, i) for i in range(NAMES)}
        # OpenTSDB has stopped (it waits for its pending writes on the way out)
        log = await asyncio.to_thread(opentsdb.log.read_text, errors="replace")
        leaked_by_opentsdb = {(kind, int(uid)) for uid, kind in OPENTSDB_LEAK.findall(log)}
        uids = await uid_table(cfg)
        assert_one_uid_per_name(uids)
        orphans = {
            (kind, int.from_bytes(uid, "big")) for kind in KINDS for uid in uids.leaked(kind)
        }
        assert orphans == leaked_by_opentsdb
        fscks = Fscks(hbase_server, cfg, tmp_path / "fsck")
        ours = await fscks.tsd()
        errors = sorted(line for line in ours.out.splitlines() if "Inconsistent" in line)
        assert len(errors) == len(orphans), ours.out
        for kind, number in orphans:
            uid = number.to_bytes(3, "big").hex().upper()
            assert any(f"reverse {kind} mapping {uid} -> " in line for line in errors), uid
        assert "is missing" not in ours.out
        assert ours.code == (1 if orphans else 0), ours.out
        code, theirs = await fscks.opentsdb()
        assert code == len(orphans), theirs  # OpenTSDB exits with its error count
        assert theirs.count("Inconsistent reverse") == len(orphans), theirs
        assert "is missing" not in theirs


async def test_a_tsd_killed_in_the_middle_of_a_block_leaves_only_reverse_mappings(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    """A tsd killed with -9 after writing a block's reverse mappings and before its forward
    mappings land (the proxy in front of the gateway holds every checkAndPut): what is left
    is the reverse mappings of the names in flight, nothing else; both fsck tools warn
    about them only, ``tsdb uid fsck fix`` removes them, and OpenTSDB's fsck is clean."""
    new_values = [f"killv{i}" for i in range(500)]
    async with (
        fresh_tables(hbase_server) as cfg,
        fault_proxy(cfg.thrift_host, cfg.thrift_port) as proxy,
    ):
        via_proxy = dataclasses.replace(cfg, thrift_port=proxy.port)
        log = tmp_path / "tsd.log"
        process, port = await launch(via_proxy, log)
        try:
            await wait_ready(process, port, log)
            # the metric, the tag key and one value assigned in full first
            assert await put_telnet(port, [f"put kill.metric {H0} 1 host=known"]) == []
            await proxy.hold_checks()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                "".join(f"put kill.metric {H0} 1 host={value}\n" for value in new_values).encode()
            )
            await writer.drain()
            await proxy.wait_held()
            await asyncio.sleep(0.5)  # any other batch of the burst gets as far
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        writer.close()

        uids = await uid_table(cfg)
        assert uids.problems() == []
        assert {name.decode() for name in uids.forward["tagv"]} == {"known"}
        assert set(uids.forward["metrics"]) == {b"kill.metric"}
        orphans = uids.leaked("tagv")
        # What it leaves: reverse mappings of names in flight (none has a forward mapping),
        # their IDs within the counter; nothing else (no other kind, no forward mapping).
        assert orphans
        assert {name.decode() for name in orphans.values()} <= set(new_values)
        assert len(set(orphans.values())) == len(orphans)
        assert uids.leaked("metrics") == uids.leaked("tagk") == {}
        assert max(int.from_bytes(uid, "big") for uid in orphans) <= uids.counters["tagv"]

        fscks = Fscks(hbase_server, cfg, tmp_path / "fsck")
        ours = await fscks.tsd()
        missing = [line for line in ours.out.splitlines() if "is missing forward" in line]
        assert len(missing) == len(orphans), ours.out
        code, theirs = await fscks.opentsdb()
        assert theirs.count("Reverse tagv mapping is missing forward mapping") == len(orphans)
        fixed = await fscks.tsd("fix")
        assert fixed.out.count("FIX: Removed tagv reverse mapping") == len(orphans), fixed.out
        assert (await uid_table(cfg)).leaked("tagv") == {}
        code, theirs = await fscks.opentsdb()
        assert code == 0, theirs
        assert "missing" not in theirs
        again = await fscks.tsd()
        assert again.code == 0, again.out
        assert "missing" not in again.out
