"""The embedded storage engine (LMDB). See :mod:`tsd.storage.embedded.storage`."""

from tsd.storage.embedded.storage import EmbeddedStorage

__all__ = ["EmbeddedStorage"]
