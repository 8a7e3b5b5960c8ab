"""One exit-status table for every ``tsdb`` command, shown by ``tsdb --help``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.toolkit import tsdb
from tsd.tools import status

pytestmark = pytest.mark.slow  # the CLI in subprocesses


async def test_help_shows_the_table(tmp_path: Path) -> None:
    shown = await tsdb(tmp_path, "--help")
    assert shown.code == 0
    for code in (status.OK, status.FAILED, status.USAGE, status.UNAVAILABLE, status.STOPPED):
        assert f"\n  {code}  " in shown.out


async def test_each_kind_of_failure_has_its_status(tmp_path: Path) -> None:
    # usage: a bad option value; storage: a store that is not there (read-only lookup)
    usage = await tsdb(tmp_path, "copy", "--from", "a", "--to", "b", "--batch-rows", "0")
    missing = await tsdb(tmp_path, "uid", "metrics", "x", "--data-dir", str(tmp_path / "none"))
    (tmp_path / "bad.txt").write_text("not a put line\n")
    failed = await tsdb(tmp_path, "import", "bad.txt", "--data-dir", str(tmp_path / "d"))
    assert (usage.code, missing.code, failed.code) == (
        status.USAGE,
        status.UNAVAILABLE,
        status.FAILED,
    )
    assert usage.err.startswith("tsdb copy: configuration error: --batch-rows")
