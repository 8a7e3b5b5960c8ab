"""Server tests run on uvloop, as production does; listener tests on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.get_closest_marker("both_loops") is not None:
        return LOOPS
    return {"uvloop": LOOPS["uvloop"]}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_loops: run under asyncio's loop and uvloop")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # pytest-timeout's default SIGALRM never fires while uvloop waits in C, so a hung
    # server test would hang the suite: use the thread method (fails it by name).
    here = str(config.rootpath / "tests" / "server")
    for item in items:
        if str(item.path).startswith(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120, method="thread"))
