"""Remove OpenTSDB's meta data (``tsdb uid metapurge``, OpenTSDB's MetaPurge).

Deletes the UIDMeta cells of the UID table (``metric_meta``, ``tagk_meta``, ``tagv_meta``
and ``ts_meta`` in its ``name`` family) and the TSMeta cells of the meta table
(``ts_meta``, ``ts_ctr``), as MetaPurge does. tsd's own series index cell in the meta
table is kept, so lookups still find the series.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass

from tsd.codec.const import (
    TSMETA_COUNTER_QUALIFIER,
    TSMETA_FAMILY,
    TSMETA_QUALIFIER,
    UID_META_QUALIFIERS,
    UID_NAME_FAMILY,
)
from tsd.config import StorageConfig
from tsd.storage.base import Delete, ScanSpec, Storage

#: what MetaPurge deletes, per table role: (family, qualifiers)
UID_META = (UID_NAME_FAMILY, frozenset({*UID_META_QUALIFIERS.values(), TSMETA_QUALIFIER}))
TS_META = (TSMETA_FAMILY, frozenset({TSMETA_QUALIFIER, TSMETA_COUNTER_QUALIFIER}))
#: cells deleted per storage call
BATCH = 1024


@dataclass(frozen=True, slots=True)
class PurgeReport:
    uid_columns: int
    ts_columns: int


async def _purge(storage: Storage, table: str, family: str, qualifiers: frozenset[bytes]) -> int:
    deletes: list[Delete] = []
    purged = 0
    spec = ScanSpec(families=(family,))
    async with aclosing(storage.scan(table, spec)) as rows:
        async for row in rows:
            for cell in row.cells:
                if cell.family == family and cell.qualifier in qualifiers:
                    deletes.append(Delete(row.key, family, cell.qualifier))
            if len(deletes) >= BATCH:
                await storage.delete(table, deletes)
                purged += len(deletes)
                deletes = []
    if deletes:
        await storage.delete(table, deletes)
        purged += len(deletes)
    return purged


async def purge_meta(storage: Storage, cfg: StorageConfig) -> PurgeReport:
    return PurgeReport(
        await _purge(storage, cfg.uid_table, *UID_META),
        await _purge(storage, cfg.meta_table, *TS_META),
    )
