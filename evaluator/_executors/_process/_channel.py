"""The engine's end of one worker's socket: non-blocking framed messages on the loop.

Driven by ``loop.add_reader`` (no thread per worker; works under uvloop). A frame that
cannot be sent at once waits in a buffer and goes out from ``add_writer``, in order.
Whole frames are handed to ``on_message(kind, body)`` as they arrive; the end of the
stream is reported once to ``on_end()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Callable

from ._wire import HEADER, KIND_PICKLE

__all__ = ["Channel"]

_READ_SIZE = 1 << 18


class Channel:
    """Framed messages over one connected, non-blocking socket."""

    __slots__ = ("_loop", "_on_end", "_on_message", "_rbuf", "_wbuf", "closed", "sock")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        on_message: Callable[[int, bytearray], None],
        on_end: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self._loop = loop
        self.sock = sock
        self._on_message = on_message
        self._on_end = on_end
        self._rbuf = bytearray()
        self._wbuf: deque[memoryview] = deque()
        self.closed = False

    def start(self) -> None:
        """Start reading: each whole frame goes to ``on_message`` as it arrives."""
        self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def send(self, body: bytes, kind: int = KIND_PICKLE) -> None:
        """Send one frame, now or, if the socket is full, as soon as it drains."""
        if self.closed:
            return
        frame = HEADER.pack(len(body), kind) + body
        if self._wbuf:
            self._wbuf.append(memoryview(frame))
            return
        try:
            sent = self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return  # the worker is gone; its exit is handled when the process ends
        if sent < len(frame):
            self._wbuf.append(memoryview(frame)[sent:])
            self._loop.add_writer(self.sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        wbuf = self._wbuf
        while wbuf:
            head = wbuf[0]
            try:
                sent = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                wbuf.clear()
                break
            if sent < len(head):
                wbuf[0] = head[sent:]
                return
            wbuf.popleft()
        self._loop.remove_writer(self.sock.fileno())

    def drain(self) -> bool:
        """Read and hand on what the socket holds now; False at the end of the stream."""
        alive = self._read()
        self._parse()
        return alive

    def _read(self) -> bool:
        while True:
            try:
                data = self.sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not data:
                return False
            self._rbuf += data
            if len(data) < _READ_SIZE:
                return True

    def _parse(self) -> None:
        buf = self._rbuf
        pos, end, header = 0, len(buf), HEADER.size
        while end - pos >= header and not self.closed:
            length, kind = HEADER.unpack_from(buf, pos)
            stop = pos + header + length
            if stop > end:
                break
            body = buf[pos + header : stop]
            pos = stop
            self._on_message(kind, body)
        if pos:
            del buf[:pos]

    def _on_readable(self) -> None:
        if not self.drain() and not self.closed:
            self.stop()
            self._on_end()

    def stop(self) -> None:
        """Stop reading and writing (the socket stays open)."""
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_reader(self.sock.fileno())
            self._loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        """Stop, and close the socket; later sends are dropped."""
        if self.closed:
            return
        self.stop()
        self.closed = True
        self.sock.close()
