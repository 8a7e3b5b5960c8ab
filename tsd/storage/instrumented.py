"""A Storage that counts the calls, failures and latency of the one it wraps.

The daemon wraps its backend in one (``storage.calls``, ``storage.errors`` and the
``storage.latency`` histogram, each tagged ``op=<method>``, and ``storage.check_and_puts``,
one per checked cell) so that ``/metrics`` and
``/api/stats`` show what the store is asked and how long it takes, whatever the backend.
A scan is timed from its first to its last row (or until the caller leaves it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

from tsd.stats import Counter, Histogram, StatsRegistry
from tsd.storage.base import (
    Block,
    BlockWork,
    CellBlock,
    CellColumn,
    CheckAndPut,
    Delete,
    FamilySpec,
    Mutation,
    Put,
    ReadStats,
    Row,
    ScanSpec,
    Storage,
)

T = TypeVar("T")

#: The operations counted, each its own ``op`` tag value.
OPERATIONS = (
    "get",
    "get_many",
    "scan",
    "mutate",
    "put",
    "delete",
    "increment",
    "check_and_put",
    "append",
    "create_table",
    "list_tables",
)


class _Op:
    __slots__ = ("calls", "errors", "latency")

    def __init__(self, registry: StatsRegistry, name: str) -> None:
        self.calls: Counter = registry.counter("storage.calls", op=name)
        self.errors: Counter = registry.counter("storage.errors", op=name)
        self.latency: Histogram = registry.histogram("storage.latency", op=name)


class InstrumentedStorage(Storage):
    """Forwards every call to ``inner``, counting it."""

    def __init__(self, inner: Storage, registry: StatsRegistry) -> None:
        self.inner = inner
        self._ops = {name: _Op(registry, name) for name in OPERATIONS}
        #: check-and-puts one by one: a check_and_put_many is one call of op=check_and_put,
        #: but HBase has no batched checkAndPut, so its gateway serves one call per check
        self.checks: Counter = registry.counter("storage.check_and_puts")
        #: calls started and not finished (scans until their caller leaves them)
        self.in_flight = 0

    def max_row_length(self, family: str) -> int:
        return self.inner.max_row_length(family)

    @property
    def calls(self) -> int:
        return sum(op.calls.value for op in self._ops.values())

    @property
    def errors(self) -> int:
        return sum(op.errors.value for op in self._ops.values())

    async def _timed(self, name: str, call: Any) -> Any:
        op = self._ops[name]
        op.calls.value += 1
        self.in_flight += 1
        started = time.perf_counter()
        try:
            return await call
        except Exception:  # a cancelled call is not a storage failure
            op.errors.value += 1
            raise
        finally:
            self.in_flight -= 1
            op.latency.observe(time.perf_counter() - started)

    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        result: bool = await self._timed("create_table", self.inner.create_table(table, families))
        return result

    async def list_tables(self) -> list[str]:
        result: list[str] = await self._timed("list_tables", self.inner.list_tables())
        return result

    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        await self._timed("mutate", self.inner.mutate(table, mutations))

    async def put(self, table: str, puts: Sequence[Put]) -> None:
        await self._timed("put", self.inner.put(table, puts))

    async def delete(self, table: str, deletes: Sequence[Delete]) -> None:
        await self._timed("delete", self.inner.delete(table, deletes))

    async def get(self, table: str, row: bytes, families: Sequence[str] = ()) -> Row | None:
        result: Row | None = await self._timed("get", self.inner.get(table, row, families))
        return result

    async def get_many(
        self, table: str, rows: Sequence[bytes], families: Sequence[str] = ()
    ) -> list[Row]:
        result: list[Row] = await self._timed(
            "get_many", self.inner.get_many(table, rows, families)
        )
        return result

    def scan(self, table: str, spec: ScanSpec) -> AsyncGenerator[Row, None]:
        return self._timed_scan(self.inner.scan(table, spec))

    # The bulk reads of the query path are forwarded too: the base class's fallbacks would
    # go through scan() and get_many() row by row, without the backend's compiled reply
    # reader, key-only scans or read slots (docs/hbase.md). Counted as scans and get_many.

    def scan_blocks(
        self,
        table: str,
        spec: ScanSpec,
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        return self._timed_scan(self.inner.scan_blocks(table, spec, stats, work))

    def scan_keys(
        self, table: str, spec: ScanSpec, stats: ReadStats | None = None
    ) -> AsyncGenerator[list[bytes], None]:
        return self._timed_scan(self.inner.scan_keys(table, spec, stats))

    def parallel_reads(self) -> int:
        return self.inner.parallel_reads()

    def reads_ranges_at_once(self) -> bool:
        return self.inner.reads_ranges_at_once()

    def scan_ranges(
        self,
        table: str,
        specs: Sequence[ScanSpec],
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        return self._timed_scan(self.inner.scan_ranges(table, specs, stats, work))

    async def get_blocks(
        self,
        table: str,
        rows: Sequence[bytes],
        families: Sequence[str] = (),
        stats: ReadStats | None = None,
    ) -> CellBlock:
        result: CellBlock = await self._timed(
            "get_many", self.inner.get_blocks(table, rows, families, stats)
        )
        return result

    async def holds_rows(self, table: str, start: bytes, stop: bytes) -> bool:
        return await self.inner.holds_rows(table, start, stop)

    async def last_key(self, table: str, start: bytes, stop: bytes) -> bytes | None:
        result: bytes | None = await self._timed("scan", self.inner.last_key(table, start, stop))
        return result

    async def delete_range(self, table: str, start: bytes, stop: bytes) -> int:
        result: int = await self._timed("delete", self.inner.delete_range(table, start, stop))
        return result

    async def check_and_put_many(self, table: str, checks: Sequence[CheckAndPut]) -> list[bool]:
        self.checks.value += len(checks)
        result: list[bool] = await self._timed(
            "check_and_put", self.inner.check_and_put_many(table, checks)
        )
        return result

    async def get_column(
        self, table: str, family: str, qualifier: bytes, rows: Sequence[bytes]
    ) -> list[bytes | None]:
        result: list[bytes | None] = await self._timed(
            "get_many", self.inner.get_column(table, family, qualifier, rows)
        )
        return result

    async def put_if_absent_column(self, table: str, column: CellColumn) -> list[bool]:
        self.checks.value += len(column.rows)
        result: list[bool] = await self._timed(
            "check_and_put", self.inner.put_if_absent_column(table, column)
        )
        return result

    async def put_column(self, table: str, column: CellColumn) -> None:
        await self._timed("put", self.inner.put_column(table, column))

    async def _timed_scan(self, items: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
        op = self._ops["scan"]
        op.calls.value += 1
        self.in_flight += 1
        started = time.perf_counter()
        try:
            async for item in items:
                yield item
        except Exception:  # a caller leaving early or cancelled is not a failure
            op.errors.value += 1
            raise
        finally:
            self.in_flight -= 1
            await items.aclose()
            op.latency.observe(time.perf_counter() - started)

    async def increment(
        self, table: str, row: bytes, family: str, qualifier: bytes, amount: int = 1
    ) -> int:
        result: int = await self._timed(
            "increment", self.inner.increment(table, row, family, qualifier, amount)
        )
        return result

    async def check_and_put(
        self,
        table: str,
        row: bytes,
        family: str,
        qualifier: bytes,
        expected: bytes | None,
        put: Put,
    ) -> bool:
        self.checks.value += 1
        result: bool = await self._timed(
            "check_and_put",
            self.inner.check_and_put(table, row, family, qualifier, expected, put),
        )
        return result

    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        await self._timed("append", self.inner.append(table, row, family, qualifier, value))

    async def close(self) -> None:
        await self.inner.close()
