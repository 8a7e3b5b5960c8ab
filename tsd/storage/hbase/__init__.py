"""The HBase backend: tsd's Storage interface over HBase's Thrift1 gateway."""

from tsd.storage.hbase.storage import HBaseStorage

__all__ = ["HBaseStorage"]
