"""Why row-key regexes are not pushed down to HBase through Thrift1 (see storage.py's docstring).

OpenTSDB matches its row-key regex with one character per byte (ISO-8859-1).
The Thrift filter language's ``regexstring:`` comparator decodes row keys as
UTF-8. These tests ask the live server directly and show both kinds of wrong
answer; then they show the backend's own filtering right for every byte value.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator

import pytest

from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.storage.base import FamilySpec, Put, ReadStats, RowFilter, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.pool import HBASE_THRIFT, ThriftConnection
from tsd.storage_setup import hbase_settings

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


@pytest.fixture
async def prefilter_table(hbase_server: HBaseServer) -> AsyncIterator[tuple[HBaseStorage, str]]:
    """Keys like data row keys: 3 bytes, 4 of time, then two tag pairs of 3 + 3 bytes, with
    every byte value in the pairs (high bytes next to each other and next to ASCII)."""
    prefix = unique_prefix()
    storage = HBaseStorage(hbase_settings(hbase_server.storage_config()))
    table = f"{prefix}prefilter"
    await storage.create_table(table, [FamilySpec("t")])
    rng = random.Random(16)
    keys = set()
    for _ in range(3000):
        pairs = bytes(
            rng.choice([rng.randrange(256), rng.randrange(0x80, 0x100), 0]) for _ in range(12)
        )
        keys.add(b"\x00\x00\x01" + bytes(rng.randrange(256) for _ in range(4)) + pairs)
    await storage.put(table, [Put(key, "t", b"q", b"v") for key in keys])
    yield storage, table
    await storage.close()
    if not hbase_server.owned:
        await drop_tables(hbase_server, prefix)


async def test_pushed_down_pairs_never_drop_a_matching_key(prefilter_table) -> None:
    """RowFilter.contains as HBase applies it (prefilter.py): every key containing a pinned
    pair comes back, whatever its bytes; the exact regex then keeps exactly those."""
    storage, table = prefilter_table
    everything = [row.key async for row in storage.scan(table, ScanSpec())]
    rng = random.Random(7)
    for _ in range(12):
        # pairs taken from real keys at tag positions (7 and 13), some of them twice
        chosen = [k[7 + 6 * rng.randrange(2) :][:6] for k in rng.sample(everything, 3)]
        regex = b"(?:.{6})*".join(
            [b".{7}", b"(?:" + b"|".join(re.escape(p) for p in chosen) + b")", b""]
        )
        expected = [k for k in everything if re.fullmatch(regex, k, re.DOTALL)]
        spec = ScanSpec(row_filter=RowFilter(regex, (tuple(chosen),)), batch_rows=500)
        assert [row.key async for row in storage.scan(table, spec)] == expected
        received = ReadStats()
        batches = storage.scan_keys(table, spec, received)
        assert [key async for batch in batches for key in batch] == expected
        assert expected
        # the server did filter (loosely where pairs hold bytes >= 0x80)
        assert received.key_rows < len(everything)
