"""OpenTSDB's four tables and their column families (``src/create_table.sh``).

Table names come from the configuration (``tsd.storage.hbase.*_table``); the
families are fixed: ``tsdb`` has ``t`` (one version), ``tsdb-uid`` has ``id``
and ``name``, ``tsdb-tree`` has ``t`` (one version), ``tsdb-meta`` has
``name``. The options a backend cannot apply (compression, bloom filters) are
recorded and ignored by the embedded engine.
"""

from __future__ import annotations

from tsd.codec.const import FAMILY, TREE_FAMILY, TSMETA_FAMILY, UID_ID_FAMILY, UID_NAME_FAMILY
from tsd.config import StorageConfig
from tsd.storage.base import FamilySpec, Storage


def opentsdb_tables(cfg: StorageConfig) -> dict[str, list[FamilySpec]]:
    """Configured table name -> its families, in create_table.sh's order."""
    return {
        cfg.uid_table: [FamilySpec(UID_ID_FAMILY), FamilySpec(UID_NAME_FAMILY)],
        cfg.data_table: [FamilySpec(FAMILY, max_versions=1)],
        cfg.tree_table: [FamilySpec(TREE_FAMILY, max_versions=1)],
        cfg.meta_table: [FamilySpec(TSMETA_FAMILY)],
    }


async def ensure_tables(storage: Storage, cfg: StorageConfig) -> list[str]:
    """Create the tables that are missing; the names of those created now."""
    created = []
    for table, families in opentsdb_tables(cfg).items():
        if await storage.create_table(table, families):
            created.append(table)
    return created
