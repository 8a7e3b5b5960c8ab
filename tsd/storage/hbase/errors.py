"""Turning Thrift, socket and HBase failures into :mod:`tsd.errors`, at every call.

Nothing from thriftpy2, aiohappybase or the socket layer rises above the HBase
backend (httpcore's ``map_exceptions`` pattern):

====================================================  =====================
raised inside a call                                  raised to the caller
====================================================  =====================
TimeoutError (our per-call deadline)                  StorageTimeout
TTransportException, OSError (refused, reset, EOF)    StorageUnavailable
(a gateway that cannot be reached: its cause's words)
Hbase.IOError naming TableNotFoundException           TableNotFound
Hbase.IOError, IllegalArgument, any other TException  StorageError
malformed reply (EOFError, struct.error, ...)         StorageError
====================================================  =====================

HBase's messages arrive as Java stack traces; only their first line is kept.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from tsd.errors import StorageError, StorageTimeout, StorageUnavailable, TableNotFound
from tsd.storage.hbase.pool import HBASE_THRIFT, GatewayUnreachable

#: Hbase.thrift's own exceptions (each has a ``message`` field, bytes here)
HBASE_EXCEPTIONS = (HBASE_THRIFT.IOError, HBASE_THRIFT.IllegalArgument, HBASE_THRIFT.AlreadyExists)

#: failures of the connection itself, as opposed to HBase answering with an error
TRANSPORT_ERRORS = (TTransportException, OSError, EOFError)


def hbase_message(exc: BaseException) -> str:
    """The first line of the message HBase (or thriftpy2) put in ``exc``."""
    message = getattr(exc, "message", None)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    text = str(message) if message else repr(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def is_table_not_found(exc: BaseException) -> bool:
    return isinstance(exc, HBASE_THRIFT.IOError) and "TableNotFoundException" in hbase_message(exc)


@contextmanager
def map_errors(operation: str, table: str | None = None) -> Iterator[None]:
    """Re-raise what the block raised as a :mod:`tsd.errors` exception."""
    where = f"{operation} on {table!r}" if table else operation
    try:
        yield
    except TimeoutError:
        raise StorageTimeout(f"HBase {where} timed out") from None
    except GatewayUnreachable as exc:  # the cause's own words, as when it is raised alone
        cause = exc.cause
        text = hbase_message(cause) if isinstance(cause, TTransportException) else repr(cause)
        raise StorageUnavailable(f"HBase {where}: {text}") from exc
    except TTransportException as exc:
        raise StorageUnavailable(f"HBase {where}: {hbase_message(exc)}") from exc
    except (OSError, EOFError) as exc:
        raise StorageUnavailable(f"HBase {where}: {exc!r}") from exc
    except HBASE_EXCEPTIONS as exc:
        if table is not None and is_table_not_found(exc):
            raise TableNotFound(table) from exc
        raise StorageError(f"HBase {where}: {hbase_message(exc)}") from exc
    except (TException, struct.error, UnicodeDecodeError) as exc:
        raise StorageError(f"HBase {where}: {hbase_message(exc)}") from exc
