"""Why row-key regexes are not pushed down to HBase through Thrift1 (see storage.py's docstring).

OpenTSDB matches its row-key regex with one character per byte (ISO-8859-1).
The Thrift filter language's ``regexstring:`` comparator decodes row keys as
UTF-8. These tests ask the live server directly and show both kinds of wrong
answer; then they show the backend's own filtering right for every byte value.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.schema import hbase_settings
from tsd.storage.base import FamilySpec, Put, RowFilter, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.pool import HBASE_THRIFT, ThriftConnection

pytestmark = pytest.mark.hbase

#: "r" + U+00E9 in UTF-8 (two bytes), and two invalid UTF-8 bytes
KEYS = [b"r\xc3\xa9", b"r\x80", b"r\x81"]


@pytest.fixture
async def filter_table(hbase_server: HBaseServer) -> AsyncIterator[tuple[HBaseStorage, str]]:
    prefix = unique_prefix()
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    table = f"{prefix}filter"
    await storage.create_table(table, [FamilySpec("f")])
    keys = KEYS + [bytes([b, c]) for b in range(256) for c in (0x00, 0x41, 0x80, 0xC3, 0xFF)]
    await storage.put(table, [Put(key, "f", b"q", b"v") for key in keys])
    yield storage, table
    await storage.close()
    if not hbase_server.owned:
        await drop_tables(hbase_server, prefix)


async def server_side(server: HBaseServer, table: str, regex: bytes) -> list[bytes]:
    """Row keys the server's RowFilter(=, 'regexstring:...') keeps."""
    conn = await ThriftConnection.open(
        server.thrift_host, server.thrift_port, "buffered", "binary", 5000
    )
    try:
        quoted = regex.replace(b"'", b"''")
        scan = HBASE_THRIFT.TScan(
            startRow=b"r", stopRow=b"s", filterString=b"RowFilter(=, 'regexstring:" + quoted + b"')"
        )
        scanner = await conn.client.scannerOpenWithScan(table.encode(), scan, {})
        rows = await conn.client.scannerGetList(scanner, 1000)
        await conn.client.scannerClose(scanner)
        return [row.row for row in rows if row.row in KEYS]
    finally:
        conn.close()


def latin1_answer(regex: bytes) -> list[bytes]:
    """What OpenTSDB's filter keeps: a byte per character."""
    return [key for key in KEYS if re.search(regex, key, re.DOTALL)]


async def test_server_regex_misses_keys_with_multibyte_utf8(filter_table, hbase_server) -> None:
    _, table = filter_table
    regex = rb"^r..$"  # three bytes: r and any two
    assert latin1_answer(regex) == [b"r\xc3\xa9"]
    # The server sees "ré", two characters, and drops it: a false negative.
    assert await server_side(hbase_server, table, regex) == []
    # ... and keeps it for a two-character regex, which two bytes cannot match.
    assert latin1_answer(rb"^r.$") == [b"r\x80", b"r\x81"]
    assert await server_side(hbase_server, table, rb"^r.$") == sorted(KEYS)


async def test_server_regex_confuses_invalid_utf8_bytes(filter_table, hbase_server) -> None:
    _, table = filter_table
    regex = b"^r\x80$"
    assert latin1_answer(regex) == [b"r\x80"]
    # Both 0x80 and 0x81 decode to U+FFFD, and so does the regex's 0x80: a false positive.
    assert await server_side(hbase_server, table, regex) == [b"r\x80", b"r\x81"]


@pytest.mark.parametrize(
    "regex",
    [
        pytest.param(rb"r..", id="any_two_bytes"),
        pytest.param(b"r\x80", id="byte_80"),
        pytest.param(rb"[\x80-\xff].", id="high_first_byte"),
        pytest.param(rb".\xc3", id="second_byte_c3"),
        pytest.param(rb"\xff.", id="ff_then_any"),
    ],
)
async def test_backend_filter_matches_opentsdb_for_every_byte(filter_table, regex) -> None:
    storage, table = filter_table
    everything = [row.key async for row in storage.scan(table, ScanSpec())]
    expected = [key for key in everything if re.fullmatch(regex, key, re.DOTALL)]
    spec = ScanSpec(row_filter=RowFilter(regex), batch_rows=100)
    assert [row.key async for row in storage.scan(table, spec)] == expected
    assert expected  # the regex selects something
