"""OpenTSDB's tables from the configuration, and the configuration mapped onto storage
settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tsd.config import Config, StorageConfig
from tsd.errors import ConfigError
from tsd.storage.base import FamilySpec, Put, Storage
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.factory import open_storage
from tsd.storage.settings import EmbeddedSettings, HBaseSettings
from tsd.storage_setup import BACKENDS, ensure_tables, opentsdb_tables, storage_settings


def test_opentsdb_tables_use_the_configured_names() -> None:
    cfg = StorageConfig(data_table="d", uid_table="u", tree_table="tr", meta_table="m")
    assert opentsdb_tables(cfg) == {
        "u": [FamilySpec("id"), FamilySpec("name")],
        "d": [FamilySpec("t", max_versions=1)],
        "tr": [FamilySpec("t", max_versions=1)],
        "m": [FamilySpec("name")],
    }


def test_opentsdb_tables_default_names() -> None:
    assert sorted(opentsdb_tables(StorageConfig())) == [
        "tsdb",
        "tsdb-meta",
        "tsdb-tree",
        "tsdb-uid",
    ]


async def test_ensure_tables_creates_what_is_missing(
    storage: Storage, storage_config: StorageConfig
) -> None:
    created = await ensure_tables(storage, storage_config)
    assert sorted(created) == sorted(opentsdb_tables(storage_config))
    await storage.put(storage_config.uid_table, [Put(b"\x00", "id", b"metrics", b"\x00" * 8)])
    await storage.put(storage_config.uid_table, [Put(b"\x00", "name", b"metrics", b"x")])
    await storage.put(storage_config.meta_table, [Put(b"\x00", "name", b"ts_meta", b"{}")])
    await storage.put(storage_config.tree_table, [Put(b"\x00", "t", b"tree", b"{}")])
    assert await ensure_tables(storage, storage_config) == []


async def test_open_storage_opens_the_embedded_store_in_data_dir(tmp_path: Path) -> None:
    cfg = dataclasses.replace(Config(), storage=StorageConfig(data_dir=str(tmp_path / "d")))
    settings = storage_settings(cfg.storage)
    assert settings == EmbeddedSettings(tmp_path / "d")
    storage = open_storage(settings)
    try:
        assert isinstance(storage, EmbeddedStorage)
        assert storage.path == tmp_path / "d"
    finally:
        await storage.close()


def test_storage_settings_map_the_hbase_keys() -> None:
    cfg = StorageConfig(
        backend="hbase",
        thrift_host="h",
        thrift_port=1,
        thrift_transport="framed",
        thrift_protocol="compact",
        thrift_pool_size=2,
        thrift_timeout_ms=3,
        thrift_max_idle_ms=4,
        thrift_read_timeout_ms=5,
    )
    assert storage_settings(cfg) == HBaseSettings(
        "h", 1, "framed", "compact", 2, 3, 4, (("h", 1),), read_timeout_ms=5
    )


def test_hbase_settings_defaults_are_the_config_defaults() -> None:
    defaults = HBaseSettings()
    assert storage_settings(StorageConfig(backend="hbase")) == HBaseSettings(
        gateways=((defaults.host, defaults.port),)
    )


async def test_hbase_storage_is_built_from_plain_values() -> None:
    """No configuration object: the backend takes its settings (nothing connects yet)."""
    storage = open_storage(HBaseSettings(host="127.0.0.1", port=1, pool_size=1))
    try:
        assert type(storage).__name__ == "HBaseStorage"
    finally:
        await storage.close()


def test_storage_settings_know_both_backends() -> None:
    assert sorted(BACKENDS) == ["embedded", "hbase"]
    with pytest.raises(ConfigError):
        storage_settings(StorageConfig(backend="cassandra"))
