"""open_storage(config): the configured backend, by name (``tsd.storage.backend``).

Each backend is imported only when chosen, so the embedded daemon never loads
the HBase client (and its Thrift stack), as uvicorn's config.py maps names to
import strings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from tsd.config import Config
from tsd.errors import ConfigError
from tsd.storage.base import Storage


def _open_embedded(cfg: Config) -> Storage:
    from tsd.storage.embedded import EmbeddedStorage

    return EmbeddedStorage(Path(cfg.storage.data_dir))


def _open_hbase(cfg: Config) -> Storage:
    module = importlib.import_module("tsd.storage.hbase")
    storage: Storage = module.HBaseStorage(cfg.storage)
    return storage


#: tsd.storage.backend -> opener
BACKENDS: dict[str, Callable[[Config], Storage]] = {
    "embedded": _open_embedded,
    "hbase": _open_hbase,
}


def open_storage(cfg: Config) -> Storage:
    """The storage backend ``cfg.storage.backend`` names, opened (not yet holding tables)."""
    opener = BACKENDS.get(cfg.storage.backend)
    if opener is None:
        raise ConfigError("tsd.storage.backend", f"unknown backend {cfg.storage.backend!r}")
    return opener(cfg)
