"""UIDs: the name <-> UID mappings of metrics, tag keys and tag values (``tsdb-uid``)."""

from tsd.uid.cache import UidCache
from tsd.uid.service import UidService
from tsd.uid.uniqueid import UidStats, UniqueId

__all__ = ["UidCache", "UidService", "UidStats", "UniqueId"]
