"""open_storage(settings): the backend the settings describe.

Each backend is imported only when chosen, so the embedded daemon never loads
the HBase client (and its Thrift stack), as uvicorn's config.py maps names to
import strings.
"""

from __future__ import annotations

import importlib

from tsd.storage.base import Storage
from tsd.storage.settings import EmbeddedSettings, HBaseSettings, StorageSettings

__all__ = ["open_storage"]


def open_storage(settings: StorageSettings) -> Storage:
    """The storage backend ``settings`` describe, opened (not yet holding tables)."""
    if isinstance(settings, EmbeddedSettings):
        from tsd.storage.embedded import EmbeddedStorage

        return EmbeddedStorage(
            settings.data_dir, read_only=settings.read_only, exclusive=settings.exclusive
        )
    assert isinstance(settings, HBaseSettings)
    module = importlib.import_module("tsd.storage.hbase")
    storage: Storage = module.HBaseStorage(settings)
    return storage
