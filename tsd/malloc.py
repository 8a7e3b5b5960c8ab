"""The C library's allocator, tuned for queries that hold large arrays (glibc only).

Why: a query over millions of points allocates a few hundred MB of arrays (decoded points,
series, buckets) and frees them at its end. glibc hands every allocation above its mmap
threshold (32 MB at most by its own rules) a fresh mapping and unmaps it when freed, so
the next query page-faults the same memory in again: at 8.64 M points that was about a
third of the query (bench/query.py; 0.4 ms per MB). Worker threads allocate from their own
arenas, which map anything large afresh as well. Here, allocations up to
``tsd.query.keep_freed_bytes`` come from the one process heap and freed memory up to that
size stays there for the next query: the daemon's resident size keeps its peak up to that
bound instead of giving it back. 0 leaves the C library's defaults. Anything but glibc:
nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from tsd.log import get_logger

__all__ = ["keep_freed_memory", "release_freed_memory"]

log = get_logger(__name__)

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def keep_freed_memory(limit_bytes: int) -> bool:
    """Tune glibc's allocator (before any thread starts: the arena limit applies to
    arenas made later); True when every setting was taken."""
    if limit_bytes <= 0:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)  # not glibc (musl has no mallopt)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    limit = min(limit_bytes, 2**31 - 1)
    taken = [
        bool(mallopt(_M_MMAP_THRESHOLD, limit)),
        bool(mallopt(_M_TRIM_THRESHOLD, limit)),
        bool(mallopt(_M_ARENA_MAX, 1)),
    ]
    if not all(taken):
        log.warning("malloc.settings_refused", limit_bytes=limit, taken=taken)
    return all(taken)


def release_freed_memory() -> bool:
    """Give the free pages of the C library's heap back to the system (glibc's
    ``malloc_trim``), whatever ``tsd.query.keep_freed_bytes`` keeps: once after an hour's
    rows were written out (tsd/write/head_flush.py), when the head freed most of what it
    held and its next rows are a fraction of that size (packed: tsd/head/pack.py). True
    when memory was released; False too where there is no glibc."""
    libc = _libc()
    if libc is None:
        return False
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    return bool(trim(0))


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None
