"""The head's columns: the room a grown column keeps for later slots is not resident
(issue 26). In a subprocess: the allocator settings are process-wide."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CODE = """
from pathlib import Path
import numpy as np
from tsd.head.head import _Columns
from tsd.malloc import FreedMemory, keep_freed_memory

def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError

assert keep_freed_memory(1 << 30)  # as the daemon
held = [np.ones(4_000_000, np.int64) for _ in range(20)]  # 640 MB from the heap, touched
above = np.ones(1_000_000, np.int64)  # live memory above them
del held
assert FreedMemory(1 << 30).release()  # their pages given back: reused blocks now
before = rss()
columns = _Columns(6_000_000)  # about 340 MB of columns, room for 6 M slots
columns.count[:1000] = 1
grew = rss() - before
grown = columns.grown(7_000_000)
print(grew, int(grown.count.sum()), int(grown.group[6_999_999]))
"""


@pytest.mark.slow
@pytest.mark.fallbacks
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the daemon's glibc settings")
def test_room_for_later_slots_is_not_resident() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grew, counted, group = map(int, out.stdout.split())
    assert counted == 1000  # the slots held are copied into the grown columns
    assert group == -1  # a slot not handed out yet belongs to no group
    # the group column (-1 in every slot, 4 bytes a slot) is written whole: 24 MB; the
    # ten others only where written (np.zeros wrote all 340 MB of them here)
    assert grew < 60 << 20, grew
