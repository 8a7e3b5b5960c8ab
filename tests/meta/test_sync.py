"""``tsdb meta-sync``: series stored without meta rows (OpenTSDB without tracking) become
findable, in process on every backend and through the command line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.meta.conftest import NOW_S, MakeEnv, MetaEnv
from tests.tools.toolkit import tsdb
from tests.write.points import add
from tsd.config import Config, StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.meta.annotations import AnnotationUpdate
from tsd.meta.lookup import LookupQuery
from tsd.meta.service import MetaService
from tsd.meta.sync import sync_series_index
from tsd.stats import StatsRegistry
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.uid.service import UidService
from tsd.write.ingest import IngestService
from tsd.write.writer import Writer


async def write_untracked(env: MetaEnv, hosts: list[str], hours: int = 3) -> None:
    """Points through a writer without the tracker's hook: no meta rows, as OpenTSDB with
    meta tracking off leaves them."""
    writer = Writer(env.storage, env.config.storage, StatsRegistry())
    ingest = IngestService(writer, env.uids, env.config.storage)
    for host in hosts:
        for hour in range(hours):
            point = DataPoint("sys.cpu.user", NOW_S + 3600 * hour, 1, make_tags({"host": host}))
            await add(ingest, point)
    await writer.close()


async def hosts_found(meta: MetaService) -> list[str]:
    found = await meta.lookup.lookup(LookupQuery("sys.cpu.user", (("host", "*"),), 0))
    return sorted([(await meta.lookup.describe(t))[1]["host"] for t in found.tsuids])


@pytest.mark.parametrize(
    "core",
    [
        pytest.param({}, id="tracking_off"),
        pytest.param({"meta_enable_tsuid_tracking": True}, id="tracking_on"),
    ],
)
async def test_sync_indexes_stored_series_once(make_env: MakeEnv, core: dict[str, bool]) -> None:
    env = await make_env(**core)
    await write_untracked(env, ["web01", "web02"])
    # A global annotation row is no series.
    await env.meta.annotations.sync(AnnotationUpdate("", NOW_S, {"description": "g"}), False)
    assert await hosts_found(env.meta) == []
    report = await sync_series_index(env.storage, env.config.storage.data_table, env.meta)
    assert (report.rows, report.series) == (7, 2)
    assert await hosts_found(env.meta) == ["web01", "web02"]
    again = await sync_series_index(env.storage, env.config.storage.data_table, env.meta)
    assert again.series == 0


async def test_meta_sync_command_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = Config(
        storage=dataclasses.replace(StorageConfig(), data_dir=str(data_dir)),
        core=dataclasses.replace(Config().core, auto_create_metrics=True),
    )
    storage = EmbeddedStorage(data_dir)
    try:
        await ensure_tables(storage, config.storage)
        uids = UidService(storage, config)
        meta = MetaService(storage, uids, config)
        writer = Writer(storage, config.storage, StatsRegistry())
        env = MetaEnv(storage, config, uids, meta, IngestService(writer, uids, config.storage))
        await write_untracked(env, ["web01"])
        await env.writer.close()
    finally:
        await storage.close()

    result = await tsdb(tmp_path, "meta-sync", "--data-dir", str(data_dir))
    assert (result.code, result.out) == (0, "3 rows scanned, 1 series indexed\n"), result.err

    storage = EmbeddedStorage(data_dir)
    try:
        meta = MetaService(storage, UidService(storage, config), config)
        assert await hosts_found(meta) == ["web01"]
    finally:
        await storage.close()
