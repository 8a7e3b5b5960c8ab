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
