"""A telnet worker process: frames and parses telnet lines on another core.

``python -m tsd.server.worker_process <channel fd> <handoff fd> <settings JSON>``, started by
:class:`tsd.server.worker_pool.WorkerPool` (see docs/write-path.md, "Every core"). The daemon
(the owner of the log, the writer and UID assignment) accepts every connection; a plaintext
telnet one is handed over here with the bytes already read (SCM_RIGHTS on the handoff
socket). From then on this process reads the client, frames its lines and parses them
with the same pure parsers as the daemon (:mod:`tsd.protocol.telnet`), and sends the owner
one message per read, in order, over the channel: the items of
:class:`~tsd.protocol.telnet_frame.TelnetFramer`, the same the daemon frames for its own
connections, with this worker's memory of series:

* the keys (raw metric and tag words) of every put it parsed in full, so that later puts
  of them go as columns (:class:`~tsd.protocol.telnet_frame.KnownPuts`) the owner maps to
  its refs;
* the series' refs the owner taught it (``("k", entries)``: the raw words and the
  series' row-key template, sent once the owner resolved the series for a connection of
  this worker): their puts are encoded here into the connection's own cells, several
  reads' worth, then handed over as one :class:`~tsd.wal.record.EncodedPart`. A
  connection's part goes before any command or refused line of it (so a reply still
  comes after every put before it), once it holds :data:`PART_POINTS` points, at its end,
  and at the latest :data:`PART_DELAY_S` after its first point.

The owner answers with the bytes to write (``("w", cid, data)``) and when to close
(``("c", cid)``): every reply, error line and acknowledgement is the owner's, in order.
When the channel cannot take more (the owner stopped reading it: its writer is full) every
client of this worker stops being read. The worker exits when the channel closes (the
daemon stopped or died).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import signal
import socket
import struct
import sys
from typing import Any, cast

from tsd.codec import SeriesKey
from tsd.protocol.names import NameRules
from tsd.protocol.telnet_frame import PART_DELAY_S, PART_POINTS, TelnetFramer, items_to_wire
from tsd.recent import RecentMap
from tsd.server.flow import WRITE_HIGH_WATER
from tsd.wal.record import EncodedPart, seal_part

#: Frame header of every channel message: its length, big-endian.
HEADER = struct.Struct(">I")
#: Series refs a worker keeps when its settings do not say (tsd.core.series_cache.size's
#: default; the pool passes the owner's): the least recently taught go first, and a
#: series forgotten goes by its key again.
MAX_REFS = 5_000_000


def frame(message: object) -> bytes:
    """One channel message: length + pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


class Deframer:
    """Splits a byte stream back into messages."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buffer = self._data
        buffer += data
        messages: list[Any] = []
        start = 0
        size = len(buffer)
        while size - start >= 4:
            (length,) = HEADER.unpack_from(buffer, start)
            end = start + 4 + length
            if end > size:
                break
            messages.append(pickle.loads(memoryview(buffer)[start + 4 : end]))
            start = end
        if start:
            del buffer[:start]
        return messages


class Worker:
    """The worker's side of the channel and its client connections."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.rules = NameRules(settings["special_chars"], settings["max_tags"])
        self.commands = tuple(settings["commands"])
        self.max_line_bytes = int(settings["max_line_bytes"])
        self.keys: dict[Any, Any] = {}
        #: put_line_key -> row-key template, as the owner taught them
        self.refs: RecentMap[Any, SeriesKey] = RecentMap(int(settings.get("max_refs", MAX_REFS)))
        self.clients: dict[int, Client] = {}
        self.channel: asyncio.Transport | None = None
        self.paused = False
        self.done = asyncio.get_running_loop().create_future()
        self._closing: set[int] = set()

    # -- the owner's messages -------------------------------------------------------------------

    def on_message(self, message: Any) -> None:
        kind = message[0]
        if kind == "k":
            self.learn(message[1])
            return
        if kind == "K":
            self.forget()
            return
        cid = message[1]
        client = self.clients.get(cid)
        if kind == "w":
            if client is not None:
                client.write(message[2])
        elif kind == "c":
            if client is not None:
                client.close()
            else:
                self._closing.add(cid)

    def learn(self, entries: list[tuple[Any, bytes, bytes, bytes]]) -> None:
        """Series the owner resolved: their keys and row-key templates."""
        refs = self.refs  # a ref evicted: its next points go by key (after the part)
        for key, salt, metric_uid, tag_bytes in entries:
            refs.remember(key, SeriesKey(salt, metric_uid, tag_bytes))

    def forget(self) -> None:
        """Forget every ref (the owner's ``dropcaches``). The points encoded with them go
        first: a later point of the same series then goes by its key, and must not
        overtake them."""
        for client in list(self.clients.values()):
            client.send_part()
        self.refs.clear()

    def send(self, message: object) -> None:
        if self.channel is not None and not self.channel.is_closing():
            self.channel.write(frame(message))

    def adopt(self, sock: socket.socket, cid: int, first: bytes) -> None:
        """A connection handed over by the owner, with the bytes it read already."""
        loop = asyncio.get_running_loop()
        client = Client(self, cid, first)
        self.clients[cid] = client

        async def attach() -> None:
            try:
                await loop.connect_accepted_socket(lambda: client, sock)
            except OSError:
                self.clients.pop(cid, None)
                self.send(("x", cid))
                return
            if cid in self._closing:
                self._closing.discard(cid)
                client.close()

        loop.create_task(attach())

    # -- back-pressure --------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True
        for client in self.clients.values():
            client.pause()

    def resume(self) -> None:
        self.paused = False
        for client in list(self.clients.values()):
            client.resume()


