"""HBase's Thrift2 gateway, for what Thrift1 cannot do: create a table split into regions
at given keys (``createTable(desc, splitKeys)``) and list a table's regions
(``getAllRegionLocations``). Used by ``tsdb create-tables`` to pre-split a salted data
table, one region per salt bucket; data goes through Thrift1 as before.

The calls are declared in ``thrift2_admin.thrift`` beside this module (the part of the
gateway's interface tsd uses) and spoken with thriftpy2's asyncio client, binary protocol
over a buffered transport (the gateway's defaults).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import thriftpy2
from thriftpy2.contrib.aio.rpc import make_client
from thriftpy2.thrift import TException

from tsd.errors import StorageError, StorageUnavailable
from tsd.storage.base import FamilySpec

THRIFT2: Any = thriftpy2.load(
    str(Path(__file__).with_name("thrift2_admin.thrift")), module_name="tsd_thrift2_admin_thrift"
)

#: create_table.sh's DATA_BLOCK_ENCODING for every OpenTSDB table (Thrift1 cannot set it)
DATA_BLOCK_ENCODING = "DIFF"


@dataclass(frozen=True, slots=True)
class RegionLocation:
    start_key: bytes
    end_key: bytes
    host: str
    port: int


def family_descriptor(spec: FamilySpec) -> Any:
    return THRIFT2.TColumnFamilyDescriptor(
        name=spec.name.encode("ascii"),
        bloomnFilterType=getattr(THRIFT2.TBloomFilterType, spec.bloom_filter),
        compressionType=getattr(THRIFT2.TCompressionAlgorithm, spec.compression),
        dataBlockEncoding=getattr(THRIFT2.TDataBlockEncoding, DATA_BLOCK_ENCODING),
        maxVersions=spec.max_versions,
        timeToLive=spec.ttl_s,
        blockCacheEnabled=spec.block_cache,
    )


def parse_host_port(value: str, key: str) -> tuple[str, int]:
    """``host:port`` of a Thrift2 gateway (``[v6]:port``)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise StorageError(f"{key}: expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


class Thrift2Admin:
    """One connection to a Thrift2 gateway, for table creation and region listing."""

    def __init__(self, host: str, port: int, timeout_ms: int = 60_000) -> None:
        self._host = host
        self._port = port
        self._timeout_ms = timeout_ms
        self._client: Any = None

    async def __aenter__(self) -> Thrift2Admin:
        try:
            self._client = await make_client(
                THRIFT2.THBaseService,
                self._host,
                self._port,
                socket_timeout=self._timeout_ms,
                connect_timeout=self._timeout_ms,
            )
        except (OSError, TException) as exc:
            where = f"{self._host}:{self._port}"
            raise StorageUnavailable(f"HBase Thrift2 gateway {where}: {exc!r}") from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()

    async def create_table(
        self, table: str, families: Sequence[FamilySpec], split_keys: Sequence[bytes]
    ) -> bool:
        """Create ``table`` with one region per range between ``split_keys``; False when it
        already exists (left as it is)."""
        name = THRIFT2.TTableName(qualifier=table.encode("ascii"))
        try:
            if await self._client.tableExists(name):
                return False
            desc = THRIFT2.TTableDescriptor(
                tableName=name, columns=[family_descriptor(spec) for spec in families]
            )
            await self._client.createTable(desc, list(split_keys) or None)
        except THRIFT2.TIOError as exc:
            raise StorageError(f"HBase Thrift2 createTable {table!r}: {exc.message}") from exc
        except (OSError, TException) as exc:
            raise StorageUnavailable(f"HBase Thrift2 createTable {table!r}: {exc!r}") from exc
        return True

    async def regions(self, table: str) -> list[RegionLocation]:
        """The table's regions in key order, with the region server holding each."""
        try:
            found = await self._client.getAllRegionLocations(table.encode("ascii"))
        except THRIFT2.TIOError as exc:
            message = f"HBase Thrift2 getAllRegionLocations {table!r}: {exc.message}"
            raise StorageError(message) from exc
        except (OSError, TException) as exc:
            raise StorageUnavailable(f"HBase Thrift2 getAllRegionLocations: {exc!r}") from exc
        return sorted(
            (
                RegionLocation(
                    loc.regionInfo.startKey or b"",
                    loc.regionInfo.endKey or b"",
                    loc.serverName.hostName,
                    loc.serverName.port or 0,
                )
                for loc in found
            ),
            key=lambda region: region.start_key,
        )
