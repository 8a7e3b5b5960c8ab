"""A row filter HBase can apply that never drops a row tsd's regex would keep. Pure.

The Thrift filter language's ``RowFilter(=, 'regexstring:...')`` decodes each row key as
UTF-8 before matching (docs/hbase.md), so OpenTSDB's byte regex cannot be pushed down as it
is. What can be: "the key contains one of these byte strings" (the tag pairs a query pins),
written so that the UTF-8 view of the key matches whenever the bytes do:

* a byte < 0x80 decodes to the same character, wherever it stands: a UTF-8 decoder never
  takes an ASCII byte into a multi-byte sequence (a lead byte followed by one is malformed
  on its own and replaced by U+FFFD), so it is matched as itself (``\\xhh``);
* a run of n bytes >= 0x80 decodes to between 1 and n characters, none of them ASCII:
  malformed bytes become one U+FFFD each, valid sequences one character (two for 4-byte
  sequences), and a sequence may start before the run or end after it, still a non-ASCII
  character. So the run is matched as ``[^\\x00-\\x7F]{1,n}``.

HBase's ``RegexStringComparator`` looks for the pattern anywhere in the key (``find``), so
each alternative is a plain sequence of those pieces. The filter may pass rows that do not
contain the bytes (a run matched loosely, a match across tag boundaries): tsd still applies
the exact regex to every key it receives, so these cost transfer, never correctness.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["contains_filter", "utf8_find_regex"]


def utf8_find_regex(literal: bytes) -> bytes:
    """A Java regex over the UTF-8 decoding of a key that finds every key containing
    ``literal`` (see the module docstring). ASCII only, no quotes."""
    out = []
    run = 0
    for byte in literal:
        if byte >= 0x80:
            run += 1
            continue
        if run:
            out.append(b"[^\\x00-\\x7F]{1,%d}" % run)
            run = 0
        out.append(b"\\x%02x" % byte)
    if run:
        out.append(b"[^\\x00-\\x7F]{1,%d}" % run)
    return b"".join(out)


def contains_filter(contains: Sequence[Sequence[bytes]]) -> bytes | None:
    """The filter-language expression for "for every entry, the key contains one of its byte
    strings", or None when there is nothing to say."""
    parts = []
    for alternatives in contains:
        if not alternatives or any(not a for a in alternatives):
            continue  # an empty literal is in every key
        regex = b"|".join(utf8_find_regex(a) for a in sorted(set(alternatives)))
        parts.append(b"RowFilter(=, 'regexstring:(?:" + regex + b")')")
    return b" AND ".join(parts) if parts else None
