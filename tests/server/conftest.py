"""Server tests run on uvloop, as production does; listener tests on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from types import ModuleType

import pytest
import uvloop

from tests.conftest import STORAGE_BACKENDS, STORAGE_PARAMS
from tsd.config import build_config
from tsd.daemon import Daemon
from tsd.storage.base import Storage
from tsd.write.batch_writer import WriterLimits

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
    config.addinivalue_line("markers", "each_backend: run the tsd fixture on every backend")


def _docker_build_module(session: pytest.Session) -> ModuleType | None:
    """tests/server/test_docker_build.py as this run imported it, when it selected a test of
    it (under --import-mode=importlib its name is not a package path), else None."""
    for item in session.items:
        module = getattr(item, "module", None)
        if isinstance(module, ModuleType) and module.__name__.endswith("test_docker_build"):
            return module
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """The Docker image's tests selected: start building it now, beside the other tests."""
    module = _docker_build_module(session)
    if module is not None:
        module.start_building()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A build started and never used (the run stopped before its tests): its directory."""
    module = _docker_build_module(session)
    if module is not None:
        module.discard_build()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # pytest-timeout's default SIGALRM never fires while uvloop waits in C, so a hung
    # server test would hang the suite: use the thread method (fails it by name).
    here = str(config.rootpath / "tests" / "server")
    for item in items:
        if str(item.path).startswith(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120, method="thread"))


# -- a running daemon -------------------------------------------------------------------------

MakeTsd = Callable[..., Awaitable["Daemon"]]

#: OpenTSDB's table keys (tsd.storage.hbase.<key>_table) and their default names
TABLES = {"data": "tsdb", "uid": "tsdb-uid", "tree": "tsdb-tree", "meta": "tsdb-meta"}


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Tests marked each_backend run their ``tsd`` on every storage backend: the embedded
    # store and the real HBase (tsdb tsd with tsd.storage.backend=hbase behaves the same).
    marked = metafunc.definition.get_closest_marker("each_backend") is not None
    if marked and "tsd" in metafunc.fixturenames:
        metafunc.parametrize("tsd_backend", STORAGE_PARAMS, indirect=True)


@pytest.fixture
def tsd_backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "embedded"))


@pytest.fixture
async def tsd(make_tsd: MakeTsd, tsd_backend: str, tmp_path: Path) -> AsyncIterator[Daemon]:
    """A running daemon with OpenTSDB's defaults (metrics auto-created), on the embedded
    store unless the test is marked each_backend."""
    if tsd_backend == "embedded":
        yield await make_tsd()
        return
    async with STORAGE_BACKENDS[tsd_backend](tmp_path / "store") as store:
        prefix = store.table_prefix
        tables = {f"tsd.storage.hbase.{t}_table": f"{prefix}{n}" for t, n in TABLES.items()}
        daemon = await make_tsd(storage=store.storage, **tables)
        try:
            yield daemon
        finally:
            await daemon.stop()  # before its store closes (stop is idempotent)
