"""tsd.malloc: glibc's allocator keeps freed query memory (in a subprocess: the settings
are process-wide)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tsd.malloc import keep_freed_memory


def test_zero_leaves_the_defaults() -> None:
    assert keep_freed_memory(0) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_glibc_takes_every_setting() -> None:
    code = "from tsd.malloc import keep_freed_memory; print(keep_freed_memory(1 << 30))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim only")
def test_freed_memory_kept_for_queries_is_given_back_on_request() -> None:
    """With freed memory kept (1 GiB), 200 MB of rows freed stay resident until
    release_freed_memory, which gives back most of it."""
    code = """
import os
from tsd.malloc import keep_freed_memory, release_freed_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

keep_freed_memory(1 << 30)
rows = [b"x" * 1000 + i.to_bytes(4, "big") for i in range(200_000)]
del rows
before = rss()
released = release_freed_memory()
print(released, before - rss())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    released, given_back = out.stdout.split()
    assert released == "True", out.stderr
    assert int(given_back) > 150_000_000
