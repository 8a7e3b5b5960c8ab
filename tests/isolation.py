"""The test session never touches a user's data: the guard every test runs under.

Loaded as a pytest plugin (``pytest_plugins`` in tests/conftest.py). A developer runs
``scripts/tsd`` in the checkout, whose default store is ``./data`` there; a test daemon
that found it would take (or fail on) its write-ahead log lock, replay its segments and
delete them. So, for the whole session:

- The working directory is a trap under pytest's basetemp, where ``data`` is a plain
  file: anything that falls back on the default data directory (``./data``) or the default
  config file (``./opentsdb.conf``) gets neither the checkout's nor a usable one, and fails
  on the spot (``tsd.storage.data_dir`` "is not a directory"). Subprocesses inherit it.
- An audit hook refuses, in this process, any open, listing, creation, removal or
  connection under the checkout's own default paths (:data:`CHECKOUT_DEFAULTS`), naming
  the path: a test that hard-codes them fails loudly instead of taking a user's data.

Every daemon, store and tool a test starts takes its own ``tmp_path`` (and port 0 or a free
port); tests/test_isolation.py runs a user's daemon beside the daemon-starting tests and
checks that nothing in its directory changed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tsd.config import DEFAULT_CONFIG_PATHS, StorageConfig

ROOT = Path(__file__).resolve().parent.parent

#: what ``scripts/tsd`` (run in the checkout) uses by default: its store and config file
CHECKOUT_DEFAULTS = (
    str(ROOT / StorageConfig().data_dir),
    str(ROOT / DEFAULT_CONFIG_PATHS[0]),
)

#: audit events whose first arguments are paths (src and dst for a rename)
PATH_EVENTS = frozenset(
    {
        "open",
        "os.mkdir",
        "os.listdir",
        "os.scandir",
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.chmod",
        "os.truncate",
        "os.utime",
        "os.symlink",
        "os.link",
        "shutil.rmtree",
        "shutil.copytree",
        "shutil.move",
    }
)
#: Unix-socket connects: the daemon's control socket lives in its data directory
SOCKET_EVENTS = frozenset({"socket.connect", "socket.bind"})

TRAP_NOTE = (
    "This is the test session's working directory. 'data' is a file on purpose: a test\n"
    "that falls back on the default data directory (./data) fails here instead of using\n"
    "the checkout's. Give the daemon or tool its own tmp_path (tests/isolation.py).\n"
)


def forbidden(path: object, defaults: tuple[str, ...] = CHECKOUT_DEFAULTS) -> str | None:
    """The absolute form of ``path`` if it is one of ``defaults`` or under one, else None."""
    if isinstance(path, int) or not isinstance(path, str | bytes | os.PathLike):
        return None
    try:
        absolute = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None
    for default in defaults:
        if absolute == default or absolute.startswith(default + os.sep):
            return absolute
    return None


def audit(event: str, args: tuple[Any, ...]) -> None:
    """sys.addaudithook's hook: refuse the checkout's default paths (see the module doc)."""
    if event in PATH_EVENTS:
        paths: tuple[Any, ...] = args[:2] if event in ("os.rename", "shutil.move") else args[:1]
    elif event in SOCKET_EVENTS and len(args) > 1:
        paths = (args[1],)  # AF_UNIX: the address is a path
    else:
        return
    for path in paths:
        hit = forbidden(path)
        if hit is not None:
            raise PermissionError(
                f"test isolation: {event} {hit!r} refused: the checkout's default paths belong"
                " to a user's daemon (scripts/tsd); give the test its own tmp_path"
            )


_hooked = False


@pytest.fixture(scope="session", autouse=True)
def isolated_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Runs the session in the trap directory, with the audit hook installed (once per
    process: an audit hook cannot be removed)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(audit)
        _hooked = True
    trap = tmp_path_factory.mktemp("cwd")
    (trap / "README").write_text(TRAP_NOTE)
    (trap / "data").write_text(TRAP_NOTE)
    before = os.getcwd()
    os.chdir(trap)
    try:
        yield trap
    finally:
        os.chdir(before)
