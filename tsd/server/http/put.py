"""POST /api/put (PutDataPointRpc): parse (protocol.put_json), ingest, answer (put_reply).

Bodies may be gzip or deflate (aiohttp inflates them), chunked or not, of any or no
Content-Type, up to ``tsd.http.request.max_body`` bytes once inflated (OpenTSDB refuses
anything over about 8 KiB: "Chunked request not supported"). With ``sync`` the reply
waits until storage holds every accepted point (``sync_timeout`` ms at most); without it
a point counts as a success once buffered, as OpenTSDB counts it once queued.

Both modes are one loop over one :class:`~tsd.write.ingest.IngestSession`: the points of
series seen before (:func:`tsd.protocol.put_json.parse_put_body_known`, keyed in the
ingest service's ``put`` ref cache) are appended by ref in bulk, every other valid point
on its own (its UIDs resolved one at a time, in body order, as OpenTSDB assigns them).
A body over :data:`OFFLOAD_BODY_BYTES` is parsed in a worker thread, in pieces
(:func:`~tsd.protocol.put_json.parse_put_body_pieces`), so the loop keeps serving other
clients meanwhile and memory stays a multiple of the body's size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import overload

from aiohttp import web

from tsd.data_points import DataPoint
from tsd.protocol.names import NameRules
from tsd.protocol.put_json import KnownPut, parse_put_body_known, parse_put_body_pieces
from tsd.protocol.put_reply import (
    STORAGE_EXCEPTION,
    UNKNOWN_METRIC,
    WRITE_TIMEDOUT,
    DatapointEcho,
    PutError,
    PutFlags,
    datapoint_echo,
    parse_put_flags,
    put_response,
    put_timeout_response,
)
from tsd.server.http.context import SERVICES
from tsd.server.http.errors import json_response
from tsd.server.http.routing import ApiPath, Route, method_not_allowed, query_params
from tsd.write.ingest import (
    IngestSession,
    RefCache,
    RefusalKind,
    Refused,
    SeriesRef,
    SyncOutcome,
)

#: UID lookups one request runs at once. 1: new names get their UIDs in the order of the
#: body, as OpenTSDB hands them out, so that a body always assigns the same UIDs.
MISS_WINDOW = 1
#: the name of the ingest service's cache of /api/put keys
PUT_REFS = "put"
#: Bodies larger than this are parsed in a worker thread. A 64 MiB body took the loop
#: for seconds; a 1,000-point body (about 100 KB) is parsed faster than a thread hop.
OFFLOAD_BODY_BYTES = 1 << 20
#: Points appended one by one between two turns given back to the loop.
YIELD_EVERY = 1024

Piece = KnownPut[SeriesRef]


async def parse_body(body: bytes, refs: RefCache, rules: NameRules) -> list[Piece]:
    """The body's pieces: parsed on the loop when small, else in a worker thread (which
    only reads ``refs``: dict lookups, safe beside the loop's writes)."""
    if len(body) <= OFFLOAD_BODY_BYTES:
        return [parse_put_body_known(body, refs, rules)]
    return await asyncio.to_thread(parse_put_body_pieces, body, refs, rules)


async def handle_put(request: web.Request, path: ApiPath) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed(request.method)
    services = request.app[SERVICES]
    services.registry.counter("rpc.received", type="put").inc()
    flags = parse_put_flags(query_params(request))
    refs = services.ingest.ref_cache(PUT_REFS)
    pieces = await parse_body(await request.read(), refs, services.rules)
    put = _Put(pieces)
    # While storage refuses writes (disk full), a put is answered once its points are
    # stored or refused, as with sync: nothing is acknowledged that may be lost.
    wait = flags.sync or services.ingest.writer.storage_refusal is not None
    session: IngestSession[int] = services.ingest.session(
        cache=refs,
        window=MISS_WINDOW,
        on_refused=put.refused,
        track_acks=wait,
        protocol="http",
    )
    for piece in pieces:
        await _append_piece(session, piece, put, refs)
    await session.settle()
    if session.counters is not None:  # tsd's ingest.errors also counts invalid points
        session.counters[1].inc(put.invalid)
    points = sum(piece.count for piece in pieces)
    queued = points - len(put.failed)
    if not wait:
        if session.refusal is not None:  # storage began refusing (HBase's spool full)
            refused_writes = session.refused_writes
            status, reply = put_response(
                flags,
                points=points,
                queued=queued + refused_writes,
                good_writes=queued,
                failed_writes=refused_writes,
                errors=put.errors(),
                refusal=session.refusal,
            )
        else:
            status, reply = put_response(flags, points=points, queued=queued, errors=put.errors())
        return json_response(reply, status)
    outcome = await session.stored(flags.sync_timeout_ms / 1000 or None)
    errors = put.errors()
    timeouts = 0
    for index, refused in outcome.unstored:
        if refused is None:
            timeouts += 1
            if flags.details:
                errors.append(PutError(WRITE_TIMEDOUT, put.echo(index)))
        else:
            errors.append(put.error(index, None, refused))
    return _sync_reply(flags, points, queued, outcome, timeouts, errors)


