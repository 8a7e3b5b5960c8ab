"""HookedStorage: the real store with async hooks run before chosen calls.

Tests use it to force an interleaving (another TSD assigns the name just before our forward
check-and-put) or to inject a storage failure; every call still reaches the real store.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from tsd.storage.base import CheckAndPut, FamilySpec, Mutation, Put, Row, ScanSpec, Storage

Hook = Callable[..., Awaitable[None]]


class HookedStorage(Storage):
    """Forwards every call to ``inner``, first awaiting ``hooks[method](*args)`` if set."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.hooks: dict[str, Hook] = {}
        self.calls: dict[str, int] = {}

    async def _before(self, method: str, *args: Any) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        hook = self.hooks.get(method)
        if hook is not None:
            await hook(*args)

    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        await self._before("create_table", table, families)
        return await self.inner.create_table(table, families)

    async def list_tables(self) -> list[str]:
        await self._before("list_tables")
        return await self.inner.list_tables()

    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        await self._before("mutate", table, mutations)
        await self.inner.mutate(table, mutations)

    async def get(self, table: str, row: bytes, families: Sequence[str] = ()) -> Row | None:
        await self._before("get", table, row, families)
        return await self.inner.get(table, row, families)

    async def scan(self, table: str, spec: ScanSpec) -> AsyncGenerator[Row, None]:
        await self._before("scan", table, spec)
        async for row in self.inner.scan(table, spec):
            yield row

    async def increment(
        self, table: str, row: bytes, family: str, qualifier: bytes, amount: int = 1
    ) -> int:
        await self._before("increment", table, row, family, qualifier, amount)
        return await self.inner.increment(table, row, family, qualifier, amount)

    async def check_and_put(
        self,
        table: str,
        row: bytes,
        family: str,
        qualifier: bytes,
        expected: bytes | None,
        put: Put,
    ) -> bool:
        await self._before("check_and_put", table, row, family, qualifier, expected, put)
        return await self.inner.check_and_put(table, row, family, qualifier, expected, put)

    async def check_and_put_many(self, table: str, checks: Sequence[CheckAndPut]) -> list[bool]:
        await self._before("check_and_put_many", table, checks)
        return await self.inner.check_and_put_many(table, checks)

    async def get_many(
        self, table: str, rows: Sequence[bytes], families: Sequence[str] = ()
    ) -> list[Row]:
        await self._before("get_many", table, rows, families)
        return await self.inner.get_many(table, rows, families)

    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        await self._before("append", table, row, family, qualifier, value)
        await self.inner.append(table, row, family, qualifier, value)

    async def close(self) -> None:
        await self.inner.close()
