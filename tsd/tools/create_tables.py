"""``tsdb create-tables``: OpenTSDB's four tables, as ``src/create_table.sh`` makes them.

Names come from the configuration (``tsd.storage.hbase.data_table``,
``uid_table``, ``tree_table``, ``meta_table``); the families from
:mod:`tsd.storage_setup` (tsdb: ``t``; tsdb-uid: ``id``, ``name``; tsdb-tree:
``t``; tsdb-meta: ``name``). Every family gets one version, a ROW bloom filter,
the block cache on and the configured compression (``tsd.storage.hbase.
compression``, NONE by default: the script's LZO is not in stock HBase); the
data table's family gets ``tsd.storage.hbase.data_ttl`` when set. Tables that
exist are left as they are, so running it twice is harmless.

create_table.sh also sets DATA_BLOCK_ENCODING => DIFF; HBase's Thrift1
column descriptor has no field for it, so tables created through Thrift1 use HBase's
default (none). See docs/hbase.md for the shell command that adds it.

A salted data table (``tsd.storage.salt.width`` > 0) is a hotspot as one region: with
``tsd.storage.hbase.thrift2.host`` (a Thrift2 gateway; Thrift1's createTable has no split
keys) it is created split into one region per salt bucket, with DIFF encoding; without
it, the command prints the HBase shell ``create`` that does so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses

from tsd.codec.rowkey import KeyLayout, salt_bytes
from tsd.config import Config, StorageConfig, load_config
from tsd.log import configure_logging
from tsd.storage.base import FamilySpec, Storage
from tsd.storage.factory import open_storage
from tsd.storage.hbase.thrift2 import Thrift2Admin, parse_host_port
from tsd.storage_setup import opentsdb_tables, storage_settings


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


def salt_split_keys(cfg: StorageConfig) -> list[bytes]:
    """The keys that split a salted data table into one region per salt bucket (the
    bucket's salt bytes, buckets 1 and up); none without salting."""
    if cfg.backend != "hbase" or not cfg.salt_width or cfg.salt_buckets < 2:
        return []
    layout = KeyLayout.from_storage_config(cfg)
    return [salt_bytes(layout, bucket) for bucket in range(1, cfg.salt_buckets)]


def shell_command(table: str, families: list[FamilySpec], split_keys: list[bytes]) -> str:
    """The HBase shell's ``create`` of ``table`` split at ``split_keys`` (what create-tables
    does through Thrift2), create_table.sh's options on each family."""
    specs = []
    for family in families:
        options = [
            f"NAME => '{family.name}'",
            f"VERSIONS => {family.max_versions}",
            f"COMPRESSION => '{family.compression}'",
            f"BLOOMFILTER => '{family.bloom_filter}'",
            "DATA_BLOCK_ENCODING => 'DIFF'",
        ]
        if family.ttl_s:
            options.append(f"TTL => {family.ttl_s}")
        specs.append("{" + ", ".join(options) + "}")
    splits = ", ".join('"' + "".join(f"\\x{b:02x}" for b in key) + '"' for key in split_keys)
    return f"create '{table}', {', '.join(specs)}, SPLITS => [{splits}]"


async def create_tables(
    storage: Storage, cfg: StorageConfig, admin: Thrift2Admin | None = None
) -> dict[str, bool]:
    """Table name -> True when created now, False when it already existed. With ``admin``
    (a Thrift2 gateway), a salted data table is created pre-split, one region per bucket."""
    created = {}
    splits = salt_split_keys(cfg)
    for table, families in table_specs(cfg).items():
        if table == cfg.data_table and splits and admin is not None:
            created[table] = await admin.create_table(table, families, splits)
        else:
            created[table] = await storage.create_table(table, families)
    return created


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="opentsdb.conf to read")


async def _run(cfg: Config) -> None:
    storage = open_storage(storage_settings(cfg.storage, exclusive=False))
    key = "tsd.storage.hbase.thrift2.host"
    try:
        async with contextlib.AsyncExitStack() as stack:
            admin = None
            if cfg.storage.thrift2_host and salt_split_keys(cfg.storage):
                host, port = parse_host_port(cfg.storage.thrift2_host, key)
                admin = await stack.enter_async_context(Thrift2Admin(host, port))
            for table, created in (await create_tables(storage, cfg.storage, admin)).items():
                print(f"{'created' if created else 'exists '} {table}")
            splits = salt_split_keys(cfg.storage)
            if splits and admin is None:
                table = cfg.storage.data_table
                print(
                    f"# {table} is one region: to split it into one region per salt bucket "
                    f"({len(splits) + 1}), set {key} to a Thrift2 gateway, or create it in the "
                    "HBase shell before running create-tables:"
                )
                print(shell_command(table, table_specs(cfg.storage)[table], splits))
    finally:
        await storage.close()


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    configure_logging(cfg.log.format, cfg.log.level)  # log lines to stderr; stdout is the report
    asyncio.run(_run(cfg))
    return 0
