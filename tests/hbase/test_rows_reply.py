"""The compiled reader of row replies (tsd/storage/hbase/_rows.c via rows.py) against
thriftpy2's pure-Python decoding (what aiohappybase does), on random replies fed in random
chunks: the same rows, cells, families and bytes. No server needed."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import random
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from tsd.storage.base import Cell, CellBlock, ReadStats, Row
from tsd.storage.hbase import rows as rows_module
from tsd.storage.hbase.pool import HBASE_THRIFT, PROTOCOLS
from tsd.storage.hbase.rows import _Chunks, _ReplyReader, block_from_results
from tsd.storage.hbase.storage import MIN_REPLY_ROWS, REPLY_BYTES, reply_rows

H = HBASE_THRIFT
BINARY: Any = importlib.import_module("thriftpy2.protocol.binary")
MEMORY: Any = importlib.import_module("thriftpy2.transport.memory")
pytestmark = pytest.mark.skipif(not rows_module.COMPILED, reason="_rows extension not built")


def _bytes(rng: random.Random, longest: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, rng.randrange(longest)])))


def random_results(rng: random.Random, rows: int, sorted_columns: bool) -> list[Any]:
    results = []
    for _ in range(rows):
        columns: dict[bytes, bytes] = {}
        for _ in range(rng.choice([0, 1, 3, rng.randrange(300)])):
            family = rng.choice([b"t", b"t", b"id", b"name", b""])
            columns[family + b":" + _bytes(rng, 12)] = _bytes(rng, 40)
        key = _bytes(rng, 30) or b"\x00"
        if sorted_columns:
            sorted_cols = [
                H.TColumn(
                    columnName=name, cell=H.TCell(value=value, timestamp=rng.randrange(1 << 40))
                )
                for name, value in sorted(columns.items())
            ]
            results.append(H.TRowResult(row=key, sortedColumns=sorted_cols))
        else:
            cells = {name: H.TCell(value=value, timestamp=1) for name, value in columns.items()}
            results.append(H.TRowResult(row=key, columns=cells))
    return results


def reply_bytes(api: str, result: Any, mtype: int = 2) -> bytes:
    """A whole reply message as the gateway writes it (TBinaryProtocol, strict)."""
    out = MEMORY.TMemoryBuffer()
    proto = BINARY.TBinaryProtocol(out)
    proto.write_message_begin(api, mtype, 7)
    proto.write_struct(result)
    proto.write_message_end()
    return bytes(out.getvalue())


class FakeChunks(_Chunks):
    """The reply in chunks of random sizes (as a socket delivers it)."""

    def __init__(self, data: bytes, rng: random.Random) -> None:
        super().__init__(None)
        self._data = data
        self._rng = rng

    async def next(self) -> bytes:
        if not self._data:
            raise EOFError("reply ended early")
        size = self._rng.choice([1, 3, 64, 4096, len(self._data)])
        chunk, self._data = self._data[:size], self._data[size:]
        self.received += len(chunk)
        return chunk


def read(data: bytes, api: str, rng: random.Random) -> CellBlock:
    result_cls = getattr(H.Hbase, api + "_result")
    return asyncio.run(_ReplyReader(FakeChunks(data, rng)).read(result_cls))


def same(block: CellBlock, expected: CellBlock) -> None:
    assert block.keys == expected.keys
    assert list(block) == list(expected)  # families, qualifiers, values, order
    assert block.counts.tolist() == expected.counts.tolist()
    assert block.qualifiers == expected.qualifiers
    assert block.values == expected.values


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sorted_columns", [True, False], ids=["sortedColumns", "columns"])
def test_compiled_reader_matches_thriftpy2(seed: int, sorted_columns: bool) -> None:
    rng = random.Random(seed)
    results = random_results(rng, rng.choice([0, 1, 5, 40]), sorted_columns)
    data = reply_bytes("scannerGetList", H.Hbase.scannerGetList_result(success=results))
    block = read(data, "scannerGetList", rng)
    # thriftpy2's own reading of the same bytes, as the backend did before
    proto = BINARY.TBinaryProtocol(MEMORY.TMemoryBuffer(data), decode_response=False)
    proto.read_message_begin()
    decoded = H.Hbase.scannerGetList_result()
    proto.read_struct(decoded)
    same(block, block_from_results(decoded.success))
    assert block.wire_bytes == len(data)


def test_every_byte_value_and_empty_values() -> None:
    columns = [
        H.TColumn(columnName=b"t:" + bytes([b, 255 - b]), cell=H.TCell(value=bytes([b]) * (b % 9)))
        for b in range(256)
    ]
    results = [H.TRowResult(row=bytes(range(256)), sortedColumns=columns)]
    data = reply_bytes("getRows", H.Hbase.getRows_result(success=results))
    block = read(data, "getRows", random.Random(1))
    same(block, block_from_results(results))
    assert block.cell_count == 256


def test_map_columns_are_sorted_as_unsigned_bytes() -> None:
    cells = {b"t:\x80": H.TCell(value=b"a"), b"t:\x01": H.TCell(value=b"b")}
    data = reply_bytes(
        "getRows", H.Hbase.getRows_result(success=[H.TRowResult(row=b"r", columns=cells)])
    )
    block = read(data, "getRows", random.Random(2))
    assert [c.qualifier for c in block[0].cells] == [b"\x01", b"\x80"]


def test_hbase_exceptions_are_raised() -> None:
    error = H.IOError(message=b"org.apache.hadoop.hbase.TableNotFoundException: nope")
    data = reply_bytes("getRows", H.Hbase.getRows_result(io=error))
    with pytest.raises(H.IOError) as raised:
        read(data, "getRows", random.Random(3))
    assert raised.value.message == error.message


def test_application_exception_is_raised() -> None:
    data = reply_bytes("getRows", TApplicationException(1, "unknown method"), mtype=3)
    with pytest.raises(TApplicationException):
        read(data, "getRows", random.Random(4))


def test_a_truncated_reply_is_an_error() -> None:
    results = random_results(random.Random(5), 5, True)
    data = reply_bytes("scannerGetList", H.Hbase.scannerGetList_result(success=results))
    with pytest.raises(EOFError):
        read(data[:-3], "scannerGetList", random.Random(5))


def test_take_and_concat_keep_cells() -> None:
    rng = random.Random(6)
    block = block_from_results(random_results(rng, 30, True))
    picked = [3, 0, 29, 7]
    assert list(block.take(picked)) == [block[i] for i in picked]
    assert list(CellBlock.concat([block.take([1, 2]), block.take([5])])) == [
        block[1],
        block[2],
        block[5],
    ]
    stats = ReadStats()
    stats.add(block, 0.0)
    assert stats.cells == block.cell_count


def test_protocols_read_by_the_compiled_reader() -> None:
    # the binary protocol tsd configures is the one the compiled reader understands
    assert "binary" in PROTOCOLS


def test_scan_replies_are_sized_by_the_bytes_of_the_last() -> None:
    """About REPLY_BYTES per scannerGetList, never more rows than the scan's batch."""

    def block(rows: int, wire_bytes: int) -> CellBlock:
        rows_ = [Row(b"k%05d" % i, (Cell("t", b"q", b"v"),)) for i in range(rows)]
        return dataclasses.replace(CellBlock.from_rows(rows_), wire_bytes=wire_bytes)

    wide = reply_rows(block(100, 100 * 13_000), 1024)  # rows of 360 single cells
    narrow = reply_rows(block(100, 100 * 1_700), 1024)  # compacted rows
    assert wide == REPLY_BYTES // 13_000
    assert narrow == REPLY_BYTES // 1_700
    assert reply_rows(block(10, 10 * 10_000_000), 1024) == MIN_REPLY_ROWS
    assert reply_rows(block(10, 10 * 10_000_000), 7) == 7
    assert reply_rows(block(100, 100 * 30), 10_000) == 10_000  # keys only: capped
    assert reply_rows(block(3, 0), 64) == 64  # size unknown (not read by the C reader)
