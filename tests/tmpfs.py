"""A small tmpfs for tests of a disk that fills up (mounting needs root, as CI has)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (e.g. "256k") at ``mount_point`` for the ``with`` block,
    or skip the test where mounting is not allowed.

    The unmount is lazy (``umount -l``): files the code under test still holds open (a
    log, a store) must not keep the mount alive after the test, or pytest cannot remove
    its temporary directory and fails the run at exit.
    """
    mount_point.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
