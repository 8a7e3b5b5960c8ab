"""The compiled helpers (setup.py's extensions): loaded here, in one place, or their absence
recorded.

Every extension in setup.py is ``optional``: without a C compiler tsd installs anyway and
runs the pure-Python fallback of each helper, only slower. So that this never goes
unnoticed, every module that has a compiled helper takes it through :func:`load`, which
returns the module or None (the caller then uses its fallback) and records which; the
daemon logs one warning naming every helper that did not load and reports the count
(``tsd.native.helpers.loaded`` on ``/api/stats``, ``tsd_native_helpers_loaded`` on
``/metrics``).

Two environment switches:

* ``TSD_DISABLE_NATIVE=1`` hides every helper: the fallbacks run even where the helpers are
  built (CI runs the fallbacks' tests this way, so both paths stay tested).
* ``TSD_REQUIRE_NATIVE=1`` makes a helper that did not build an error: setup.py builds the
  extensions as required rather than optional, and the test suite stops at its start
  (tests/conftest.py). CI sets it.

Pure: standard library only, no tsd import (every layer that has a helper imports this).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Final

__all__ = [
    "DISABLE_ENV",
    "HELPERS",
    "REQUIRE_ENV",
    "attribute",
    "disabled",
    "load",
    "loaded_count",
    "main",
    "missing",
    "required",
    "status",
]

#: Every extension setup.py builds, by module name (tests/test_native.py checks that the two
#: lists agree).
HELPERS: Final = (
    "tsd.storage.hbase._rows",
    "tsd.storage.embedded._points",
    "tsd.storage.embedded._pack",
    "tsd.codec._encode",
    "tsd.protocol._parse",
    "tsd.wal._record",
    "tsd.uid._table",
    "tsd.head._runs",
    "tsd.query._decode",
    "tsd.server.http._render",
)
DISABLE_ENV: Final = "TSD_DISABLE_NATIVE"
REQUIRE_ENV: Final = "TSD_REQUIRE_NATIVE"

#: helper -> None when it loaded, else why not; filled as the helpers are asked for
_outcomes: dict[str, str | None] = {}


def _switch(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def disabled() -> bool:
    """Whether ``TSD_DISABLE_NATIVE`` hides the helpers."""
    return _switch(DISABLE_ENV)


def required() -> bool:
    """Whether ``TSD_REQUIRE_NATIVE`` makes a missing helper an error."""
    return _switch(REQUIRE_ENV)


def load(name: str) -> Any:
    """The compiled helper ``name`` (one of :data:`HELPERS`), or None when it is not built
    or hidden by ``TSD_DISABLE_NATIVE``: the caller then takes its Python fallback."""
    if name not in HELPERS:
        raise ValueError(f"{name!r} is not one of setup.py's extensions")
    if disabled():
        _outcomes[name] = f"hidden by {DISABLE_ENV}"
        return None
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        _outcomes[name] = f"not built ({exc})"
        return None
    _outcomes[name] = None
    return module


def attribute(name: str, attr: str, fallback: Any = None) -> Any:
    """``attr`` of the helper ``name`` where it loaded, else ``fallback``. A loaded helper
    without it (an older build: rebuild tsd) is an error, not a silent fallback."""
    module = load(name)
    return fallback if module is None else getattr(module, attr)


def status() -> dict[str, str | None]:
    """Every helper -> None (loaded) or why it did not load, in :data:`HELPERS` order
    (those no module has asked for yet are loaded now)."""
    for name in HELPERS:
        if name not in _outcomes:
            load(name)
    return {name: _outcomes[name] for name in HELPERS}


def missing() -> dict[str, str]:
    """The helpers that did not load -> why."""
    return {name: why for name, why in status().items() if why is not None}


def loaded_count() -> int:
    """How many helpers loaded."""
    return len(HELPERS) - len(missing())


def main() -> int:
    """``python -m tsd.native``: one line per helper; exit status 1 when one did not load
    and ``TSD_REQUIRE_NATIVE`` is set (the Docker image's build checks its wheel so)."""
    for name, why in status().items():
        print(f"{name}: {'loaded' if why is None else why}")
    print(f"{loaded_count()} of {len(HELPERS)} compiled helpers loaded")
    return 1 if required() and missing() else 0


if __name__ == "__main__":
    raise SystemExit(main())
