"""Storage-format constants, under OpenTSDB 2.4.1's own names so the Java can be cross-read.

Each constant cites where OpenTSDB defines it (``src/core/Const.java`` unless noted) and the
section of /work/shared/reference/opentsdb-2.4-behaviour.md (§4) that describes it. Pure: no
imports from the rest of tsd.
"""

from __future__ import annotations

from typing import Final

# --- Row key (Const.java, TSDB.java; behaviour §4.1, §4.2) ---------------------------------

#: Bytes of the base time in a row key (Const.TIMESTAMP_BYTES).
TIMESTAMP_BYTES: Final = 4
#: Seconds covered by one row; base times are multiples of it (Const.MAX_TIMESPAN).
MAX_TIMESPAN: Final = 3600
#: Default UID widths (tsd.storage.uid.width.metric/tagk/tagv; UniqueId widths).
METRIC_WIDTH: Final = 3
TAGK_WIDTH: Final = 3
TAGV_WIDTH: Final = 3
#: A UID is 1 to 8 bytes wide (UniqueId constructor checks the width).
MIN_UID_WIDTH: Final = 1
MAX_UID_WIDTH: Final = 8
#: Salt defaults and limit (Const.SALT_WIDTH / SALT_BUCKETS; setSaltWidth allows 0..8).
SALT_WIDTH: Final = 0
SALT_BUCKETS: Final = 20
MAX_SALT_WIDTH: Final = 8
#: Default maximum number of tags per series (Const.MAX_NUM_TAGS, tsd.storage.max_tags).
MAX_NUM_TAGS: Final = 8

# --- Timestamps (Const.java; behaviour §1.1 timestamp rules) --------------------------------

#: A timestamp with any of these bits set is in milliseconds (Const.SECOND_MASK).
SECOND_MASK: Final = 0xFFFFFFFF00000000
#: Bits that must be clear in a millisecond timestamp (Const.MILLISECOND_MASK).
MILLISECOND_MASK: Final = 0xFFFFF00000000000

# --- Qualifier flags (Const.java; behaviour §4.3) -------------------------------------------

#: Number of low bits holding the flags in a qualifier (Const.FLAG_BITS).
FLAG_BITS: Final = 4
#: Low bits skipped in a millisecond qualifier: 4 flag bits + 2 reserved (Const.MS_FLAG_BITS).
MS_FLAG_BITS: Final = 6
#: Flag bit set when the value is a floating point number (Const.FLAG_FLOAT).
FLAG_FLOAT: Final = 0x8
#: Low 3 flag bits: value length minus one (Const.LENGTH_MASK).
LENGTH_MASK: Final = 0x7
#: All flag bits (Const.FLAGS_MASK = FLAG_FLOAT | LENGTH_MASK).
FLAGS_MASK: Final = FLAG_FLOAT | LENGTH_MASK
#: Top nibble of the first byte of a millisecond qualifier (Const.MS_BYTE_FLAG, 0xF0).
MS_BYTE_FLAG: Final = 0xF0
#: The same marker on the whole 4-byte millisecond qualifier (Const.MS_FLAG).
MS_FLAG: Final = 0xF0000000
#: Meta byte bit of a compacted cell mixing second and ms points (Const.MS_MIXED_COMPACT).
MS_MIXED_COMPACT: Final = 0x01
#: Mask of the 22-bit millisecond offset inside a ms qualifier (Internal.getOffsetFromQualifier).
MS_OFFSET_MASK: Final = 0x0FFFFFC0
#: Largest offsets a writer produces (MAX_TIMESPAN - 1 seconds, in s and in ms).
MAX_SECONDS_OFFSET: Final = MAX_TIMESPAN - 1
MAX_MS_OFFSET: Final = MAX_TIMESPAN * 1000 - 1

#: The flags OpenTSDB writes for each value encoding (TSDB.addPoint; ERRATA.md table).
FLAGS_INT1: Final = 0x0
FLAGS_INT2: Final = 0x1
FLAGS_INT4: Final = 0x3
FLAGS_INT8: Final = 0x7
FLAGS_FLOAT32: Final = FLAG_FLOAT | 0x3
FLAGS_FLOAT64: Final = FLAG_FLOAT | 0x7

# --- Column family and special qualifiers ---------------------------------------------------

#: The data table's only column family (TSDB.FAMILY = { 't' }).
FAMILY: Final = "t"
#: First byte of an annotation qualifier (meta/Annotation.java PREFIX; behaviour §4.7).
ANNOTATION_PREFIX: Final = 0x01
#: First byte of an append column (AppendDataPoints.APPEND_COLUMN_PREFIX; behaviour §4.3).
APPEND_COLUMN_PREFIX: Final = 0x05
#: The whole append column qualifier (AppendDataPoints.APPEND_COLUMN_QUALIFIER).
APPEND_COLUMN_QUALIFIER: Final = b"\x05\x00\x00"
#: First byte of a histogram point qualifier (core/HistogramDataPoint.PREFIX).
HISTOGRAM_PREFIX: Final = 0x06
#: Age in seconds past which OpenTSDB repairs unsorted append cells
#: (AppendDataPoints.REPAIR_THRESHOLD).
APPEND_REPAIR_THRESHOLD: Final = 3600

# --- UID table (uid/UniqueId.java; behaviour §4.5) ------------------------------------------

#: Families of tsdb-uid: forward (name -> uid) and reverse (uid -> name) maps.
UID_ID_FAMILY: Final = "id"
UID_NAME_FAMILY: Final = "name"
#: Row holding the per-kind counters (UniqueId.MAXID_ROW = { 0 }).
UID_MAXID_ROW: Final = b"\x00"
#: Qualifiers of the three UID kinds (TSDB constructor: "metrics", "tagk", "tagv").
UID_KIND_METRIC: Final = b"metrics"
UID_KIND_TAGK: Final = b"tagk"
UID_KIND_TAGV: Final = b"tagv"
#: UIDMeta qualifiers in the name family (meta/UIDMeta.java; ERRATA.md).
UID_META_QUALIFIERS: Final = {
    UID_KIND_METRIC: b"metric_meta",
    UID_KIND_TAGK: b"tagk_meta",
    UID_KIND_TAGV: b"tagv_meta",
}

# --- Meta table (meta/TSMeta.java; behaviour §4.6) ------------------------------------------

TSMETA_FAMILY: Final = "name"

# --- Tree table (tree/Tree.java TREE_FAMILY; create_table.sh) -------------------------------

TREE_FAMILY: Final = "t"
TSMETA_QUALIFIER: Final = b"ts_meta"
TSMETA_COUNTER_QUALIFIER: Final = b"ts_ctr"

# --- Integer ranges (Java primitive bounds used by TSDB.addPoint) ---------------------------

BYTE_MIN: Final = -(2**7)
BYTE_MAX: Final = 2**7 - 1
SHORT_MIN: Final = -(2**15)
SHORT_MAX: Final = 2**15 - 1
INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
