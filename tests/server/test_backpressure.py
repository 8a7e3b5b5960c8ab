"""A store slower than ingest: the writer stays bounded and telnet stops reading."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, eventually, stored
from tests.uid.hooked_storage import HookedStorage
from tsd.storage.embedded import EmbeddedStorage
from tsd.write.batch_writer import WriterLimits


async def test_slow_storage_pauses_telnet_clients(make_tsd: MakeTsd, tmp_path: Path) -> None:
    inner = EmbeddedStorage(tmp_path / "slow")
    hooked = HookedStorage(inner)
    opened = asyncio.Event()

    async def hold(table: str, mutations: object) -> None:
        if table == "tsdb":
            await opened.wait()

    limits = WriterLimits(max_batch_cells=100, max_pending_cells=300, max_in_flight=1)
    daemon = await make_tsd(storage=hooked, writer_limits=limits)
    hooked.hooks["mutate"] = hold  # after start-up: table creation is not held
    client = await TelnetClient.connect(daemon.port)
    # Warm the series so every later put takes the fast path.
    await client.send(b"put bp.m 1356998400 0 h=a\n")
    await client.sync()
    lines = b"".join(b"put bp.m %d %d h=a\n" % (1356998401 + i, i) for i in range(20_000))
    sending = asyncio.ensure_future(client.send(lines))
    await eventually(daemon.writer.is_full)
    held = daemon.writer.pending_cells()
    assert held <= limits.max_pending_cells
    for _ in range(100):
        await asyncio.sleep(0)
    assert daemon.writer.pending_cells() == held  # reading is paused: nothing more comes in
    opened.set()
    await sending
    assert await client.sync() == []
    assert len(await stored(daemon)) == 20_001
    await client.close()
    await daemon.stop()
    await inner.close()
