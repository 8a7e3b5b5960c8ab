"""The write-ahead log (architecture §1.2a): records in checksummed segment files."""

from tsd.wal.log import WriteAheadLog
from tsd.wal.record import encode_cells

__all__ = ["WriteAheadLog", "encode_cells"]
