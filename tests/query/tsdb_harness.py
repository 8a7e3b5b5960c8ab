"""A real write path and query engine on one store, for the engine and case tests.

Points go through the real Writer (UIDs, row keys, batching, appends when configured),
into the in-memory head on the embedded store (as the daemon builds it); ``compact()``
writes the head's rows out (compacted) and runs the real Compactor over every row;
queries run through the real QueryEngine and are answered as the HTTP handler serialises
them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from tests.write.points import add
from tsd.codec import KeyLayout
from tsd.config import Config, CoreConfig, QueryConfig, StorageConfig
from tsd.data_points import DataPoint, make_tags
from tsd.protocol.exp_json import exp_ts_query, parse_exp_json, validate_exp_query
from tsd.protocol.query_json import parse_query_json, parse_query_params
from tsd.protocol.rollup_config import RollupConfig
from tsd.query.engine import QueryEngine
from tsd.query.expression.executor import expression_variables, run_exp_query
from tsd.query.rollup_compute import ComputedRollups
from tsd.server.http.exp import answer_gexp, render_exp_answer
from tsd.server.http.render import render_query_result
from tsd.stats import StatsRegistry
from tsd.storage.base import ScanSpec, Storage
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import opentsdb_tables, rollup_families
from tsd.uid.service import UidService
from tsd.write.compactor import Compactor
from tsd.write.head_flush import HeadSink, build_head_sink
from tsd.write.ingest import IngestService
from tsd.write.writer import Writer

#: "now" for tests: far after every loaded point, so relative times are stable.
NOW_MS = 1_400_000_000_000


@dataclasses.dataclass
class QueryHarness:
    storage: Storage
    config: Config
    uids: UidService
    ingest: IngestService
    engine: QueryEngine
    head: HeadSink | None = None

    @property
    def writer(self) -> Writer:
        return self.ingest.writer

    async def load(self, points: Iterable[tuple[str, Mapping[str, str], int, int | float]]) -> None:
        """Write ``(metric, tags, timestamp, value)`` points and wait until stored."""
        for metric, tags, timestamp, value in points:
            await add(self.ingest, DataPoint(metric, timestamp, value, make_tags(dict(tags))))
        await self.writer.flush()

    async def replay(self, steps: Iterable[tuple[str, Any]]) -> None:
        """A case's steps: ``("load", points)`` or ``("compact", ...)``."""
        for kind, points in steps:
            if kind == "load":
                await self.load(points)
            else:
                await self.compact()

    async def write_out(self) -> None:
        """Write the head's rows out (one compacted cell each), as the daemon does once
        their hour is closed."""
        if self.head is not None:
            await self.head.flush_all()

    async def compact(self) -> None:
        """Write the head's rows out, then compact every row of the data table, as the
        writer's compaction would."""
        await self.write_out()
        table = self.config.storage.data_table
        keys = []
        async with contextlib.aclosing(self.storage.scan(table, ScanSpec())) as rows:
            async for row in rows:
                keys.append(row.key)
        compactor = Compactor(
            self.storage, table, StatsRegistry(), fix_duplicates=self.config.storage.fix_duplicates
        )
        await compactor.compact(keys)

    async def query(
        self,
        params: Mapping[str, Sequence[str]] | None = None,
        body: Any = None,
        endpoint: str = "query",
    ) -> Any:
        """Run a GET-style (``params``) or POST (``body``) query; the parsed JSON answer.
        ``endpoint`` "gexp" asks /api/query/gexp (GET only)."""
        if endpoint == "gexp":
            assert params is not None
            result = await answer_gexp(self.engine, self.uids, params, now=NOW_MS)
            return orjson.loads(render_query_result(result, arrays="arrays" in params))
        if body is not None:
            query = parse_query_json(orjson.dumps(body), now=NOW_MS)
        else:
            assert params is not None
            query = parse_query_params(params, now=NOW_MS)
        result = await self.engine.execute(query)
        arrays = params is not None and "arrays" in params
        return orjson.loads(render_query_result(result, arrays=arrays))

    async def exp(self, body: Any) -> Any:
        """Ask /api/query/exp (a JSON body); the parsed JSON answer."""
        text = body if isinstance(body, str | bytes) else orjson.dumps(body)
        query = validate_exp_query(parse_exp_json(text), expression_variables)
        ts_query, positions = exp_ts_query(query)
        answer = await run_exp_query(self.engine, self.uids, query, ts_query, positions)
        return orjson.loads(render_exp_answer(query, answer))


@contextlib.asynccontextmanager
async def query_harness(
    storage: Storage,
    storage_config: StorageConfig,
    *,
    storage_options: Mapping[str, Any] | None = None,
    query_options: Mapping[str, Any] | None = None,
    rollups: RollupConfig | None = None,
) -> AsyncIterator[QueryHarness]:
    """A harness on ``storage`` with the test's isolated tables; ``rollups``: tsd computes
    and reads its own rollups of this configuration (tsd.rollups.compute)."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True),
        storage=dataclasses.replace(storage_config, **(storage_options or {})),
        query=QueryConfig(**(query_options or {})),
    )
    # Only the tables the write and query paths use: creating one on HBase takes a second.
    tables = opentsdb_tables(cfg.storage)
    for table in (cfg.storage.uid_table, cfg.storage.data_table):
        await storage.create_table(table, tables[table])
    computed = None
    if rollups is not None:
        for table in rollups.tables():
            if table != cfg.storage.data_table:
                await storage.create_table(table, rollup_families())
        layout = KeyLayout.from_storage_config(cfg.storage)
        computed = ComputedRollups.from_config(rollups, rollups.intervals, layout)
    uids = UidService(storage, cfg)
    registry = StatsRegistry()
    sink = None
    if isinstance(storage, EmbeddedStorage) and not cfg.storage.enable_appends:
        sink = build_head_sink(
            storage,
            cfg.storage,
            registry,
            wal=None,
            wall_clock=lambda: NOW_MS / 1000,
            rollups=computed,
        )
    writer = Writer(storage, cfg.storage, registry, head=sink)
    writer.start()
    engine = QueryEngine(
        storage,
        uids,
        cfg,
        wall_clock=lambda: NOW_MS / 1000,
        head=sink.head if sink is not None else None,
    )
    engine.rollups = rollups
    engine.computed = computed
    try:
        yield QueryHarness(
            storage, cfg, uids, IngestService(writer, uids, cfg.storage), engine, sink
        )
    finally:
        await writer.close()


@contextlib.asynccontextmanager
async def embedded_harness(
    directory: Path, *, remove: bool = True, **options: Any
) -> AsyncIterator[QueryHarness]:
    """A harness on a new embedded store in ``directory`` (tables tsdb and tsdb-uid),
    closed (and the directory removed, with ``remove``) afterwards; ``options`` as
    :func:`query_harness` takes them."""
    storage = EmbeddedStorage(directory)
    try:
        async with query_harness(
            storage, StorageConfig(data_table="tsdb", uid_table="tsdb-uid"), **options
        ) as harness:
            yield harness
    finally:
        await storage.close()
        if remove:
            shutil.rmtree(directory, ignore_errors=True)
