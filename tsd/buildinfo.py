"""What tsd reports as its build (``/api/version``, telnet ``version``, ``tsdb version``).

OpenTSDB's BuildData is written at build time. tsd is a Python package, often run from a
git checkout: the version comes from the installed package's metadata (pyproject's
version), and the revision fields from git when the package is loaded from a work tree
(``repo_status`` ``MINT`` when no tracked file differs from the commit, ``MODIFIED``
otherwise, as OpenTSDB's build script says). Outside a checkout (an installed wheel, the
Docker image) the revision fields are empty and ``repo_status`` is ``UNKNOWN``.
"""

from __future__ import annotations

import functools
import getpass
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from tsd import __version__

#: where the tsd package lives: the work tree, when it is a checkout
PACKAGE_DIR = Path(__file__).resolve().parent


def package_version() -> str:
    """The installed distribution's version (the same as ``tsd.__version__``)."""
    try:
        return metadata.version("tsd")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return __version__


def _git(tree: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def revision_info(tree: Path) -> dict[str, str]:
    """The revision fields of BuildData for the git work tree holding ``tree``."""
    top = _git(tree, "rev-parse", "--show-toplevel")
    # Only when ``tree`` is the top of the work tree: an installed copy under a checkout's
    # .venv is not that checkout's revision.
    if top is not None and Path(top).resolve() != tree.resolve():
        top = None
    full = _git(tree, "rev-parse", "HEAD") if top else None
    if not top or not full:
        return {
            "short_revision": "",
            "full_revision": "",
            "timestamp": "",
            "repo_status": "UNKNOWN",
            "repo": "",
            "branch": "",
        }
    changed = _git(tree, "status", "--porcelain", "--untracked-files=no")
    return {
        "short_revision": full[:7],
        "full_revision": full,
        "timestamp": _git(tree, "show", "-s", "--format=%ct", "HEAD") or "",
        "repo_status": "MINT" if changed == "" else "MODIFIED",
        "repo": top,
        "branch": _git(tree, "rev-parse", "--abbrev-ref", "HEAD") or "",
    }


@functools.cache
def build_info() -> dict[str, str]:
    """OpenTSDB's BuildData fields, all strings (read once per process)."""
    return {
        "version": package_version(),
        **revision_info(PACKAGE_DIR.parent),
        "user": _safe(getpass.getuser),
        "host": _safe(socket.gethostname),
    }


def _safe(read: object) -> str:
    try:
        return str(read())  # type: ignore[operator]
    except Exception:  # no user name in a bare container, no resolvable host name
        return "unknown"
