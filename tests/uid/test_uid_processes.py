"""Batched UID assignment by several processes on one embedded store at once.

Each process opens the store as the tools do beside a daemon (``exclusive=False``: LMDB
serialises their write transactions), has its own UniqueId and cache, and asks for
overlapping names in batches. Whoever wins each name, every process must end up with the
same UID for it, no UID may name two names, and the counter must account for every ID:
used, or leaked by a lost forward race.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import pytest

from tsd.config import StorageConfig
from tsd.storage.base import ScanSpec
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import opentsdb_tables
from tsd.uid.cache import UidCache
from tsd.uid.uniqueid import MAXID_ROW, UniqueId

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 3
NAMES = [f"host-{i:04d}" for i in range(1500)]
BATCHES = 6
BATCH = 500


async def _assign(data_dir: str, table: str, seed: int) -> dict[str, object]:
    """One process: open the store, say so, wait for "go" on stdin, assign its batches."""
    storage = EmbeddedStorage(Path(data_dir), exclusive=False)
    try:
        tagv = UniqueId(storage, table, "tagv", 3, UidCache(10_000), auto_create=True)
        rng = random.Random(seed)
        batches = [rng.sample(NAMES, BATCH) for _ in range(BATCHES)]
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        results = await asyncio.gather(*(tagv.get_or_create_ids(batch) for batch in batches))
        found: dict[str, str] = {}
        for result in results:
            for name, uid in result.items():
                if found.setdefault(name, uid.hex()) != uid.hex():
                    found[name] = "split"
        return {
            "uids": found,
            "assignments": tagv.stats.assignments,
            "lost_races": tagv.stats.lost_races,
        }
    finally:
        await storage.close()


@pytest.mark.slow
async def test_processes_assigning_overlapping_batches_agree_on_every_uid(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    table = StorageConfig().uid_table
    storage = EmbeddedStorage(data_dir, exclusive=False)
    await storage.create_table(table, opentsdb_tables(StorageConfig())[table])

    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.uid.test_uid_processes",
            str(data_dir),
            table,
            str(seed),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for seed in range(PROCESSES)
    ]
    for child in children:
        assert child.stdout is not None
        assert await child.stdout.readline() == b"ready\n"
    for child in children:  # all have the store open and their batches built: race
        assert child.stdin is not None
        child.stdin.write(b"go\n")
    reports = []
    for child in children:
        out, _ = await child.communicate()
        assert child.returncode == 0
        reports.append(json.loads(out))

    forward: dict[str, bytes] = {}
    reverse: dict[bytes, str] = {}
    async for row in storage.scan(table, ScanSpec(start=b"", stop=b"", families=("id", "name"))):
        if row.key == MAXID_ROW:
            continue
        forward_cell = row.value("id", b"tagv")
        if forward_cell is not None:
            forward[row.key.decode()] = forward_cell
        reverse_cell = row.value("name", b"tagv")
        if reverse_cell is not None:
            reverse[row.key] = reverse_cell.decode()
    counter_row = await storage.get(table, MAXID_ROW, ("id",))
    assert counter_row is not None
    count = int.from_bytes(counter_row.value("id", b"tagv") or b"", "big")
    await storage.close()

    asked = {name for report in reports for name in report["uids"]}
    assert asked <= set(forward)
    for report in reports:
        for name, seen in report["uids"].items():
            assert seen == forward[name].hex(), f"{name}: {seen} here, {forward[name].hex()} stored"
    assert len(set(forward.values())) == len(forward), "a UID names two names"
    for name, stored in forward.items():
        assert reverse[stored] == name
    assigned = sum(report["assignments"] for report in reports)
    leaked = sum(report["lost_races"] for report in reports)
    assert assigned == len(forward)
    assert count == len(forward) + leaked


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_assign(sys.argv[1], sys.argv[2], int(sys.argv[3])))))
