"""The embedded store keeps every write that has returned: across close/reopen and kill -9."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from tsd.storage.base import Cell, FamilySpec, Put, Row, ScanSpec
from tsd.storage.embedded import EmbeddedStorage

CELLS_PER_BATCH = 200
ACKS_BEFORE_KILL = 60

# Four concurrent writers (so the writer thread group-commits), each printing an
# ack line for a batch only after storage.put has returned.
WRITER_CHILD = f"""
import asyncio, sys
from tsd.storage.base import FamilySpec, Put
from tsd.storage.embedded import EmbeddedStorage

async def main(path):
    storage = EmbeddedStorage(path)
    await storage.create_table("t", [FamilySpec("f")])
    async def writer(w):
        batch = 0
        while True:
            row = b"%d-%08d" % (w, batch)
            puts = [Put(row, "f", b"%04d" % i, row + b"/%d" % i) for i in range({CELLS_PER_BATCH})]
            await storage.put("t", puts)
            print(row.decode(), flush=True)
            batch += 1
    await asyncio.gather(*(writer(w) for w in range(4)))

asyncio.run(main(sys.argv[1]))
"""


def batch_cells(row: bytes) -> tuple[Cell, ...]:
    return tuple(Cell("f", b"%04d" % i, row + b"/%d" % i) for i in range(CELLS_PER_BATCH))


async def test_writes_survive_close_and_reopen(tmp_path: Path) -> None:
    storage = EmbeddedStorage(tmp_path)
    await storage.create_table("t", [FamilySpec("f"), FamilySpec("g", max_versions=3)])
    await storage.put("t", [Put(b"r", "g", b"q", b"v")])
    assert await storage.increment("t", b"c", "f", b"n", 7) == 7
    await storage.close()

    reopened = EmbeddedStorage(tmp_path)
    try:
        assert await reopened.list_tables() == ["t"]
        assert await reopened.create_table("t", [FamilySpec("f")]) is False
        assert await reopened.get("t", b"r") == Row(b"r", (Cell("g", b"q", b"v"),))
        assert await reopened.increment("t", b"c", "f", b"n") == 8
    finally:
        await reopened.close()


async def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER_CHILD, str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    acked: list[bytes] = []
    while len(acked) < ACKS_BEFORE_KILL:
        line = await child.stdout.readline()
        assert line, "the writer child exited early"
        acked.append(line.strip())
    child.send_signal(signal.SIGKILL)
    # Lines already in the pipe were printed after their put returned: acknowledged too.
    acked += (await child.stdout.read()).split()
    assert await child.wait() == -signal.SIGKILL

    storage = EmbeddedStorage(tmp_path)
    try:
        rows = {row.key: row for row in [r async for r in storage.scan("t", ScanSpec())]}
        for key in acked:
            assert key in rows, f"acknowledged batch {key!r} lost"
        for key, row in rows.items():
            assert row.cells == batch_cells(key), f"batch {key!r} partly written"
        await storage.put("t", [Put(b"after", "f", b"q", b"v")])  # the write lock recovered
        assert await storage.get("t", b"after") is not None
    finally:
        await storage.close()
