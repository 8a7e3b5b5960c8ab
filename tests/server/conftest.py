"""Server tests run on uvloop, as production does; listener tests on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import pytest
import uvloop

from tsd.config import build_config
from tsd.daemon import Daemon
from tsd.storage.base import Storage
from tsd.write.writer import WriterLimits

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


# -- a running daemon -------------------------------------------------------------------------

MakeTsd = Callable[..., Awaitable["Daemon"]]


@pytest.fixture
async def make_tsd(tmp_path: Path) -> AsyncIterator[MakeTsd]:
    """``await make_tsd(storage=None, writer_limits=None, **{"tsd.key": "value"})``: a
    started in-process daemon on 127.0.0.1, an ephemeral port and a fresh data dir."""
    started: list[Daemon] = []

    async def make(
        storage: Storage | None = None, writer_limits: WriterLimits | None = None, **keys: str
    ) -> Daemon:
        values = {
            "tsd.network.bind": "127.0.0.1",
            "tsd.network.port": "0",
            "tsd.storage.data_dir": str(tmp_path / f"data{len(started)}"),
            "tsd.core.auto_create_metrics": "true",
        }
        values.update(keys)
        daemon = Daemon(build_config(values), storage=storage, writer_limits=writer_limits)
        await daemon.start()
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        await daemon.stop()


@pytest.fixture
async def tsd(make_tsd: MakeTsd) -> Daemon:
    """A running daemon with OpenTSDB's defaults (metrics auto-created)."""
    return await make_tsd()
