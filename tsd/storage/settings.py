"""What each storage backend needs to open: plain values, no configuration.

storage/ never reads tsd's configuration; the composition root (:func:`tsd.storage_setup.
storage_settings`, used by the daemon and the tools) maps ``tsd.storage.*`` onto these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["EmbeddedSettings", "HBaseSettings", "StorageSettings"]


@dataclass(frozen=True, slots=True)
class EmbeddedSettings:
    """The embedded engine: its directory, whether this process only reads, and whether it
    claims the store as its one daemon (``exclusive``) or shares it with one (a tool)."""

    data_dir: Path
    read_only: bool = False
    exclusive: bool = True


@dataclass(frozen=True, slots=True)
class HBaseSettings:
    """An HBase Thrift1 gateway and the client's pool (defaults: tsd.storage.hbase.*'s)."""

    host: str = "localhost"
    port: int = 9090
    #: "buffered" or "framed"
    transport: str = "buffered"
    #: "binary" or "compact"
    protocol: str = "binary"
    pool_size: int = 8
    #: per-call deadline and connect timeout; 0 = none
    timeout_ms: int = 8_000
    #: pooled connections idle longer than this are not reused
    max_idle_ms: int = 50_000
    #: every gateway, (host, port) each; empty: ``host`` and ``port`` alone
    gateways: tuple[tuple[str, int], ...] = ()
    #: the deadline of a read's calls (gets, a scan's open and reads); 0 = none
    read_timeout_ms: int = 5_000


StorageSettings = EmbeddedSettings | HBaseSettings
