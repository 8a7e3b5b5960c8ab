"""The backend's binary protocol writes calls with thriftpy2's compiled encoder (cybin):
the bytes must be those of the pure-Python encoder aiohappybase would use, for every
call the backend makes (no server needed)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tsd.storage.hbase.pool import (
    CYBIN,
    HBASE_THRIFT,
    PROTOCOLS,
    CompiledWriteBinaryProtocolFactory,
)

H = HBASE_THRIFT


def _mutation(**fields: Any) -> Any:
    return H.Mutation(**fields)


CALLS = [
    pytest.param(
        H.Hbase.mutateRows_args(
            tableName=b"tsdb",
            rowBatches=[
                H.BatchMutation(
                    row=bytes(range(256)),
                    mutations=[
                        _mutation(column=b"t:\x00\x10", value=b"\x00\xff\x80"),
                        _mutation(isDelete=True, column=b"t"),
                        _mutation(column=b"t:", value=b""),
                    ],
                )
            ]
            * 3,
            attributes={},
        ),
        id="mutateRows",
    ),
    pytest.param(
        H.Hbase.scannerOpenWithScan_args(
            tableName=b"tsdb",
            scan=H.TScan(startRow=b"\x00\x00\x01", columns=[b"t"], caching=128, sortColumns=True),
            attributes={b"k": b"v"},
        ),
        id="scannerOpenWithScan",
    ),
    pytest.param(
        H.Hbase.checkAndPut_args(
            tableName=b"tsdb-uid",
            row=b"\x00\x00\x01",
            column=b"name:metrics",
            value=None,
            mput=_mutation(column=b"name:metrics", value=b"sys.cpu"),
            attributes={},
        ),
        id="checkAndPut_unset_value",
    ),
    pytest.param(
        H.Hbase.atomicIncrement_args(
            tableName=b"tsdb-uid", row=b"\x00", column=b"id:metrics", value=-(2**63)
        ),
        id="atomicIncrement",
    ),
    pytest.param(
        H.Hbase.getRowsWithColumns_args(
            tableName=b"tsdb", rows=[b"a", b"\xff"], columns=[b"t"], attributes={}
        ),
        id="getRowsWithColumns",
    ),
    pytest.param(
        H.Hbase.createTable_args(
            tableName=b"tsdb",
            columnFamilies=[
                H.ColumnDescriptor(
                    name=b"t:",
                    maxVersions=1,
                    compression="NONE",
                    inMemory=False,
                    bloomFilterType="ROW",
                    blockCacheEnabled=True,
                    timeToLive=-1,
                )
            ],
        ),
        id="createTable",
    ),
    pytest.param(
        H.Hbase.append_args(
            append=H.TAppend(table=b"tsdb", row=b"r", columns=[b"t:\x05\x00\x00"], values=[b"x"])
        ),
        id="append",
    ),
]


#: thriftpy2's pure-Python encoder and memory transport (untyped: as Any)
BINARY: Any = importlib.import_module("thriftpy2.protocol.binary")
MEMORY: Any = importlib.import_module("thriftpy2.transport.memory")


def _pure(args: Any) -> bytes:
    buffer = MEMORY.TMemoryBuffer()
    BINARY.TBinaryProtocol(buffer).write_struct(args)
    value: bytes = buffer.getvalue()
    return value


class _Sink:
    """What the protocol writes into (the asyncio transports expose write())."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


@pytest.mark.skipif(CYBIN is None, reason="thriftpy2 built without its Cython extension")
@pytest.mark.parametrize("args", CALLS)
def test_compiled_encoder_writes_the_pure_python_bytes(args: Any) -> None:
    sink = _Sink()
    CompiledWriteBinaryProtocolFactory().get_protocol(sink).write_struct(args)
    assert bytes(sink.data) == _pure(args)


@pytest.mark.skipif(CYBIN is None, reason="thriftpy2 built without its Cython extension")
def test_binary_protocol_is_the_compiled_one() -> None:
    assert isinstance(PROTOCOLS["binary"], CompiledWriteBinaryProtocolFactory)
