"""The cores this process may run on. Pure.

Its CPU affinity, which containers and ``taskset`` narrow below the machine's count (where
the platform has none, the machine's count): what one-per-core sizes (telnet worker
processes, the embedded store's parallel reads) are taken from.
"""

from __future__ import annotations

import os

__all__ = ["usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
