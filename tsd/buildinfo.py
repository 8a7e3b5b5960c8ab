"""What tsd reports as its build (``/api/version``, telnet ``version``, ``tsdb version``).

OpenTSDB's BuildData is written at build time. tsd is a Python package, often run from a
git checkout: the version comes from the installed package's metadata (pyproject's
version), and the revision fields from git when the package is loaded from a work tree
(``repo_status`` ``MINT`` when no tracked file differs from the commit, ``MODIFIED``
otherwise, as OpenTSDB's build script says). Outside a checkout (an installed wheel, the
Docker image) the revision fields are empty and ``repo_status`` is ``UNKNOWN``.
"""

from __future__ import annotations

import datetime
import functools
import getpass
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from tsd import __version__
from tsd.protocol.telnet import format_version

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


def version_reply() -> bytes:
    """The two lines of telnet ``version``, /version and ``tsdb version`` (BuildData's
    revisionString and buildString)."""
    info = build_info()
    return format_version(
        version=info["version"],
        short_revision=info["short_revision"] or "unknown",
        repo_status=info["repo_status"],
        date=_date(info["timestamp"]),
        user=info["user"],
        host=info["host"],
        repo=info["repo"] or "unknown",
    )


def _date(timestamp: str) -> str:
    """BuildData's date form (``2019/01/21 18:17:20 +0000``) of the commit's Unix time."""
    if not timestamp.isdigit():
        return "unknown"
    moment = datetime.datetime.fromtimestamp(int(timestamp), datetime.UTC)
    return moment.strftime("%Y/%m/%d %H:%M:%S +0000")
