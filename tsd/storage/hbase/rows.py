"""Thrift1 calls that return rows (``scannerGetList``, ``getRows``, ...), read straight into a
:class:`~tsd.storage.base.CellBlock`; and the bool replies of pipelined calls (pool.py).

thriftpy2 decodes a reply field by field into objects: three per cell (TColumn, TCell, the
bytes), about 8 us of CPU per cell with its asyncio protocol and 1.2 us with its compiled one
(cybin). tsd writes the call as usual (cybin), then reads the reply's bytes off the socket
itself and hands them, chunk by chunk as they arrive, to ``_rows.parse_rows`` (C,
``_rows.c``): about 0.03 us per cell, cells laid end to end, no object per cell. Rows are
parsed as soon as they are complete in the buffer, so a 13 MB reply is never re-read.

Used with the binary protocol (buffered or framed transport) when the extension is built;
otherwise (compact protocol, no compiler at install) the reply is read by thriftpy2 and the
rows converted, with the same result (tests/hbase/test_rows_reply.py compares both).

What a reply looks like (TBinaryProtocol, strict): ``80 01 00 <type>``, the method name
(i32 length + bytes), the sequence id (i32), then the result struct: field 0 (the list of
TRowResult) or an exception field, then STOP. The client never checks sequence ids (one call
per connection at a time, see pool.py), nor does this.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
import time
from typing import Any

import numpy as np
from thriftpy2.thrift import TApplicationException, TMessageType, TType
from thriftpy2.transport import TTransportException

import tsd.native as native
from tsd.storage.base import Cell, CellBlock, ReadStats, Row

_C: Any = native.load("tsd.storage.hbase._rows")

_BINARY: Any = importlib.import_module("thriftpy2.protocol.binary")
_MEMORY: Any = importlib.import_module("thriftpy2.transport.memory")
_BUFFERED: Any = importlib.import_module("thriftpy2.contrib.aio.transport.buffered")
_FRAMED: Any = importlib.import_module("thriftpy2.contrib.aio.transport.framed")
_AIO_BINARY: Any = importlib.import_module("thriftpy2.contrib.aio.protocol.binary")

#: the compiled reader is there
COMPILED = _C is not None
#: bytes asked of the socket per read
READ_SIZE = 1 << 20
_VERSION_MASK = 0xFFFF0000
_VERSION_1 = 0x80010000
_I32 = struct.Struct(">i")
#: a strict binary reply's first four bytes: version 1, message type REPLY
_REPLY_BEGIN = struct.pack(">I", _VERSION_1 | TMessageType.REPLY)
#: a result struct's field 0 as a bool: its type and id
_BOOL_FIELD_0 = bytes((TType.BOOL, 0, 0))


def row_from_result(result: Any) -> Row:
    """A TRowResult object as a Row, cells sorted by (family, qualifier)."""
    if result.sortedColumns is not None:
        # Already in HBase's order: family bytes, then qualifier bytes.
        pairs = [(column.columnName, column.cell.value) for column in result.sortedColumns]
    else:
        pairs = [(name, cell.value) for name, cell in (result.columns or {}).items()]
    cells = []
    for name, value in pairs:
        family, _, qualifier = name.partition(b":")
        cells.append(Cell(family.decode("ascii"), qualifier, value))
    if result.sortedColumns is None:
        cells.sort(key=lambda cell: (cell.family, cell.qualifier))
    return Row(result.row, tuple(cells))


def block_from_results(results: Any) -> CellBlock:
    """TRowResult objects (thriftpy2's decoding) as a CellBlock."""
    return CellBlock.from_rows([row_from_result(r) for r in results or ()])


class _Chunks:
    """The reply's bytes as they arrive, from the transport's own buffer first."""

    def __init__(self, trans: Any) -> None:
        self._trans = trans
        self.received = 0

    async def next(self) -> bytes:
        trans = self._trans
        if isinstance(trans, _FRAMED.TAsyncFramedTransport):
            chunk = trans._rbuf.read()
            if not chunk:
                await trans.read_frame()
                chunk = trans._rbuf.read()
        else:
            chunk = trans._rbuf.read()
            if not chunk:
                # The socket's stream directly: TAsyncSocket.read wraps each read in
                # asyncio.wait_for (a task per read, a quarter of the CPU of a pipelined
                # checkAndPut, whose replies arrive one by one); the call's deadline is
                # the storage's own (HBaseStorage._deadline).
                chunk = await trans._trans.reader.read(READ_SIZE)
        if not chunk:
            raise TTransportException(
                type=TTransportException.END_OF_FILE, message="reply ended early"
            )
        self.received += len(chunk)
        return bytes(chunk)


def compiled_reading(client: Any) -> bool:
    """Whether ``client``'s replies can be read by the compiled reader."""
    proto = client._iprot
    return (
        COMPILED
        and isinstance(proto, _AIO_BINARY.TAsyncBinaryProtocol)
        and isinstance(
            proto.trans, _BUFFERED.TAsyncBufferedTransport | _FRAMED.TAsyncFramedTransport
        )
    )


async def rows_call(
    client: Any, api: str, stats: ReadStats | None = None, **kwargs: Any
) -> CellBlock:
    """Call ``api`` (a method returning ``list<TRowResult>``) and read its rows as a CellBlock.

    HBase's exceptions (IOError, IllegalArgument) and TApplicationException are raised as
    thriftpy2 raises them.
    """
    if not compiled_reading(client):
        started = time.thread_time()
        block = block_from_results(await getattr(client, api)(**kwargs))
        if stats is not None:
            stats.add(block, time.thread_time() - started)
        return block
    await client._send(api, **kwargs)
    reader = _ReplyReader(_Chunks(client._iprot.trans))
    block = await reader.read(getattr(client._service, api + "_result"))
    if stats is not None:
        stats.add(block, reader.decode_s)
    return block


async def scalar_replies(client: Any, api: str, count: int) -> list[Any]:
    """The next ``count`` replies of ``api`` (a call returning a bool or nothing), written
    before in one send (pool.pipelined): each its value, or the exception object HBase
    answered. thriftpy2's asyncio protocol reads a reply field by field, a coroutine each,
    which was most of the client's cost of a pipelined checkAndPut; here the plain bool
    replies already received are taken a buffer at a time."""
    reader = _ReplyReader(_Chunks(client._iprot.trans))
    result_cls = getattr(client._service, api + "_result")
    plain = _REPLY_BEGIN + _I32.pack(len(api)) + api.encode("ascii")
    answers: list[Any] = []
    while len(answers) < count:
        if not reader.plain_bools(plain, count - len(answers), answers):
            answers.append(await reader.scalar(result_cls))  # or wait for more bytes
    return answers


class _ReplyReader:
    def __init__(self, chunks: _Chunks) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self._pos = 0
        self.decode_s = 0.0

    async def _need(self, size: int) -> None:
        while len(self._buf) - self._pos < size:
            self._buf += await self._chunks.next()

    async def _i32(self) -> int:
        await self._need(4)
        (value,) = _I32.unpack_from(self._buf, self._pos)
        self._pos += 4
        return int(value)

    async def _byte(self) -> int:
        await self._need(1)
        value = self._buf[self._pos]
        self._pos += 1
        return value

    async def _whole(self, ttype: int) -> int:
        """The end of one value of ``ttype`` starting at the current position (reads more
        until it is all in the buffer)."""
        while True:
            end = int(_C.skip_value(self._buf, self._pos, ttype))
            if end >= 0:
                return end
            self._buf += await self._chunks.next()

    async def _message_begin(self) -> None:
        """Past the message header; a TApplicationException (the gateway refusing the call
        itself) raises."""
        first = await self._i32()
        if first < 0:
            if first & _VERSION_MASK != _VERSION_1:
                raise TTransportException(message=f"bad Thrift message version {first:#x}")
            mtype = first & 0xFF
            name_length = await self._i32()
            await self._need(name_length)
            self._pos += name_length
        else:  # old, non-strict: the name, then the type byte
            await self._need(first)
            self._pos += first
            mtype = await self._byte()
        await self._i32()  # sequence id
        if mtype == TMessageType.EXCEPTION:
            raise self._thriftpy2_struct(TApplicationException(), await self._whole(TType.STRUCT))

    def plain_bools(self, begin: bytes, most: int, into: list[Any]) -> int:
        """Take up to ``most`` whole replies already in the buffer that are a message header
        starting with ``begin`` and a bool result and nothing else (what a checkAndPut
        answers), appending their values to ``into``; how many were taken. Without
        awaiting per field: the replies of a pipelined part are read a buffer at a time."""
        buf, pos = self._buf, self._pos
        seq_end = len(begin) + 4
        size = seq_end + len(_BOOL_FIELD_0) + 2  # + the value and STOP
        taken = 0
        while (
            taken < most
            and len(buf) - pos >= size
            and buf.startswith(begin, pos)
            and buf.startswith(_BOOL_FIELD_0, pos + seq_end)
            and buf[pos + size - 1] == TType.STOP
        ):
            into.append(buf[pos + size - 2] != 0)
            pos += size
            taken += 1
        self._pos = pos
        return taken

    async def scalar(self, result_cls: Any) -> Any:
        """One reply of a call returning a bool or nothing: True/False, None for a void
        call, or the exception object HBase answered (IOError, IllegalArgument), returned
        rather than raised. A bool is read here; anything else by thriftpy2."""
        await self._message_begin()
        struct_start = self._pos
        ftype = await self._byte()
        if ftype == TType.BOOL:
            await self._need(3)
            if self._buf.startswith(_BOOL_FIELD_0[1:], self._pos):  # field 0: the result
                value = self._buf[self._pos + 2] != 0
                self._pos += 3
                self._pos = await self._whole_rest()
                return value
        self._pos = struct_start
        result = self._thriftpy2_struct(result_cls(), await self._whole(TType.STRUCT))
        for value in vars(result).values():
            if value is not None:
                return value
        if 0 in result_cls.thrift_spec:  # a result was due
            raise TApplicationException(TApplicationException.MISSING_RESULT)
        return None

    async def read(self, result_cls: Any) -> CellBlock:
        await self._message_begin()
        struct_start = self._pos
        ftype = await self._byte()
        if ftype == TType.STOP:
            raise TApplicationException(TApplicationException.MISSING_RESULT)
        await self._need(2)
        fid = int.from_bytes(self._buf[self._pos : self._pos + 2], "big", signed=True)
        self._pos += 2
        if fid != 0 or ftype != TType.LIST:
            # an exception field (IOError, IllegalArgument): thriftpy2 reads the struct
            self._pos = struct_start
            result = self._thriftpy2_struct(result_cls(), await self._whole(TType.STRUCT))
            for name, value in vars(result).items():
                if name != "success" and value is not None:
                    raise value
            raise TApplicationException(TApplicationException.MISSING_RESULT)
        elem = await self._byte()
        count = await self._i32()
        if count and elem != TType.STRUCT:
            raise TTransportException(message=f"list of type {elem} where rows were expected")
        blocks = await self._rows(count)
        # the rest of the result struct: nothing but STOP in practice
        self._pos = await self._whole_rest()
        return dataclasses.replace(CellBlock.concat(blocks), wire_bytes=self._chunks.received)

    async def _rows(self, count: int) -> list[CellBlock]:
        blocks = []
        left = count
        while left:
            started = time.thread_time()
            parsed = _C.parse_rows(self._buf, self._pos, left)
            end, rows, keys, counts, families, fam, qlen, vlen, quals, values = parsed
            self.decode_s += time.thread_time() - started
            if rows:
                blocks.append(
                    CellBlock(
                        keys,
                        np.frombuffer(counts, np.int64),
                        [f.decode("ascii") for f in families],
                        np.frombuffer(fam, np.uint8),
                        np.frombuffer(qlen, np.int64),
                        np.frombuffer(vlen, np.int64),
                        quals,
                        values,
                    )
                )
                left -= rows
                del self._buf[:end]
                self._pos = 0
            if left:
                self._buf += await self._chunks.next()
        return blocks

    async def _whole_rest(self) -> int:
        """Skip the result struct's remaining fields up to its STOP; the position after."""
        while True:
            ftype = await self._byte()
            if ftype == TType.STOP:
                return self._pos
            await self._need(2)
            self._pos += 2
            self._pos = await self._whole(ftype)

    def _thriftpy2_struct(self, obj: Any, end: int) -> Any:
        proto = _BINARY.TBinaryProtocol(
            _MEMORY.TMemoryBuffer(bytes(self._buf[self._pos : end])), decode_response=False
        )
        proto.read_struct(obj)
        self._pos = end
        return obj
