"""Configuration: OpenTSDB's ``opentsdb.conf`` keys, parsed into frozen sections.

Defaults are OpenTSDB 2.4.1's (``utils/Config.setDefaults``) wherever OpenTSDB
has the concept; keys OpenTSDB lacks are new (``tsd.storage.backend``,
``tsd.storage.data_dir``, ...). ``config/opentsdb.conf`` lists every key tsd
reads. The file format is Java properties reduced to what opentsdb.conf uses:
``key = value`` (or ``key: value``) lines, ``#``/``!`` comments.

Every key is declared once, in ``KEYS``: its section, attribute and parser.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsd.errors import ConfigError

#: OpenTSDB's search order when no --config is given (TSDMain / Config.loadConfig).
DEFAULT_CONFIG_PATHS = (
    "./opentsdb.conf",
    "/etc/opentsdb.conf",
    "/etc/opentsdb/opentsdb.conf",
    "/opt/opentsdb/opentsdb.conf",
)


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    port: int = 4242  # tsd departs: OpenTSDB requires --port; 4242 is its convention
    bind: str = "0.0.0.0"
    socket_timeout_s: int = 300  # tsd departs: OpenTSDB's default is 0 (never)
    connections_limit: int = 10_000  # tsd departs: OpenTSDB's default is 0 (unlimited)
    header_timeout_s: int = 30
    #: PEM files; TLS is served on the same port when a certificate is set (new)
    tls_cert: str = ""
    tls_key: str = ""
    tls_required: bool = False
    #: processes sharing telnet ingest: 0 = one per core, 1 = this process alone
    worker_threads: int = 1


@dataclass(frozen=True, slots=True)
class HttpConfig:
    max_body_bytes: int = 64 * 1024 * 1024
    cors_domains: str = ""
    cors_headers: str = (
        "Authorization, Content-Type, Accept, Origin, User-Agent, DNT, Cache-Control, "
        "X-Mx-ReqToken, Keep-Alive, X-Requested-With, If-Modified-Since"
    )
    show_stack_trace: bool = False  # tsd departs: OpenTSDB's default is true
    allow_delete: bool = False
    #: names (optional ``:port``, ``*`` for any) browsers may use for this TSD besides
    #: loopback, the machine's names and IP literals (the DNS-rebinding check, issue 25)
    allowed_hosts: str = ""


@dataclass(frozen=True, slots=True)
class TelnetConfig:
    max_line_bytes: int = 1024 * 1024  # OpenTSDB: 1024, and drops the connection
    return_errors: bool = True


@dataclass(frozen=True, slots=True)
class CoreConfig:
    mode: str = "rw"
    no_diediedie: bool = False
    diediedie_loopback_only: bool = True
    enable_api: bool = True
    enable_ui: bool = True
    auto_create_metrics: bool = False
    auto_create_tagks: bool = True
    auto_create_tagvs: bool = True
    tag_allow_specialchars: str = ""
    timezone: str = ""
    stats_with_port: bool = False
    stats_canonical: bool = False
    meta_enable_tsuid_tracking: bool = False
    meta_enable_realtime_ts: bool = False
    meta_enable_realtime_uid: bool = False
    meta_enable_tsuid_incrementing: bool = False
    #: histogram codecs: a JSON map of codec class -> id, or a file ending in .json
    histograms_config: str = ""
    #: series whose row-key templates the ingest service keeps (tsd.core.series_cache.size),
    #: each map apart, and meta tracking remembers: past it the least recently used go
    #: (tsd/recent.py), and their next point is parsed and resolved again (UID cache)
    series_cache_size: int = 5_000_000


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """OpenTSDB's authentication switch and plugin name; tsd's built-in credentials file."""

    enable: bool = False
    plugin: str = ""
    users_file: str = ""


@dataclass(frozen=True, slots=True)
class UidConfig:
    cache_max_entries: int = 5_000_000  # per kind and direction (tsd.uid.lru.*.size)
    random_metrics: bool = False
    #: the largest block of UIDs one increment of the counter row reserves (tsd's own key)
    block_size: int = 4096


@dataclass(frozen=True, slots=True)
class StorageConfig:
    backend: str = "embedded"
    data_dir: str = "./data"
    data_table: str = "tsdb"
    uid_table: str = "tsdb-uid"
    tree_table: str = "tsdb-tree"
    meta_table: str = "tsdb-meta"
    metric_width: int = 3
    tagk_width: int = 3
    tagv_width: int = 3
    salt_width: int = 0
    salt_buckets: int = 20
    max_tags: int = 8
    enable_compaction: bool = True
    compaction_flush_interval_s: int = 10
    enable_appends: bool = False
    repair_appends: bool = False
    fix_duplicates: bool = False
    flush_interval_ms: int = 1000  # tsd departs: 2.4.1 defines the key but never reads it
    # The write-ahead log (tsd's own, docs/write-path.md): on by default, in <data_dir>/wal.
    wal_enable: bool = True
    wal_sync_interval_ms: int = 1000  # a point acked without sync is on disk within this
    wal_segment_bytes: int = 64 * 1024 * 1024
    # The in-memory head of the embedded engine (docs/write-path.md): open row-hours.
    head_max_bytes: int = 256 * 1024 * 1024
    head_grace_s: int = 60  # a row-hour is closed this long after its hour and its last point
    # A tool beside a running daemon waits this long for it to write out its head.
    head_flush_timeout_s: int = 300
    # On HBase, the log keeps what HBase cannot take (an outage) up to this many bytes,
    # then points are refused (docs/write-path.md). 1 GiB: about 1.5 hours at 20,000
    # points/s (about 10 bytes a point in the log), on a disk of any size a TSD host has.
    wal_max_bytes: int = 1024 * 1024 * 1024
    # Embedded store: seconds of data kept (whole hours older are dropped); 0 = forever.
    embedded_retention_s: int = 0
    thrift_host: str = "localhost"
    thrift_port: int = 9090
    thrift_transport: str = "buffered"
    thrift_protocol: str = "binary"
    thrift_pool_size: int = 8
    # Per Thrift call (docs/hbase.md "The call timeouts"): a timed-out put goes to the spool
    # (logged, repeated later: a put is idempotent), so writes pause at most this long.
    # Table administration waits at least 60 s (ADMIN_TIMEOUT_S).
    thrift_timeout_ms: int = 8_000
    # Per call of a read (gets, a scan's open and reads): a query answers (an error) within
    # 10 s while a region has no server, the rest of the query included.
    thrift_read_timeout_ms: int = 5_000
    thrift_max_idle_ms: int = 50_000  # reuse pooled connections idle less (server drops at 60 s)
    # create-tables: a Thrift2 gateway (host:port) to pre-split the salted data table with
    thrift2_host: str = ""
    hbase_compression: str = "NONE"  # create-tables: create_table.sh's LZO is not in stock HBase
    hbase_data_ttl_s: int = 0  # create-tables: TTL of the data table's family; 0 = forever
    create_tables: bool = True


@dataclass(frozen=True, slots=True)
class QueryConfig:
    timeout_ms: int = 60_000  # tsd departs: OpenTSDB 2.4.1's default is 0 (and never read)
    skip_unresolved_tagvs: bool = False
    filter_expansion_limit: int = 4096
    regexp_budget_ms: int = 5_000
    limits_data_points_default: int = 0
    limits_bytes_default: int = 0
    limits_buckets: int = 20_000_000
    limits_output_points: int = 20_000_000
    limits_memory_bytes: int = 2 << 30
    memory_budget_bytes: int = 4 << 30
    compute_slots: int = 0  # 0: one less than the CPUs, at least one
    keep_freed_bytes: int = 1 << 30  # glibc: freed query memory kept for reuse (tsd/malloc.py)


@dataclass(frozen=True, slots=True)
class RollupsConfig:
    """OpenTSDB 2.4's stored rollups and pre-aggregates (``tsd.rollups.*``)."""

    enable: bool = False
    #: the rollup JSON itself, or the path of a file whose name ends in ``.json``
    config: str = ""
    agg_tag_key: str = "_aggregate"
    raw_agg_tag_value: str = "RAW"
    tag_raw: bool = False
    block_derived: bool = True
    #: tsd's own rollups (no OpenTSDB setting; docs/rollups.md): ``auto`` computes them on
    #: the embedded store and not on HBase (where an outside job may own the tables)
    compute: str = "auto"
    #: how long after its hour (and its last point) a row-hour's rollups are computed on
    #: HBase (the embedded store computes them as the head writes a row out)
    compute_grace_s: int = 120

    def computes(self, backend: str) -> bool:
        """Whether tsd computes rollups on ``backend``."""
        return self.compute == "true" or (self.compute == "auto" and backend == "embedded")


