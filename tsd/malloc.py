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
from typing import Any

from tsd.log import get_logger

__all__ = ["FreedMemory", "keep_freed_memory"]

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


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+), every field a ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


class FreedMemory:
    """Free chunks of the heap below its top, and giving their pages back (glibc 2.33+;
    elsewhere :attr:`available` is False and both calls do nothing)."""

    def __init__(self, keep_top_bytes: int) -> None:
        #: what a release leaves at the heap's top (``tsd.query.keep_freed_bytes``)
        self.keep_top_bytes = max(0, min(keep_top_bytes, 2**31 - 1))
        self._info = None
        self._trim = None
        info = getattr(_libc(), "mallinfo2", None)  # not glibc, or older than 2.33
        trim = _malloc_trim()
        if info is None or trim is None:
            return
        info.restype = _MallInfo2
        info.argtypes = []
        self._info, self._trim = info, trim
        #: :meth:`below_top` after the last release (or its lowest since): a free chunk
        #: keeps counting once its pages are given back, so what is new is the growth
        self._baseline = self.below_top()

    @property
    def available(self) -> bool:
        return self._info is not None

    def below_top(self) -> int:
        """Bytes in free chunks other than the top one (``fordblks - keepcost``): resident
        unless released (pages a release gave back and nothing touched since count too)."""
        if self._info is None:
            return 0
        info = self._info()
        return int(info.fordblks) - int(info.keepcost)

    def due(self, new_bytes: int) -> bool:
        """True when at least ``new_bytes`` more lie in free chunks below the top than
        after the last release (chunks reused since lower the mark)."""
        if self._info is None:
            return False
        now = self.below_top()
        self._baseline = min(self._baseline, now)
        return now - self._baseline >= new_bytes

    def release(self) -> bool:
        """Give back the pages of every free chunk below the top, and the top beyond
        :attr:`keep_top_bytes` (``malloc_trim``; holds the allocator's lock while it walks
        the free chunks: call it off the event loop). True when memory was given back."""
        if self._trim is None:
            return False
        released = bool(self._trim(self.keep_top_bytes))
        self._baseline = self.below_top()
        return released


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim(pad)`` (a CDLL call lets go of the GIL), or None."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim.restype = ctypes.c_int
        trim.argtypes = [ctypes.c_size_t]
    return trim


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None
