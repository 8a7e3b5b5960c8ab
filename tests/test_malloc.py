"""tsd.malloc: glibc's allocator keeps freed query memory (in a subprocess: the settings
are process-wide)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tsd.malloc import FreedMemory, keep_freed_memory


def test_zero_leaves_the_defaults() -> None:
    assert keep_freed_memory(0) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_glibc_takes_every_setting() -> None:
    code = "from tsd.malloc import keep_freed_memory; print(keep_freed_memory(1 << 30))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


HOLES = """
import sys
from pathlib import Path
from tsd.malloc import FreedMemory, keep_freed_memory

def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError

assert keep_freed_memory(1 << 30)  # as the daemon: the top kept, nothing mmapped
freed = FreedMemory(1 << 30)
assert freed.available
blocks = [bytearray(16384) for _ in range(12800)]  # 200 MiB from the heap, touched
above = [bytearray(16384) for _ in range(16)]  # live memory above them: not the top
before = rss()
del blocks
held = rss()
assert freed.below_top() >= 190 << 20, freed.below_top()
assert freed.due(64 << 20)
assert freed.release()
after = rss()
assert not freed.due(64 << 20)  # given back: not due again
print(before >> 20, held >> 20, after >> 20)
assert held - after >= 180 << 20, (held, after)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim only")
def test_free_chunks_below_the_top_are_given_back() -> None:
    """Freed memory with live memory above it stays resident whatever the trim threshold;
    a release gives its pages back and is not due again until more is freed."""
    out = subprocess.run([sys.executable, "-c", HOLES], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    before, held, after = map(int, out.stdout.split())
    assert held >= before - 10  # freeing alone gave nothing back


def test_elsewhere_nothing_to_do() -> None:
    freed = FreedMemory(0)
    if not freed.available:
        assert freed.below_top() == 0
        assert not freed.due(0)
        assert not freed.release()
    else:
        assert freed.below_top() >= 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim only")
def test_freed_memory_kept_for_queries_is_given_back_on_request() -> None:
    """With freed memory kept (1 GiB), 200 MB of rows freed stay resident until a release
    keeping nothing at the top gives back most of it."""
    code = """
import os
from tsd.malloc import FreedMemory, keep_freed_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

keep_freed_memory(1 << 30)
rows = [b"x" * 1000 + i.to_bytes(4, "big") for i in range(200_000)]
del rows
before = rss()
released = FreedMemory(0).release()
print(released, before - rss())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    released, given_back = out.stdout.split()
    assert released == "True", out.stderr
    assert int(given_back) > 150_000_000