async def _append_piece(
    session: IngestSession[int], piece: Piece, put: _Put, refs: RefCache
) -> None:
    """Every point of one piece, in body order: runs of known series by ref, the others
    one by one (their keys remembered once their series is resolved)."""
    points, offset, raw_keys = piece.points, piece.offset, piece.raw_keys
    done = 0
    for turn, (index, at, result, key) in enumerate(piece.others):
        if turn % YIELD_EVERY == YIELD_EVERY - 1:
            # Appends of resolved series never suspend: without this, a body of a million
            # points of series new to the parser holds the loop for seconds.
            await asyncio.sleep(0)
        if at > done:
            await session.append_all(points[done:at], _RunIndexes(piece, done, at))
            done = at
        if not isinstance(result, DataPoint):
            put.failed.append((offset + index, result))
            put.invalid += 1
            continue
        keys: list[Hashable] = [] if key is None else [key]
        if raw_keys is not None:
            keys.append(raw_keys[index])
        await session.wait_room()
        await session.append(result, offset + index, keys)
    if done < len(points):
        rest = points if done == 0 else points[done:]
        await session.append_all(rest, _RunIndexes(piece, done, len(points)))
    if raw_keys is not None:  # known under one key only: learn the other
        for (ref, _, _), index in zip(points, piece.point_indexes(), strict=True):
            refs.remember(raw_keys[index], ref)


@dataclass(slots=True)
class _Put:
    """One request's failed points, by body index, and their echoes."""

    pieces: list[Piece]
    failed: list[tuple[int, PutError]] = field(default_factory=list)
    #: points the body gave that failed validation (the rest of ``failed`` was refused)
    invalid: int = 0

    def refused(self, index: int | None, point: DataPoint | None, refused: Refused) -> None:
        assert index is not None  # every append of this handler carries its body index
        self.failed.append((index, self.error(index, point, refused)))

    def error(self, index: int, point: DataPoint | None, refused: Refused) -> PutError:
        echo = datapoint_echo(point) if point is not None else self.echo(index)
        if refused.kind is RefusalKind.UNKNOWN_METRIC:
            return PutError(UNKNOWN_METRIC, echo)
        if refused.kind is RefusalKind.ILLEGAL_ARGUMENT:  # as a validation error's message
            return PutError(refused.message, echo)
        return PutError(STORAGE_EXCEPTION.format(message=refused.message), echo)

    def echo(self, index: int) -> DatapointEcho | None:
        for piece in self.pieces:
            if piece.offset <= index < piece.offset + piece.count:
                point = piece.results()[index - piece.offset]
                return datapoint_echo(point) if isinstance(point, DataPoint) else None
        return None

    def errors(self) -> list[PutError]:
        """The failures so far, in body order."""
        self.failed.sort(key=lambda item: item[0])
        return [error for _, error in self.failed]


class _RunIndexes(Sequence[int]):
    """The body indexes of ``piece.points[start:stop]``, worked out only if asked for (a
    refusal, or ``sync``): the hot path never needs them."""

    __slots__ = ("_piece", "_start", "_stop")

    def __init__(self, piece: Piece, start: int, stop: int) -> None:
        self._piece, self._start, self._stop = piece, start, stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> _RunIndexes: ...
    def __getitem__(self, key: int | slice) -> int | _RunIndexes:
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            return _RunIndexes(self._piece, self._start + start, self._start + stop)
        if not 0 <= key < len(self):
            raise IndexError(key)
        piece = self._piece
        return piece.offset + piece.point_indexes()[self._start + key]


def _sync_reply(
    flags: PutFlags,
    points: int,
    queued: int,
    outcome: SyncOutcome[int],
    timeouts: int,
    errors: list[PutError],
) -> web.Response:
    good, unstored = outcome.stored, len(outcome.unstored)
    if timeouts:
        status, body = put_timeout_response(
            flags,
            points=points,
            queued=queued,
            good_writes=good,
            failed_writes=unstored - timeouts,
            timeouts=timeouts,
            errors=errors,
        )
    else:
        status, body = put_response(
            flags,
            points=points,
            queued=queued,
            good_writes=good,
            failed_writes=unstored,
            errors=errors,
            refusal=outcome.refusal,
        )
    return json_response(body, status)


ROUTES = {"api/put": Route(handle_put, modes=frozenset({"rw", "wo"}))}
