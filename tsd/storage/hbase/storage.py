"""HBaseStorage: the Storage interface over HBase's Thrift1 gateway.

Calls: ``mutate`` -> ``mutateRows`` (planned by :mod:`.batches` so that order
holds), ``get``/``get_many`` -> ``getRow(s)[WithColumns]``, ``scan`` ->
``scannerOpenWithScan`` + ``scannerGetList`` (scanner caching = ``batch_rows``,
optional batch size in cells) + ``scannerClose``, ``increment`` ->
``atomicIncrement``, ``check_and_put`` -> ``checkAndPut``, ``append`` ->
``append``, ``create_table`` -> ``createTable`` with column descriptors.
Connections come from :class:`~.pool.ConnectionPool`; every call runs under
:func:`~.errors.map_errors` and a deadline: ``tsd.storage.hbase.thrift.read_timeout``
for the calls of gets and scans, ``tsd.storage.hbase.thrift.timeout`` for the others, at
least ADMIN_TIMEOUT_S for table administration (docs/hbase.md "The call timeouts").

Row filters are applied here; only a pre-filter is pushed down. OpenTSDB matches its row-key
regex against the key's bytes read as ISO-8859-1 (one character per byte;
asynchbase's ``KeyRegexpFilter`` sets that charset). HBase's Thrift filter
language cannot: ``ParseFilter`` builds ``RegexStringComparator`` with the
default charset, UTF-8, so the server decodes each row key as UTF-8 before
matching. A UID byte >= 0x80 then either joins its neighbours into one
character (``c3 a9`` is one "é", shifting every position after it) or becomes
U+FFFD (so ``80`` and ``81`` look alike). Both ways the server's answer
differs from OpenTSDB's, with false negatives and false positives
(``tests/hbase/test_row_filter.py`` shows each against the live server). Row
keys hold binary UIDs, counters reach 0x80 within the first 128 names, and no
regex can be shown safe without knowing the keys; so the backend scans the
range (the planner already narrows it by metric and time) and applies
``RowFilter.matches`` (a full match over the raw bytes) to each row it reads.
``RowFilter.contains`` (the tag pairs a query pins) is pushed down as a UTF-8-safe
pre-filter (prefilter.py): it can let other keys through, never drop a matching one.

checkAndPut: an unset ``value`` asks "must not exist"; HBase also treats an
empty expected value as "missing or empty" (so does the embedded engine).

Deletes and timestamps: cells get the region server's clock and a delete
marker hides cells with the same or an older timestamp, so a put arriving in
the millisecond of a delete that covers it would vanish. After any delete,
writes wait until a later millisecond has begun (``_wait_after_delete``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from tsd.errors import StorageError, StorageUnavailable, TableNotFound
from tsd.log import STORAGE, get_logger
from tsd.storage.base import (
    Block,
    BlockWork,
    CellBlock,
    CheckAndPut,
    FamilySpec,
    Mutation,
    Put,
    ReadStats,
    Row,
    ScanSpec,
    Storage,
    check_distinct_cells,
)
from tsd.storage.hbase.batches import DeleteRow, MutateRows, column_name, plan_mutations
from tsd.storage.hbase.errors import TRANSPORT_ERRORS, hbase_message, map_errors
from tsd.storage.hbase.pool import (
    HBASE_THRIFT,
    ConnectionPool,
    Gateway,
    GatewayUnreachable,
    ThriftConnection,
    pipelined,
)
from tsd.storage.hbase.prefilter import contains_filter
from tsd.storage.hbase.rows import rows_call
from tsd.storage.settings import HBaseSettings

T = TypeVar("T")

log = get_logger(f"{STORAGE}.hbase")

#: How long after a delete completed a write must wait: more than one millisecond, so the
#: region server stamps the write in a later millisecond than the delete (see module doc).
DELETE_GUARD_S = 0.002
#: rows per getRows call
GET_MANY_CHUNK = 1000
#: rows asked of a scan's first scannerGetList (then sized by reply_rows)
FIRST_REPLY_ROWS = 32
#: bytes aimed at per scannerGetList reply
REPLY_BYTES = 512 * 1024
MIN_REPLY_ROWS = 16
#: the filter of a key-only pass: one cell per row, its value left out
KEYS_ONLY_FILTER = b"KeyOnlyFilter() AND FirstKeyOnlyFilter()"
#: how long scanners read to their end wait to be closed, so that one write closes the
#: scanners of a query (or of several) after its answer has gone, not while it is computed
CLOSE_DELAY_S = 0.02
#: checkAndPut calls written at once on one connection (check_and_put_many); the gateway
#: serves them one after the other, so a bound keeps one part from holding a connection long
CHECKS_PER_WRITE = 256
#: Table administration (createTable, disable/deleteTable) waits at least this long: the
#: gateway answers once the master has run the procedure (regions assigned and opened),
#: seconds to tens of seconds on a busy cluster, and no client waits on it; the data calls'
#: deadline (``tsd.storage.hbase.thrift.timeout``) is sized for queries and the spool
ADMIN_TIMEOUT_S = 60.0
#: bloom filter types HBase accepts in a column descriptor
BLOOM_TYPES = ("NONE", "ROW", "ROWCOL")

Call = Callable[[Any], Awaitable[T]]


class Scanner(NamedTuple):
    """A scanner's id on the gateway that opened it (ids are each gateway's own)."""

    id: int
    gateway: Gateway


def reply_rows(block: CellBlock, most: int) -> int:
    """Rows to ask of the next ``scannerGetList``: about ``REPLY_BYTES`` at the bytes per
    row of the last reply (a row of single cells is 10 times a compacted one), at most
    ``most``. Replies of a few hundred KiB to a few MiB keep the gateway's garbage small and
    let tsd decode one reply while the gateway builds the next."""
    if not block.wire_bytes or not len(block):
        return most
    per_row = block.wire_bytes / len(block)
    return min(most, max(MIN_REPLY_ROWS, int(REPLY_BYTES / per_row)))


def read_slots(pool_size: int) -> int:
    """Bulk reads allowed in flight: a quarter of the pool (at least one connection) is
    left to writes, so a big query cannot starve ingest."""
    return max(1, pool_size - max(1, pool_size // 4))


class HBaseStorage(Storage):
    """Tables in an HBase reached through its Thrift1 gateway (``settings``).

    ``scan_batch_cells`` caps the cells per scanner result (HBase's ``Scan.setBatch``);
    a row wider than that arrives in pieces, which are joined here. 0: no cap.
    """

    def __init__(self, settings: HBaseSettings, *, scan_batch_cells: int = 0) -> None:
        self._settings = settings
        self._timeout_s = settings.timeout_ms / 1000 if settings.timeout_ms > 0 else None
        self._read_timeout_s = (
            settings.read_timeout_ms / 1000 if settings.read_timeout_ms > 0 else None
        )
        self._scan_batch_cells = scan_batch_cells
        self._pool = ConnectionPool(
            self._open_connection,
            settings.pool_size,
            settings.max_idle_ms / 1000,
            gateways=settings.gateways or ((settings.host, settings.port),),
            is_gateway_failure=lambda exc: isinstance(exc, TRANSPORT_ERRORS),
        )
        self._last_delete_done = -math.inf
        #: bulk reads (scan batches, multi-gets) in flight at once, all queries together
        self._read_slots = asyncio.Semaphore(read_slots(settings.pool_size))
        #: scanners read to their end, to be closed by the background closer (per gateway
        #: and table)
        self._to_close: dict[tuple[Gateway, str], list[int]] = {}
        self._closer: asyncio.Task[None] | None = None

    @property
    def pool(self) -> ConnectionPool:
        return self._pool

    async def _open_connection(self, gateway: Gateway) -> ThriftConnection:
        s = self._settings
        return await ThriftConnection.open(
            gateway.host, gateway.port, s.transport, s.protocol, s.timeout_ms or None
        )

    # -- calls ----------------------------------------------------------------------------

    def _deadline(
        self, read: bool = False, admin: bool = False
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """A read's deadline (``tsd.storage.hbase.thrift.read_timeout``), table
        administration's (at least ADMIN_TIMEOUT_S), or every other call's
        (``tsd.storage.hbase.thrift.timeout``); none for 0."""
        timeout_s = self._read_timeout_s if read else self._timeout_s
        if timeout_s is None:
            return contextlib.nullcontext()
        return asyncio.timeout(max(timeout_s, ADMIN_TIMEOUT_S) if admin else timeout_s)

    async def _attempt(
        self,
        call: Call[T],
        idempotent: bool,
        gateway: Gateway | None,
        read: bool = False,
        admin: bool = False,
    ) -> T:
        """Run ``call(client)`` on a pooled connection (to ``gateway`` when given).

        A call that fails with the connection itself failing (reset, EOF) is tried once
        more on a fresh connection when repeating it is harmless: on another gateway when
        there are several (the pool has taken the failed one out), else on the same one
        when the connection had been kept idle (the server dropped it just as it was
        taken). A call whose connection could not even be opened was never sent: it goes
        to another gateway whatever it is. Timeouts are not repeated, nor increments,
        appends, checkAndPut and scanner reads once sent; a call pinned to a gateway (a
        scanner's) stays there, its repeat too.
        """
        several = len(self._pool.gateways) > 1 and gateway is None
        reused = False
        failed: Gateway | None = None
        try:
            async with self._pool.connection(gateway=gateway) as conn:
                failed = conn.gateway
                reused = conn.calls > 0
                async with self._deadline(read, admin):
                    return await call(conn.client)
        except TRANSPORT_ERRORS as exc:
            if isinstance(exc, GatewayUnreachable):
                failed = exc.gateway
                if not several and not (idempotent and reused):
                    raise
            elif isinstance(exc, TimeoutError) or not (idempotent and (reused or several)):
                raise
            log.info("hbase.call_retried", gateway=failed and failed.endpoint, error=repr(exc))
        async with (
            self._pool.connection(fresh=True, gateway=gateway, avoid=failed) as conn,
            self._deadline(read, admin),
        ):
            return await call(conn.client)

    async def _call(
        self,
        operation: str,
        table: str | None,
        call: Call[T],
        *,
        idempotent: bool,
        gateway: Gateway | None = None,
        read: bool = False,
        admin: bool = False,
    ) -> T:
        """``call`` on a pooled connection under its deadline (:meth:`_deadline`: ``read``
        for the calls of gets and scans, ``admin`` for table administration), its failures
        as :mod:`tsd.errors`."""
        try:
            with map_errors(operation, table):
                return await self._attempt(call, idempotent, gateway, read, admin)
        except StorageError as exc:
            # Some failures (mutateRows: "RetriesExhaustedWithDetailsException: Failed 1
            # action: <table>") do not say that the table is missing; ask.
            if (
                table is not None
                and type(exc) is StorageError
                and isinstance(exc.__cause__, HBASE_THRIFT.IOError)
                and table not in await self.list_tables()
            ):
                raise TableNotFound(table) from exc
            raise

    async def _wait_after_delete(self) -> None:
        wait = self._last_delete_done + DELETE_GUARD_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    # -- tables ---------------------------------------------------------------------------

    async def create_table(self, table: str, families: Sequence[FamilySpec]) -> bool:
        if not families:
            raise StorageError(f"table {table!r} needs at least one column family")
        descriptors = [_column_descriptor(spec) for spec in families]
        name = table.encode("ascii")

        async def create(client: Any) -> bool:
            try:
                await client.createTable(name, descriptors)
            except HBASE_THRIFT.AlreadyExists:
                return False
            except HBASE_THRIFT.IOError as exc:
                if "TableExistsException" in hbase_message(exc):
                    return False
                raise
            return True

        created = await self._call("createTable", None, create, idempotent=False, admin=True)
        if created:
            log.info("hbase.table_created", table=table, families=[f.name for f in families])
        return created

    async def list_tables(self) -> list[str]:
        names = await self._call(
            "getTableNames", None, lambda c: c.getTableNames(), idempotent=True
        )
        return sorted(name.decode("ascii") for name in names)

    async def drop_table(self, table: str) -> None:
        """Disable and delete ``table`` (HBase only: not part of the Storage interface)."""
        name = table.encode("ascii")

        async def drop(client: Any) -> None:
            if await client.isTableEnabled(name):
                await client.disableTable(name)
            await client.deleteTable(name)

        await self._call("deleteTable", table, drop, idempotent=False, admin=True)

    async def families(self, table: str) -> dict[str, Any]:
        """Family name -> Thrift ``ColumnDescriptor`` as HBase reports it (HBase only)."""
        name = table.encode("ascii")
        descriptors = await self._call(
            "getColumnDescriptors",
            table,
            lambda c: c.getColumnDescriptors(name),
            idempotent=True,
        )
        return {key.rstrip(b":").decode("ascii"): value for key, value in descriptors.items()}

    # -- writes ---------------------------------------------------------------------------

    async def mutate(self, table: str, mutations: Sequence[Mutation]) -> None:
        name = table.encode("ascii")
        for step in plan_mutations(mutations):
            if isinstance(step, DeleteRow):
                call: Call[None] = functools.partial(_delete_row, name, step.row)
                operation = "deleteAllRow"
            else:
                call = functools.partial(_mutate_rows, name, _batch_mutations(step))
                operation = "mutateRows"
                await self._wait_after_delete()
            try:
                await self._call(operation, table, call, idempotent=True)
            finally:
                if isinstance(step, DeleteRow) or step.has_deletes:
                    self._last_delete_done = time.monotonic()

    async def increment(
        self, table: str, row: bytes, family: str, qualifier: bytes, amount: int = 1
    ) -> int:
        name, column = table.encode("ascii"), column_name(family, qualifier)
        await self._wait_after_delete()
        value: int = await self._call(
            "atomicIncrement",
            table,
            lambda c: c.atomicIncrement(name, row, column, amount),
            idempotent=False,
        )
        return value

    async def check_and_put(
        self,
        table: str,
        row: bytes,
        family: str,
        qualifier: bytes,
        expected: bytes | None,
        put: Put,
    ) -> bool:
        if put.row != row:
            # Thrift1's checkAndPut takes only a column and value for the put: its row
            # is the checked row, always.
            raise StorageError("check_and_put: the put must be on the checked row")
        name, column = table.encode("ascii"), column_name(family, qualifier)
        mutation = HBASE_THRIFT.Mutation(
            column=column_name(put.family, put.qualifier), value=put.value
        )
        await self._wait_after_delete()
        # expected None: the value field stays unset, which HBase reads as "must not exist".
        applied: bool = await self._call(
            "checkAndPut",
            table,
            lambda c: c.checkAndPut(name, row, column, expected, mutation, {}),
            idempotent=False,
        )
        return applied

    async def check_and_put_many(self, table: str, checks: Sequence[CheckAndPut]) -> list[bool]:
        """Thrift1 has no batched checkAndPut: the checks are split over the pool's
        connections, at most CHECKS_PER_WRITE a connection at a time, each part written
        in one send and its replies read in order (:func:`~.pool.pipelined`). A batch of
        new UIDs costs a few writes instead of one call per name (the per-call writes and
        wake-ups were three quarters of tsd's CPU on a burst of new series)."""
        check_distinct_cells(checks)
        if not checks:
            return []
        name = table.encode("ascii")
        calls = []
        for check in checks:
            put = check.put  # its row is the checked row (CheckAndPut has no other)
            # expected None: the value field stays unset, which HBase reads as "must not
            # exist".
            calls.append(
                {
                    "tableName": name,
                    "row": put.row,
                    "column": column_name(check.family, check.qualifier),
                    "value": check.expected,
                    "mput": HBASE_THRIFT.Mutation(
                        column=column_name(put.family, put.qualifier), value=put.value
                    ),
                    "attributes": {},
                }
            )
        await self._wait_after_delete()
        size = min(CHECKS_PER_WRITE, -(-len(calls) // self._settings.pool_size))
        parts = [calls[start : start + size] for start in range(0, len(calls), size)]
        answers = await asyncio.gather(
            *(
                self._call(
                    "checkAndPut",
                    table,
                    functools.partial(_pipelined_checks, part),
                    idempotent=False,
                )
                for part in parts
            )
        )
        return [applied for answer in answers for applied in answer]

    async def append(
        self, table: str, row: bytes, family: str, qualifier: bytes, value: bytes
    ) -> None:
        append = HBASE_THRIFT.TAppend(
            table=table.encode("ascii"),
            row=row,
            columns=[column_name(family, qualifier)],
            values=[value],
        )
        await self._wait_after_delete()
        await self._call("append", table, lambda c: c.append(append), idempotent=False)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, table: str, row: bytes, families: Sequence[str] = ()) -> Row | None:
        block = await self.get_blocks(table, [row], families)
        return block[0] if len(block) else None

    async def get_many(
        self, table: str, rows: Sequence[bytes], families: Sequence[str] = ()
    ) -> list[Row]:
        found = {row.key: row for row in await self.get_blocks(table, rows, families)}
        return [found[key] for key in rows if key in found]

    async def get_blocks(
        self,
        table: str,
        rows: Sequence[bytes],
        families: Sequence[str] = (),
        stats: ReadStats | None = None,
    ) -> CellBlock:
        """``getRows`` (``getRowsWithColumns`` for some families), GET_MANY_CHUNK rows per
        call; the gateway leaves out rows without cells and keeps the order asked."""
        name = table.encode("ascii")
        keys = [key for key in rows if key]  # HBase has no row with an empty key, and refuses one
        columns = [family.encode("ascii") for family in families]
        blocks = []
        for start in range(0, len(keys), GET_MANY_CHUNK):
            chunk = keys[start : start + GET_MANY_CHUNK]

            async def get_rows(client: Any, chunk: list[bytes] = chunk) -> CellBlock:
                if columns:
                    return await rows_call(
                        client,
                        "getRowsWithColumns",
                        stats,
                        tableName=name,
                        rows=chunk,
                        columns=columns,
                        attributes={},
                    )
                return await rows_call(
                    client, "getRows", stats, tableName=name, rows=chunk, attributes={}
                )

            async with self._read_slots:
                blocks.append(
                    await self._call("getRows", table, get_rows, idempotent=True, read=True)
                )
        block = CellBlock.concat(blocks)
        empty = np.flatnonzero(block.counts == 0)
        if len(empty):
            block = block.take(np.flatnonzero(block.counts > 0))
        return block

    async def scan(self, table: str, spec: ScanSpec) -> AsyncGenerator[Row, None]:
        """Rows in key order; the scanner is closed however the iteration ends."""
        if spec.limit is not None and spec.limit <= 0:
            return
        if not self._scan_batch_cells:
            async with contextlib.aclosing(self._scanner_blocks(table, spec, None)) as blocks:
                async for block in blocks:
                    for row in block:
                        yield row
            return
        batch_rows = max(1, spec.batch_rows)
        scanner = await self._open_scanner(table, spec)
        try:
            async with contextlib.aclosing(
                self._scan_rows(table, scanner, batch_rows, spec)
            ) as rows:
                async for row in rows:
                    yield row
        finally:
            self._close_later(table, scanner)

    async def scan_blocks(
        self,
        table: str,
        spec: ScanSpec,
        stats: ReadStats | None = None,
        work: BlockWork | None = None,
    ) -> AsyncGenerator[Block, None]:
        """``scannerGetList`` replies read straight into CellBlocks (tsd/storage/hbase/rows.py),
        the row filter applied to each block's keys. ``work`` is left to the reader: the
        replies are read on the event loop, where it would only delay the next read."""
        if self._scan_batch_cells:  # rows may come in pieces: joined by scan()
            async with contextlib.aclosing(super().scan_blocks(table, spec, stats)) as blocks:
                async for block in blocks:
                    yield block
            return
        async with contextlib.aclosing(self._scanner_blocks(table, spec, stats)) as blocks:
            async for block in blocks:
                yield block

    async def scan_keys(
        self, table: str, spec: ScanSpec, stats: ReadStats | None = None
    ) -> AsyncGenerator[list[bytes], None]:
        """A key-only pass: ``KeyOnlyFilter() AND FirstKeyOnlyFilter()`` makes the region
        server send one value-less cell per row; the row filter is applied here."""
        counted = ReadStats()
        try:
            blocks = self._scanner_blocks(table, spec, counted, KEYS_ONLY_FILTER)
            async with contextlib.aclosing(blocks) as keyed:
                async for block in keyed:
                    yield block.keys
        finally:
            if stats is not None:
                stats.key_rows += counted.rows
                stats.wire_bytes += counted.wire_bytes
                stats.decode_s += counted.decode_s
                stats.calls += counted.calls

    async def last_key(self, table: str, start: bytes, stop: bytes) -> bytes | None:
        """A reversed key-only scan from ``stop`` down to ``start``: its first row below
        ``stop`` (a reversed scan starts at its start row inclusive)."""
        name = table.encode("ascii")
        tscan = HBASE_THRIFT.TScan(
            startRow=stop,
            stopRow=start or None,
            caching=2,
            filterString=KEYS_ONLY_FILTER,
            reversed=True,
        )
        scanner = await self._scanner_open(table, name, tscan)
        try:
            block = await self._call(
                "scannerGetList",
                table,
                lambda c: rows_call(c, "scannerGetList", id=scanner.id, nbRows=2),
                idempotent=False,
                gateway=scanner.gateway,
                read=True,
            )
        finally:
            self._close_later(table, scanner)
        below = [key for key in block.keys if start <= key and (not stop or key < stop)]
        return max(below) if below else None

    async def _scanner_open(self, table: str, name: bytes, tscan: Any) -> Scanner:
        """``scannerOpenWithScan`` on a gateway chosen now: the scanner's reads and its close
        go to the same gateway. When that gateway fails, a second try on another. An open
        whose pooled connection the gateway had just dropped is repeated there on a fresh
        one (harmless: at worst a scanner nobody reads, dropped at the end of its lease), so
        that a live gateway's idle-connection drop does not send it to a dead one."""
        gateway = self._pool.choose()
        attempts = 2 if len(self._pool.gateways) > 1 else 1
        for attempt in range(attempts):
            try:
                scanner: int = await self._call(
                    "scannerOpenWithScan",
                    table,
                    lambda c: c.scannerOpenWithScan(name, tscan, {}),
                    idempotent=True,
                    gateway=gateway,
                    read=True,
                )
                return Scanner(scanner, gateway)
            except StorageUnavailable:
                if attempt + 1 == attempts:
                    raise
                gateway = self._pool.choose(avoid=gateway)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open_scanner(
        self, table: str, spec: ScanSpec, filter_string: bytes | None = None
    ) -> Scanner:
        name = table.encode("ascii")
        if spec.row_filter is not None and spec.row_filter.contains:
            pushed = contains_filter(spec.row_filter.contains)
            if pushed is not None:
                filter_string = (
                    pushed if filter_string is None else filter_string + b" AND " + pushed
                )
        tscan = HBASE_THRIFT.TScan(
            startRow=spec.start,
            stopRow=spec.stop or None,
            columns=[family.encode("ascii") for family in spec.families] or None,
            caching=max(1, spec.batch_rows),
            filterString=filter_string,
            batchSize=self._scan_batch_cells or None,
            sortColumns=True,
        )
        return await self._scanner_open(table, name, tscan)

    async def _scanner_blocks(
        self,
        table: str,
        spec: ScanSpec,
        stats: ReadStats | None,
        filter_string: bytes | None = None,
    ) -> AsyncGenerator[CellBlock, None]:
        if spec.limit is not None and spec.limit <= 0:
            return
        batch_rows = max(1, spec.batch_rows)
        remaining = spec.limit
        asked = min(batch_rows, FIRST_REPLY_ROWS)
        scanner = await self._open_scanner(table, spec, filter_string)
        try:
            while True:
                async with self._read_slots:
                    block = await self._call(
                        "scannerGetList",
                        table,
                        functools.partial(_get_list, stats, scanner.id, asked),
                        idempotent=False,
                        gateway=scanner.gateway,
                        read=True,
                    )
                if not len(block):
                    return
                # fewer rows than asked: the scanner is exhausted (no empty call to learn it)
                exhausted = len(block) < asked
                asked = reply_rows(block, batch_rows)
                if spec.row_filter is not None:
                    matches = spec.row_filter.matches
                    block = block.take([i for i, k in enumerate(block.keys) if matches(k)])
                if remaining is not None and len(block) >= remaining:
                    yield block.take(range(remaining))
                    return
                if remaining is not None:
                    remaining -= len(block)
                if len(block):
                    yield block
                if exhausted:
                    return
        finally:
            # off the reader's path: the rows are all read, closing is the server's cleanup
            self._close_later(table, scanner)

    async def _scan_rows(
        self, table: str, scanner: Scanner, batch_rows: int, spec: ScanSpec
    ) -> AsyncGenerator[Row, None]:
        # A row wider than scan_batch_cells comes in consecutive pieces with the same key:
        # the last row of each batch is held back until the next batch shows it complete.
        remaining = spec.limit
        held: Row | None = None
        while True:
            block = await self._call(
                "scannerGetList",
                table,
                lambda c: rows_call(c, "scannerGetList", id=scanner.id, nbRows=batch_rows),
                idempotent=False,
                gateway=scanner.gateway,
                read=True,
            )
            pieces = list(block)
            complete: list[Row] = []
            for piece in pieces:
                if held is not None and held.key == piece.key:
                    held = Row(held.key, held.cells + piece.cells)
                    continue
                if held is not None:
                    complete.append(held)
                held = piece
            if not pieces and held is not None:
                complete.append(held)
                held = None
            for row in complete:
                if spec.row_filter is not None and not spec.row_filter.matches(row.key):
                    continue
                yield row
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if not pieces:
                return

    def _close_later(self, table: str, scanner: Scanner) -> None:
        """Close ``scanner`` in the background, with the others of its gateway in the next
        CLOSE_DELAY_S, in one write (:func:`~.pool.pipelined`)."""
        self._to_close.setdefault((scanner.gateway, table), []).append(scanner.id)
        if self._closer is None:
            self._closer = asyncio.ensure_future(self._close_pending())

    async def _close_pending(self) -> None:
        try:
            await asyncio.sleep(CLOSE_DELAY_S)
            while self._to_close:
                pending, self._to_close = self._to_close, {}
                for (gateway, table), scanners in pending.items():
                    await self._close_scanners(table, gateway, scanners)
        finally:
            self._closer = None

    async def _close_scanners(self, table: str, gateway: Gateway, scanners: list[int]) -> None:
        # Best effort: a scanner left open expires on the server (its lease), and the
        # scan's own outcome (a result, an error, a cancellation) is what the caller needed.
        calls = [{"id": scanner} for scanner in scanners]
        try:
            answers = await self._call(
                "scannerClose",
                table,
                lambda c: pipelined(c, "scannerClose", calls),
                idempotent=False,
                gateway=gateway,
            )
        except StorageError as exc:
            log.info("hbase.scanner_close_failed", table=table, error=str(exc))
            return
        for answer in answers:
            if isinstance(answer, Exception):
                log.info("hbase.scanner_close_failed", table=table, error=hbase_message(answer))

    async def close(self) -> None:
        closer = self._closer
        if closer is not None:
            await asyncio.wait([closer])
        self._pool.close()


# -- Thrift structures -------------------------------------------------------------------------


def _column_descriptor(spec: FamilySpec) -> Any:
    bloom = spec.bloom_filter.upper()
    if bloom not in BLOOM_TYPES:
        raise StorageError(f"bloom filter must be one of {BLOOM_TYPES}, not {spec.bloom_filter!r}")
    # Thrift1's defaults are 3 versions and no block cache: every field is set here.
    return HBASE_THRIFT.ColumnDescriptor(
        name=spec.name.encode("ascii") + b":",
        maxVersions=spec.max_versions,
        compression=spec.compression.upper(),
        inMemory=False,
        bloomFilterType=bloom,
        blockCacheEnabled=spec.block_cache,
        timeToLive=spec.ttl_s if spec.ttl_s else -1,
    )


def _batch_mutations(step: MutateRows) -> list[Any]:
    # Positional arguments (isDelete, column, value, writeToWAL): the generated
    # constructor takes them faster than keywords, and a step of puts alone (the write
    # path's) skips the test per cell.
    mutation, batch = HBASE_THRIFT.Mutation, HBASE_THRIFT.BatchMutation
    if not step.has_deletes:
        return [
            batch(row, [mutation(False, column, value, True) for column, value in ops.items()])
            for row, ops in step.rows.items()
        ]
    return [
        batch(
            row,
            [
                mutation(True, column, None, True)
                if value is None
                else mutation(False, column, value, True)
                for column, value in ops.items()
            ],
        )
        for row, ops in step.rows.items()
    ]


async def _pipelined_checks(calls: list[dict[str, Any]], client: Any) -> list[bool]:
    """The checkAndPut ``calls`` in one write; the first exception HBase answered for one
    of them raises for the part (its applied checks stay applied, as when a batch fails
    part way: the UID batch then reads the forward rows again)."""
    answers = await pipelined(client, "checkAndPut", calls)
    for answer in answers:
        if isinstance(answer, Exception):
            raise answer
    return [bool(answer) for answer in answers]


async def _mutate_rows(table: bytes, batches: list[Any], client: Any) -> None:
    await client.mutateRows(table, batches, {})


async def _get_list(stats: ReadStats | None, scanner: int, rows: int, client: Any) -> CellBlock:
    return await rows_call(client, "scannerGetList", stats, id=scanner, nbRows=rows)


async def _delete_row(table: bytes, row: bytes, client: Any) -> None:
    await client.deleteAllRow(table, row, {})
