"""tsd's configuration mapped onto storage: which backend with which settings, and
OpenTSDB's four tables with their column families (``src/create_table.sh``).

storage/ knows neither the configuration nor OpenTSDB's layout; the daemon and the tools
(the composition roots) open storage through :func:`storage_settings` and create its
tables through :func:`ensure_tables`.

Table names come from the configuration (``tsd.storage.hbase.*_table``); the
families are fixed (codec/const.py): ``tsdb`` has ``t`` (one version), ``tsdb-uid``
has ``id`` and ``name``, ``tsdb-tree`` has ``t`` (one version), ``tsdb-meta`` has
``name``. The options a backend cannot apply (compression, bloom filters) are
recorded and ignored by the embedded engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tsd.codec.const import FAMILY, TREE_FAMILY, TSMETA_FAMILY, UID_ID_FAMILY, UID_NAME_FAMILY
from tsd.config import Config, RollupsConfig, StorageConfig
from tsd.errors import ConfigError
from tsd.protocol.rollup_config import (
    RollupConfig,
    RollupInterval,
    default_rollup_config,
    parse_rollup_config,
    rollup_config_source,
)
from tsd.storage.base import FamilySpec, Storage
from tsd.storage.settings import EmbeddedSettings, HBaseSettings, StorageSettings

__all__ = [
    "BACKENDS",
    "RollupSetup",
    "ensure_tables",
    "hbase_settings",
    "opentsdb_tables",
    "rollup_families",
    "rollup_setup",
    "storage_settings",
]

#: tsd.storage.backend values
BACKENDS = ("embedded", "hbase")


def storage_settings(
    cfg: StorageConfig, *, read_only: bool = False, exclusive: bool = True
) -> StorageSettings:
    """The settings of the backend ``tsd.storage.backend`` names (``read_only`` and
    ``exclusive`` apply to the embedded engine, which the tools open beside a running
    daemon: shared, not exclusive)."""
    if cfg.backend == "embedded":
        return EmbeddedSettings(Path(cfg.data_dir), read_only=read_only, exclusive=exclusive)
    if cfg.backend == "hbase":
        return hbase_settings(cfg)
    raise ConfigError("tsd.storage.backend", f"unknown backend {cfg.backend!r}")


def hbase_settings(cfg: StorageConfig) -> HBaseSettings:
    """``tsd.storage.hbase.thrift.*`` as the HBase backend's settings."""
    gateways = thrift_gateways(cfg.thrift_host, cfg.thrift_port)
    return HBaseSettings(
        host=gateways[0][0],
        port=gateways[0][1],
        gateways=gateways,
        transport=cfg.thrift_transport,
        protocol=cfg.thrift_protocol,
        pool_size=cfg.thrift_pool_size,
        timeout_ms=cfg.thrift_timeout_ms,
        read_timeout_ms=cfg.thrift_read_timeout_ms,
        max_idle_ms=cfg.thrift_max_idle_ms,
    )


def thrift_gateways(hosts: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """``tsd.storage.hbase.thrift.host``: one gateway or several, ``host[:port],...``
    (``[v6 address]:port``), the port ``tsd.storage.hbase.thrift.port`` where a gateway
    names none."""
    key = "tsd.storage.hbase.thrift.host"
    gateways = []
    for item in (part.strip() for part in hosts.split(",")):
        if not item:
            raise ConfigError(key, f"an empty gateway in {hosts!r}")
        host, port = item, default_port
        if item.startswith("["):  # [::1]:9090
            host, _, rest = item[1:].partition("]")
            if rest:
                port = _gateway_port(key, item, rest.removeprefix(":"))
        elif item.count(":") == 1:
            host, _, text = item.partition(":")
            port = _gateway_port(key, item, text)
        if not host:
            raise ConfigError(key, f"no host in {item!r}")
        gateways.append((host, port))
    return tuple(gateways)


def _gateway_port(key: str, item: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(key, f"bad port in {item!r}: a number from 1 to 65535")
    return int(text)


def opentsdb_tables(cfg: StorageConfig) -> dict[str, list[FamilySpec]]:
    """Configured table name -> its families, in create_table.sh's order."""
    return {
        cfg.uid_table: [FamilySpec(UID_ID_FAMILY), FamilySpec(UID_NAME_FAMILY)],
        cfg.data_table: [FamilySpec(FAMILY, max_versions=1)],
        cfg.tree_table: [FamilySpec(TREE_FAMILY, max_versions=1)],
        cfg.meta_table: [FamilySpec(TSMETA_FAMILY)],
    }


def rollup_families() -> list[FamilySpec]:
    """The families of a rollup or pre-aggregate table: the data table's, with its rows
    packed whole in the embedded store (many 3-byte-qualifier cells, read together)."""
    return [FamilySpec(FAMILY, max_versions=1, packed_rows=True)]


async def ensure_tables(
    storage: Storage, cfg: StorageConfig, rollup_tables: Sequence[str] = ()
) -> list[str]:
    """Create the tables that are missing; the names of those created now.

    ``rollup_tables``: the rollup and pre-aggregate tables ``tsd.rollups.config`` names,
    each with the data table's family."""
    created = []
    tables = opentsdb_tables(cfg)
    for name in rollup_tables:
        tables.setdefault(name, rollup_families())
    for table, families in tables.items():
        if await storage.create_table(table, families):
            created.append(table)
    return created


def load_rollup_config(cfg: RollupsConfig) -> RollupConfig | None:
    """The parsed ``tsd.rollups.config`` when ``tsd.rollups.enable`` (TSDB's constructor:
    the value is the JSON, or a file when it ends with ``.json``)."""
    if not cfg.enable:
        return None
    text, path = rollup_config_source(cfg.config)
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("tsd.rollups.config", f"Failed to open conf file: {path}") from exc
    return parse_rollup_config(text)


@dataclass(frozen=True, slots=True)
class RollupSetup:
    """The rollup configurations in force."""

    #: ``tsd.rollups.config`` when ``tsd.rollups.enable`` (what /api/rollup stores with)
    stored: RollupConfig | None
    #: what queries read and tsd computes: ``stored``, else the default configuration
    #: when tsd computes rollups (docs/rollups.md), else None
    effective: RollupConfig | None
    #: tsd computes rollups (``tsd.rollups.compute``)
    computes: bool

    def tables(self) -> list[str]:
        return self.effective.tables() if self.effective is not None else []

    def intervals(self) -> tuple[RollupInterval, ...]:
        """The intervals in force (none without a configuration)."""
        return self.effective.intervals if self.effective is not None else ()


def rollup_setup(config: Config) -> RollupSetup:
    """The rollup configurations of ``config`` (raises ConfigError)."""
    stored = load_rollup_config(config.rollups)
    computes = config.rollups.computes(config.storage.backend)
    effective = stored
    if effective is None and computes:
        effective = default_rollup_config(config.storage.data_table)
    return RollupSetup(stored, effective, computes)