@dataclass(frozen=True, slots=True)
class LogConfig:
    format: str = "auto"  # json | console | auto (console on a TTY)
    level: str = "info"


@dataclass(frozen=True, slots=True)
class Config:
    network: NetworkConfig = field(default_factory=NetworkConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    telnet: TelnetConfig = field(default_factory=TelnetConfig)
    core: CoreConfig = field(default_factory=CoreConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    uid: UidConfig = field(default_factory=UidConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    rollups: RollupsConfig = field(default_factory=RollupsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    #: every key/value read (file and overrides), for /api/config
    raw: Mapping[str, str] = field(default_factory=dict)


def _bool(text: str) -> bool:
    # OpenTSDB's Config.getBoolean: "1", "true", "yes" (case-insensitive) are true.
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _int(text: str) -> int:
    return int(text.strip())


def _str(text: str) -> str:
    return text.strip()


_RETENTION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _retention(text: str) -> int:
    """``30d``, ``12h``, ``2w``, ``1y`` or plain seconds; empty or 0: keep forever. Data is
    dropped by whole hours, so anything from 0 to an hour is refused."""
    value = text.strip().lower()
    if value in ("", "0"):
        return 0
    unit = _RETENTION_UNITS.get(value[-1])
    digits = value[:-1] if unit is not None else value
    if not digits.isdigit():
        raise ValueError(f"not a duration (like 30d, 12h, 2w): {text!r}")
    seconds = int(digits) * (unit or 1)
    if seconds < 3600:
        raise ValueError(f"must be at least an hour (1h) or 0 for forever, not {text!r}")
    return seconds


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {text!r}")
        return value

    return parse


def _range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, not {value}")
        return value

    return parse


def _builtin_plugin(text: str) -> str:
    # OpenTSDB names a Java class here; tsd has one implementation, its credentials file.
    value = text.strip()
    if value not in ("", "builtin"):
        raise ValueError(
            f"tsd has only its built-in authentication (empty or builtin), not {text!r}"
        )
    return value


#: key -> (section, attribute, parser)
KEYS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "tsd.network.port": ("network", "port", _range(0, 65535)),
    "tsd.network.bind": ("network", "bind", _str),
    "tsd.core.socket.timeout": ("network", "socket_timeout_s", _int),
    "tsd.core.connections.limit": ("network", "connections_limit", _int),
    "tsd.network.header_timeout": ("network", "header_timeout_s", _range(0, 86_400)),
    "tsd.network.worker_threads": ("network", "worker_threads", _range(0, 1024)),
    "tsd.network.tls.cert": ("network", "tls_cert", _str),
    "tsd.network.tls.key": ("network", "tls_key", _str),
    "tsd.network.tls.required": ("network", "tls_required", _bool),
    "tsd.core.authentication.enable": ("auth", "enable", _bool),
    "tsd.core.authentication.plugin": ("auth", "plugin", _builtin_plugin),
    "tsd.core.authentication.users_file": ("auth", "users_file", _str),
    "tsd.http.request.max_body": ("http", "max_body_bytes", _int),
    "tsd.http.request.cors_domains": ("http", "cors_domains", _str),
    "tsd.http.request.cors_headers": ("http", "cors_headers", _str),
    "tsd.http.show_stack_trace": ("http", "show_stack_trace", _bool),
    "tsd.http.query.allow_delete": ("http", "allow_delete", _bool),
    "tsd.http.allowed_hosts": ("http", "allowed_hosts", _str),
    "tsd.rpc.telnet.max_line": ("telnet", "max_line_bytes", _range(16, 1 << 30)),
    "tsd.rpc.telnet.return_errors": ("telnet", "return_errors", _bool),
    "tsd.mode": ("core", "mode", _choice("rw", "ro", "wo")),
    "tsd.no_diediedie": ("core", "no_diediedie", _bool),
    "tsd.diediedie.loopback_only": ("core", "diediedie_loopback_only", _bool),
    "tsd.core.enable_api": ("core", "enable_api", _bool),
    "tsd.core.enable_ui": ("core", "enable_ui", _bool),
    "tsd.core.auto_create_metrics": ("core", "auto_create_metrics", _bool),
    "tsd.core.auto_create_tagks": ("core", "auto_create_tagks", _bool),
    "tsd.core.auto_create_tagvs": ("core", "auto_create_tagvs", _bool),
    "tsd.core.tag.allow_specialchars": ("core", "tag_allow_specialchars", _str),
    "tsd.core.timezone": ("core", "timezone", _str),
    "tsd.core.stats_with_port": ("core", "stats_with_port", _bool),
    "tsd.stats.canonical": ("core", "stats_canonical", _bool),
    "tsd.core.meta.enable_tsuid_tracking": ("core", "meta_enable_tsuid_tracking", _bool),
    "tsd.core.meta.enable_realtime_ts": ("core", "meta_enable_realtime_ts", _bool),
    "tsd.core.meta.enable_realtime_uid": ("core", "meta_enable_realtime_uid", _bool),
    "tsd.core.meta.enable_tsuid_incrementing": ("core", "meta_enable_tsuid_incrementing", _bool),
    "tsd.core.histograms.config": ("core", "histograms_config", _str),
    "tsd.core.series_cache.size": ("core", "series_cache_size", _range(1, 1 << 40)),
    "tsd.uid.lru.name.size": ("uid", "cache_max_entries", _int),
    "tsd.core.uid.random_metrics": ("uid", "random_metrics", _bool),
    "tsd.core.uid.block_size": ("uid", "block_size", _range(1, 4096)),
    "tsd.storage.backend": ("storage", "backend", _choice("embedded", "hbase")),
    "tsd.storage.data_dir": ("storage", "data_dir", _str),
    "tsd.storage.hbase.data_table": ("storage", "data_table", _str),
    "tsd.storage.hbase.uid_table": ("storage", "uid_table", _str),
    "tsd.storage.hbase.tree_table": ("storage", "tree_table", _str),
    "tsd.storage.hbase.meta_table": ("storage", "meta_table", _str),
    "tsd.storage.uid.width.metric": ("storage", "metric_width", _range(1, 8)),
    "tsd.storage.uid.width.tagk": ("storage", "tagk_width", _range(1, 8)),
    "tsd.storage.uid.width.tagv": ("storage", "tagv_width", _range(1, 8)),
    "tsd.storage.salt.width": ("storage", "salt_width", _range(0, 8)),
    "tsd.storage.salt.buckets": ("storage", "salt_buckets", _range(1, 1 << 30)),
    "tsd.storage.max_tags": ("storage", "max_tags", _range(1, 255)),
    "tsd.storage.enable_compaction": ("storage", "enable_compaction", _bool),
    "tsd.storage.compaction.flush_interval": ("storage", "compaction_flush_interval_s", _int),
    "tsd.storage.enable_appends": ("storage", "enable_appends", _bool),
    "tsd.storage.repair_appends": ("storage", "repair_appends", _bool),
    "tsd.storage.fix_duplicates": ("storage", "fix_duplicates", _bool),
    "tsd.storage.flush_interval": ("storage", "flush_interval_ms", _range(1, 3_600_000)),
    "tsd.storage.wal.enable": ("storage", "wal_enable", _bool),
    "tsd.storage.wal.sync_interval": ("storage", "wal_sync_interval_ms", _range(1, 3_600_000)),
    "tsd.storage.wal.segment_size": ("storage", "wal_segment_bytes", _range(4096, 1 << 40)),
    "tsd.storage.head.max_bytes": ("storage", "head_max_bytes", _range(1 << 20, 1 << 40)),
    "tsd.storage.head.grace": ("storage", "head_grace_s", _range(0, 86_400)),
    "tsd.storage.head.flush_timeout": ("storage", "head_flush_timeout_s", _range(1, 86_400)),
    "tsd.storage.wal.max_bytes": ("storage", "wal_max_bytes", _range(1 << 20, 1 << 50)),
    "tsd.storage.hbase.thrift.host": ("storage", "thrift_host", _str),
    "tsd.storage.hbase.thrift.port": ("storage", "thrift_port", _range(1, 65535)),
    "tsd.storage.hbase.thrift2.host": ("storage", "thrift2_host", _str),
    "tsd.storage.hbase.thrift.transport": (
        "storage",
        "thrift_transport",
        _choice("buffered", "framed"),
    ),
    "tsd.storage.hbase.thrift.protocol": (
        "storage",
        "thrift_protocol",
        _choice("binary", "compact"),
    ),
    "tsd.storage.hbase.thrift.pool_size": ("storage", "thrift_pool_size", _range(1, 1024)),
    "tsd.storage.hbase.thrift.timeout": ("storage", "thrift_timeout_ms", _int),
    "tsd.storage.hbase.thrift.read_timeout": ("storage", "thrift_read_timeout_ms", _int),
    "tsd.storage.hbase.thrift.max_idle": ("storage", "thrift_max_idle_ms", _range(0, 1 << 30)),
    "tsd.storage.hbase.compression": (
        "storage",
        "hbase_compression",
        lambda text: _choice("none", "gz", "snappy", "lz4", "lzo", "zstd", "bzip2")(text).upper(),
    ),
    "tsd.storage.hbase.data_ttl": ("storage", "hbase_data_ttl_s", _range(0, 2**31 - 1)),
    "tsd.storage.create_tables": ("storage", "create_tables", _bool),
    "tsd.storage.embedded.retention": ("storage", "embedded_retention_s", _retention),
    "tsd.query.timeout": ("query", "timeout_ms", _int),
    "tsd.query.skip_unresolved_tagvs": ("query", "skip_unresolved_tagvs", _bool),
    "tsd.query.filter.expansion_limit": ("query", "filter_expansion_limit", _int),
    "tsd.query.limits.data_points.default": ("query", "limits_data_points_default", _int),
    "tsd.query.limits.bytes.default": ("query", "limits_bytes_default", _int),
    "tsd.query.filter.regexp_budget": ("query", "regexp_budget_ms", _range(0, 1 << 31)),
    "tsd.query.limits.buckets": ("query", "limits_buckets", _range(0, 1 << 62)),
    "tsd.query.limits.output_points": ("query", "limits_output_points", _range(0, 1 << 62)),
    "tsd.query.limits.memory": ("query", "limits_memory_bytes", _range(0, 1 << 62)),
    "tsd.query.memory_budget": ("query", "memory_budget_bytes", _range(0, 1 << 62)),
    "tsd.query.compute_slots": ("query", "compute_slots", _range(0, 1024)),
    "tsd.query.keep_freed_bytes": ("query", "keep_freed_bytes", _range(0, 2**31 - 1)),
    "tsd.rollups.enable": ("rollups", "enable", _bool),
    "tsd.rollups.config": ("rollups", "config", _str),
    "tsd.rollups.agg_tag_key": ("rollups", "agg_tag_key", _str),
    "tsd.rollups.raw_agg_tag_value": ("rollups", "raw_agg_tag_value", _str),
    "tsd.rollups.tag_raw": ("rollups", "tag_raw", _bool),
    "tsd.rollups.block_derived": ("rollups", "block_derived", _bool),
    "tsd.rollups.compute": ("rollups", "compute", _choice("auto", "true", "false")),
    "tsd.rollups.compute.grace": ("rollups", "compute_grace_s", _range(0, 86_400)),
    "tsd.logging.format": ("log", "format", _choice("json", "console", "auto")),
    "tsd.logging.level": ("log", "level", _choice("debug", "info", "warning", "error")),
}


#: Keys tsd parses (so an OpenTSDB file with them loads) but does not act on yet;
#: /api/config lists them with the unknown keys as ignored.
NOT_ACTED_ON: frozenset[str] = frozenset()


def ignored_keys(config: Config) -> list[str]:
    """The keys of the configuration that change nothing in tsd: unknown to it (read from
    an OpenTSDB file, logged at start), or known but not acted on; sorted."""
    return sorted(key for key in config.raw if key not in KEYS or key in NOT_ACTED_ON)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``key = value`` lines (Java properties as opentsdb.conf uses them)."""
    values: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            key, value = line, ""
        else:
            key, value = line[:cut].strip(), line[cut + 1 :].strip()
        values[key] = value
    return values


def find_config_file(explicit: str | None) -> Path | None:
    """The file to read: ``explicit`` if given (must exist), else OpenTSDB's search order."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError("--config", f"no such file: {explicit}")
        return path
    for candidate in DEFAULT_CONFIG_PATHS:
        path = Path(candidate)
        if path.is_file():
            return path
    return None


def build_config(values: Mapping[str, str], warn: Callable[[str], None] | None = None) -> Config:
    """Turn key/value strings into a validated :class:`Config`."""
    sections: dict[str, dict[str, Any]] = {}
    for key, text in values.items():
        spec = KEYS.get(key)
        if spec is None:
            if warn is not None:
                warn(key)
            continue
        section, attr, parse = spec
        try:
            sections.setdefault(section, {})[attr] = parse(text)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None
    base = Config()
    replaced = {
        name: dataclasses.replace(getattr(base, name), **attrs) for name, attrs in sections.items()
    }
    return dataclasses.replace(base, raw=dict(values), **replaced)


def load_config(
    path: str | None = None,
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    warn: Callable[[str], None] | None = None,
) -> Config:
    """Read the config file (explicit or found) and apply ``overrides`` on top."""
    found = find_config_file(path)
    values = parse_properties(found.read_text(encoding="utf-8")) if found else {}
    values.update(dict(overrides))
    return build_config(values, warn)
