// The part of HBase's Thrift2 gateway (org.apache.hadoop.hbase.thrift2.ThriftServer) that
// tsd uses: creating a table with split keys and listing a table's regions. Thrift1 has no
// split keys. Field ids and types are the gateway's wire format; the fields tsd does not
// set or read are left out (a Thrift reader skips fields it was not told of).

enum TBloomFilterType { NONE = 0, ROW = 1, ROWCOL = 2 }
enum TCompressionAlgorithm { LZO = 0, GZ = 1, NONE = 2, SNAPPY = 3, LZ4 = 4, BZIP2 = 5, ZSTD = 6 }
enum TDataBlockEncoding { NONE = 0, PREFIX = 2, DIFF = 3, FAST_DIFF = 4, ROW_INDEX_V1 = 7 }

struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}

struct TColumnFamilyDescriptor {
  1: required binary name
  5: optional TBloomFilterType bloomnFilterType
  6: optional TCompressionAlgorithm compressionType
  8: optional TDataBlockEncoding dataBlockEncoding
  10: optional i32 maxVersions
  13: optional i32 timeToLive
  14: optional bool blockCacheEnabled
}

struct TTableDescriptor {
  1: required TTableName tableName
  2: optional list<TColumnFamilyDescriptor> columns
}

struct TServerName {
  1: required string hostName
  2: optional i32 port
}

struct THRegionInfo {
  1: required i64 regionId
  2: required binary tableName
  3: optional binary startKey
  4: optional binary endKey
}

struct THRegionLocation {
  1: required TServerName serverName
  2: required THRegionInfo regionInfo
}

exception TIOError {
  1: optional string message
}

service THBaseService {
  list<THRegionLocation> getAllRegionLocations(1: required binary table) throws (1: TIOError io)
  bool tableExists(1: required TTableName tableName) throws (1: TIOError io)
  void createTable(1: required TTableDescriptor desc, 2: optional list<binary> splitKeys)
    throws (1: TIOError io)
}
