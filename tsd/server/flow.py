"""Write-side flow control for a connection: stop reading while replies pile up unsent.

uvicorn's ``FlowControl`` (uvicorn/protocols/http/flow_control.py) is the model. The
transport calls ``pause_writing`` when its send buffer passes the high-water mark (the
client is not reading its replies) and ``resume_writing`` once it has drained below the
low-water mark. While writing is paused the connection's reading is paused too, so a client
that sends commands without reading the answers (400,000 ``stats`` lines) holds at most
about ``high_water`` bytes of replies in the daemon, not all of them; other clients are not
affected.

Reading is also paused by the connection itself (a task finishing lines that had to
wait); :class:`FlowControl` keeps the two reasons apart and resumes reading only when
neither holds.
"""

from __future__ import annotations

import asyncio

#: Unsent reply bytes past which a connection stops being read (and below which, at a
#: quarter of it, it is read again).
WRITE_HIGH_WATER = 256 * 1024


class FlowControl:
    """Pauses and resumes reading of one transport for two reasons: unsent replies
    (``pause_writing``/``resume_writing`` from the transport) and the protocol's own
    (``hold``/``release``)."""

    __slots__ = ("_held", "_read_paused", "_transport", "_writable", "pauses")

    def __init__(self, transport: asyncio.Transport, high_water: int = WRITE_HIGH_WATER) -> None:
        self._transport = transport
        self._writable = asyncio.Event()
        self._writable.set()
        self._held = False
        self._read_paused = False
        #: times reading was paused because replies were not being read
        self.pauses = 0
        transport.set_write_buffer_limits(high=high_water, low=high_water // 4)

    @property
    def writing_paused(self) -> bool:
        return not self._writable.is_set()

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    # -- the transport's callbacks (forwarded by the protocol) ----------------------------

    def pause_writing(self) -> None:
        if self._writable.is_set():
            self._writable.clear()
            self.pauses += 1
            self._update()

    def resume_writing(self) -> None:
        if not self._writable.is_set():
            self._writable.set()
            self._update()

    async def drain(self) -> None:
        """Wait until the client has read enough of its replies."""
        await self._writable.wait()

    # -- the protocol's own reason ------------------------------------------------------------

    def hold(self) -> None:
        self._held = True
        self._update()

    def release(self) -> None:
        self._held = False
        self._update()

    def connection_lost(self) -> None:
        """Wake anything waiting in :meth:`drain` (there is nobody left to write to)."""
        self._writable.set()

    def _update(self) -> None:
        want_paused = self._held or not self._writable.is_set()
        if want_paused == self._read_paused or self._transport.is_closing():
            return
        self._read_paused = want_paused
        if want_paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()