class Client(asyncio.Protocol):
    """One client connection: frame, parse, send to the owner."""

    def __init__(self, worker: Worker, cid: int, first: bytes) -> None:
        self.worker = worker
        self.cid = cid
        self.first = first
        self.framer: TelnetFramer[EncodedPart] = TelnetFramer(
            rules=worker.rules,
            commands=worker.commands,
            max_line_bytes=worker.max_line_bytes,
            refs=worker.refs,
            seal=seal_part,
            keys=worker.keys,
            part_points=PART_POINTS,
        )
        self.transport: asyncio.Transport | None = None
        self.reading = True
        self.writing = True
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_HIGH_WATER // 4)
        if self.worker.paused:
            self.pause()
        first, self.first = self.first, b""
        if first:  # before anything the transport reads (its EOF included)
            self.data_received(first)

    def data_received(self, data: bytes) -> None:
        framer = self.framer
        items = framer.frame(data)
        if items:
            self.worker.send(("d", self.cid, items_to_wire(items)))
        if not framer.encoded:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(PART_DELAY_S, self.send_part)

    def send_part(self) -> None:
        """Hand the encoded points over now."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        items: list[Any] = []
        self.framer.take_part(items)
        if items:
            self.worker.send(("d", self.cid, items_to_wire(items)))

    def eof_received(self) -> bool:
        self.send_part()
        self.worker.send(("e", self.cid))
        return True  # the owner closes once it has handled every line

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.send_part()  # what was read counts, as in the owner's own connections
        if self.worker.clients.pop(self.cid, None) is not None:
            self.worker.send(("x", self.cid))

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def pause(self) -> None:
        if self.transport is not None and self.reading:
            self.reading = False
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def pause_writing(self) -> None:
        """The client does not read its replies: stop reading it, and tell the owner (its
        FlowControl holds the connection's lines meanwhile)."""
        self.writing = False
        self.pause()
        self.worker.send(("p", self.cid))

    def resume_writing(self) -> None:
        self.writing = True
        self.worker.send(("r", self.cid))
        if not self.worker.paused:
            self.resume()

    def resume(self) -> None:
        if not self.writing:
            return
        if self.transport is not None and not self.reading:
            self.reading = True
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()


class ChannelProtocol(asyncio.Protocol):
    """The worker's end of the channel."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.deframer = Deframer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.worker.channel = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for message in self.deframer.feed(data):
            self.worker.on_message(message)

    def pause_writing(self) -> None:
        self.worker.pause()

    def resume_writing(self) -> None:
        self.worker.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.worker.done.done():
            self.worker.done.set_result(None)


async def serve(channel_fd: int, handoff_fd: int, settings: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    worker = Worker(settings)
    channel = socket.socket(fileno=channel_fd)
    handoff = socket.socket(fileno=handoff_fd)
    handoff.setblocking(False)
    await loop.connect_accepted_socket(lambda: ChannelProtocol(worker), channel)

    def take_handoffs() -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(handoff, 1 << 20, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                loop.remove_reader(handoff.fileno())
                return
            cid, first = pickle.loads(data)
            for fd in fds:
                worker.adopt(socket.socket(fileno=fd), cid, first)

    loop.add_reader(handoff.fileno(), take_handoffs)
    worker.send(("ready", 0))  # the owner hands connections over from now on
    await worker.done


def main() -> None:
    # The owner stops its workers; a terminal's Ctrl-C goes to the owner alone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel_fd, handoff_fd = int(sys.argv[1]), int(sys.argv[2])
    settings = json.loads(sys.argv[3])
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover
        runner = asyncio.Runner()
    with runner:
        runner.run(serve(channel_fd, handoff_fd, settings))
    os._exit(0)


if __name__ == "__main__":
    main()
