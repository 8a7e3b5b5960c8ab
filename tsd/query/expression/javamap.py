"""The iteration order of a ``java.util.HashMap`` / ``HashSet`` of strings. Pure.

OpenTSDB's /api/query/exp answers depend on it: which variable's series lends an
expression its tags (the first entry of a HashMap keyed by variable id), and the key
order of ``commonTags`` (a HashMap of tag names). Java (8+) iterates a HashMap bucket by
bucket, bucket = ``spread(hashCode) & (capacity - 1)``, and within a bucket in insertion
order (resizing keeps that relative order); the capacity starts at
``tableSizeFor(initialCapacity)`` (16 by default) and doubles whenever the size passes
three quarters of it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["java_hash_order", "java_string_hash"]

DEFAULT_CAPACITY = 16


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _spread(h: int) -> int:
    u = h & 0xFFFFFFFF
    return u ^ (u >> 16)


def _table_size_for(capacity: int) -> int:
    n = 1
    while n < capacity:
        n <<= 1
    return n


def java_hash_order(keys: Iterable[str], initial_capacity: int | None = None) -> list[str]:
    """``keys`` (in insertion order, duplicates ignored) in a HashMap's iteration order;
    ``initial_capacity`` is the constructor's argument (None: the default 16)."""
    unique = list(dict.fromkeys(keys))
    capacity = DEFAULT_CAPACITY if initial_capacity is None else _table_size_for(initial_capacity)
    for size in range(1, len(unique) + 1):
        while size > int(capacity * 0.75):
            capacity <<= 1
    mask = capacity - 1
    return sorted(unique, key=lambda k: _spread(java_string_hash(k)) & mask)
