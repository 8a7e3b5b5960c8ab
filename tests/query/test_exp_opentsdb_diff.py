"""The /api/query/exp cases asked of OpenTSDB 2.4.1 itself, on the same HBase data.

tsd's write path loads the data sets of tests/query/exp_cases/*.txt into one set of HBase
tables, compacts the rows, then the real OpenTSDB starts on them. Every ``exp`` goes to
both; the whole answers are compared as parsed JSON (outputs with ids, aliases, dps,
dpsMeta, meta, and the ``query`` echo); errors by status and message (OpenTSDB's
messages that print a Java object's identity hash are compared up to it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.hbase_harness import HBaseServer
from tests.query.test_exp_cases import ALL_EXP_CASES, ExpCase
from tests.query.test_opentsdb_diff import (  # noqa: F401 (tables: a fixture)
    loaded_harness,
    opentsdb_and_client,
    tables,
)
from tests.query.tsdb_harness import QueryHarness
from tsd.config import StorageConfig
from tsd.errors import TsdError

pytestmark = pytest.mark.hbase

COMPARED = [c for c in ALL_EXP_CASES if not c.tsd_only]
IDENTITY_HASH = ", dps=[Lnet.opentsdb.query.expression.ExpressionDataPoint;@"


@pytest.fixture
async def exp_loaded(tables: StorageConfig) -> AsyncIterator[QueryHarness]:  # noqa: F811
    async with loaded_harness(tables, COMPARED) as harness:
        yield harness


async def test_exp_cases_agree_with_opentsdb(
    hbase_server: HBaseServer,
    tables: StorageConfig,  # noqa: F811
    exp_loaded: QueryHarness,
    tmp_path: Path,
) -> None:
    async with opentsdb_and_client(hbase_server, tables, tmp_path) as (opentsdb, http):
        answers = [
            (case, await _ours(exp_loaded, case), await _theirs(http, opentsdb.url, case))
            for case in COMPARED
        ]
    disagreements = [
        f"{case.id} {case.body}\n  tsd:      {ours}\n  OpenTSDB: {theirs}"
        for case, ours, theirs in answers
        if ours != theirs
    ]
    answered = sum(
        isinstance(theirs, dict) and any(o["dps"] for o in theirs["outputs"])
        for _, _, theirs in answers
    )
    assert len(COMPARED) > 50
    assert not disagreements, "\n".join(disagreements)
    assert answered > 30


def _error(status: int, message: str) -> tuple[str, int, str]:
    return ("error", status, message.split(IDENTITY_HASH)[0])


async def _ours(harness: QueryHarness, case: ExpCase) -> Any:
    try:
        return await harness.exp(case.body)
    except TsdError as exc:
        return _error(exc.status, exc.message)


async def _theirs(http: aiohttp.ClientSession, url: str, case: ExpCase) -> Any:
    """OpenTSDB's answer, asked twice and the second kept (cold UID caches, as in
    test_opentsdb_diff)."""
    await _ask(http, url, case)
    return await _ask(http, url, case)


async def _ask(http: aiohttp.ClientSession, url: str, case: ExpCase) -> Any:
    try:
        async with http.post(f"{url}/api/query/exp", data=case.body.encode()) as reply:
            body = orjson.loads(await reply.read())
    except (TimeoutError, aiohttp.ClientError):
        return ("no reply",)
    if reply.status != 200:
        return _error(reply.status, body["error"]["message"])
    return body
