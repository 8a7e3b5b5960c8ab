"""Build information from the package metadata and, in a checkout, from git (real git
repositories made for the test)."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

import pytest

import tsd
from tsd.buildinfo import PACKAGE_DIR, build_info, package_version, revision_info


def git(tree: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(tree), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    tree.mkdir()
    git(tree, "init", "-q", "-b", "trunk")
    (tree / "a.txt").write_text("one\n")
    git(tree, "add", "a.txt")
    git(tree, "commit", "-q", "-m", "first")
    return tree


def test_clean_checkout_is_mint(repo: Path) -> None:
    (repo / "untracked.txt").write_text("not part of the build\n")
    info = revision_info(repo)
    head = git(repo, "rev-parse", "HEAD")
    assert info["repo_status"] == "MINT"
    assert info["full_revision"] == head
    assert info["short_revision"] == head[:7]
    assert info["branch"] == "trunk"
    assert info["timestamp"] == git(repo, "show", "-s", "--format=%ct", "HEAD")
    assert Path(info["repo"]).resolve() == repo.resolve()


def test_changed_tracked_file_is_modified(repo: Path) -> None:
    (repo / "a.txt").write_text("two\n")
    assert revision_info(repo)["repo_status"] == "MODIFIED"


def test_outside_a_checkout_is_unknown(tmp_path: Path, repo: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    sub = repo / "sub"
    sub.mkdir()
    for tree in (plain, sub):  # not a work tree, or not its top (a copy under .venv)
        info = revision_info(tree)
        assert info["repo_status"] == "UNKNOWN"
        assert info["full_revision"] == ""


def test_version_is_the_package_metadata() -> None:
    assert package_version() == metadata.version("tsd") == tsd.__version__
    info = build_info()
    assert info["version"] == package_version()
    expected = revision_info(PACKAGE_DIR.parent)
    assert {k: info[k] for k in expected} == expected
