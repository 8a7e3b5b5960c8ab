"""Tables for the contract suite, named through the backend's isolating prefix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest

from tsd.storage.base import FamilySpec, Storage

MakeTable = Callable[..., Awaitable[str]]


@pytest.fixture
def make_table(storage: Storage, table_prefix: str) -> MakeTable:
    """``await make_table(name, families)`` creates an isolated table and returns its name."""

    async def make(name: str = "t", families: Sequence[str] = ("f", "g")) -> str:
        table = f"{table_prefix}{name}"
        await storage.create_table(table, [FamilySpec(family) for family in families])
        return table

    return make


@pytest.fixture
async def table(make_table: MakeTable) -> str:
    """A fresh table with families ``f`` and ``g``."""
    return await make_table()
