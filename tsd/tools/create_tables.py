"""``tsdb create-tables``: OpenTSDB's four tables, as ``src/create_table.sh`` makes them.

Names come from the configuration (``tsd.storage.hbase.data_table``,
``uid_table``, ``tree_table``, ``meta_table``); the families from
:mod:`tsd.schema` (tsdb: ``t``; tsdb-uid: ``id``, ``name``; tsdb-tree:
``t``; tsdb-meta: ``name``). Every family gets one version, a ROW bloom filter,
the block cache on and the configured compression (``tsd.storage.hbase.
compression``, NONE by default: the script's LZO is not in stock HBase); the
data table's family gets ``tsd.storage.hbase.data_ttl`` when set. Tables that
exist are left as they are, so running it twice is harmless.

create_table.sh also sets DATA_BLOCK_ENCODING => DIFF; HBase's Thrift1
column descriptor has no field for it, so tables created here use HBase's
default (none). See docs/hbase.md for the shell command that adds it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses

from tsd.config import Config, StorageConfig, load_config
from tsd.log import configure_logging
from tsd.schema import opentsdb_tables, storage_settings
from tsd.storage.base import FamilySpec, Storage
from tsd.storage.factory import open_storage


def table_specs(cfg: StorageConfig) -> dict[str, list[FamilySpec]]:
    """Table name -> families with the options create-tables applies."""
    specs = {}
    for table, families in opentsdb_tables(cfg).items():
        ttl = cfg.hbase_data_ttl_s if table == cfg.data_table and cfg.hbase_data_ttl_s else None
        specs[table] = [
            dataclasses.replace(
                family,
                max_versions=1,
                compression=cfg.hbase_compression,
                bloom_filter="ROW",
                block_cache=True,
                ttl_s=ttl,
            )
            for family in families
        ]
    return specs


async def create_tables(storage: Storage, cfg: StorageConfig) -> dict[str, bool]:
    """Table name -> True when created now, False when it already existed."""
    return {
        table: await storage.create_table(table, families)
        for table, families in table_specs(cfg).items()
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")


async def _run(cfg: Config) -> None:
    storage = open_storage(storage_settings(cfg.storage, exclusive=False))
    try:
        for table, created in (await create_tables(storage, cfg.storage)).items():
            print(f"{'created' if created else 'exists '} {table}")
    finally:
        await storage.close()


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    configure_logging(cfg.log.format, cfg.log.level)  # log lines to stderr; stdout is the report
    asyncio.run(_run(cfg))
    return 0
