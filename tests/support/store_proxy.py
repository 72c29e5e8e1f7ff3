"""An HTTP-aware TCP proxy in front of an object-store test server, for the faults a real
network brings: a flipped byte in an upload's body, a store that is down, a slow link.

``flip(n)``: the body of each of the next ``n`` PUT/POST requests with a body of at least
``FLIP_MIN_BODY`` bytes reaches the server with one byte inverted, in its middle (the
headers untouched, so the server takes the request and stores what it got). ``cut()`` /
``restore()``: every connection dropped and new ones refused meanwhile. ``slow(s)``: each
chunk of 1 KiB from client to server waits ``s`` seconds. ``uploads_started`` counts the
PUT/POST requests with a body seen so far, ``uploading`` those still being sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.support.tcp_proxy import TcpProxy

FLIP_MIN_BODY = 200
SLOW_CHUNK = 1024


class StoreProxy(TcpProxy):
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        super().__init__(target_host, target_port)
        self._lock = threading.Lock()
        self._flips = 0
        self.flipped = 0
        self.delay_s = 0.0
        self.uploads_started = 0
        self.uploading = 0

    def flip(self, count: int) -> None:
        with self._lock:
            self._flips = count

    def slow(self, seconds_per_kib: float) -> None:
        self.delay_s = seconds_per_kib

    def _take_flip(self) -> bool:
        with self._lock:
            if self._flips <= 0:
                return False
            self._flips -= 1
            self.flipped += 1
            return True

    async def _upstream(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        """Client to server, a request at a time: headers as they are, the body chunked
        (slowed, maybe one byte flipped)."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                writer.write(head)
                await writer.drain()
                length = _content_length(head)
                if length <= 0:
                    continue
                upload = head[:5].upper().startswith((b"PUT ", b"POST "))
                flip_at = length // 2 if upload and length >= FLIP_MIN_BODY and \
                    self._take_flip() else -1
                if upload:
                    self.uploads_started += 1
                    self.uploading += 1
                try:
                    await self._body(reader, writer, length, flip_at)
                finally:
                    if upload:
                        self.uploading -= 1
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _body(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    length: int, flip_at: int) -> None:
        sent = 0
        while sent < length:
            chunk = bytearray(await reader.readexactly(min(SLOW_CHUNK, length - sent)))
            if sent <= flip_at < sent + len(chunk):
                chunk[flip_at - sent] ^= 0xFF
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or 0)
    return 0


@contextlib.contextmanager
def store_proxy(port: int) -> Iterator[StoreProxy]:
    proxy = StoreProxy(port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
