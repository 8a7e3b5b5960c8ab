"""zstd contexts, one per thread: zstandard's compressors and decompressors must not be
shared between threads (the embedded store's readers decode concurrently, the log writes
from the ingest path), and making one per call costs more than small payloads' work."""

from __future__ import annotations

import threading

import zstandard

_local = threading.local()


def compressor(level: int, *, content_size: bool = True) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``level``; ``content_size=False`` leaves the size out
    of the frame header (the reader then gives the bound itself)."""
    cache: dict[tuple[int, bool], zstandard.ZstdCompressor] | None = getattr(
        _local, "compressors", None
    )
    if cache is None:
        cache = _local.compressors = {}
    found = cache.get((level, content_size))
    if found is None:
        found = cache[level, content_size] = zstandard.ZstdCompressor(
            level=level, write_content_size=content_size, write_checksum=False
        )
    return found


def decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor."""
    found: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found
