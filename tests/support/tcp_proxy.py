"""A TCP proxy a test controls: cut every connection through it and refuse new ones for a
while, to show a client reconnects — without touching the (shared) server behind it.

``TcpProxy`` pipes bytes both ways; a subclass that must see the requests (the object-store
proxy of ``store_proxy``) overrides ``_upstream``, the client-to-server direction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Self

from tests.support.loop_thread import LoopThread


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; ``cut()`` drops everything and refuses new
    connections until ``restore()``. Runs its own event loop in a thread."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server_loop = LoopThread(type(self).__name__)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._refusing = False
        self.port = 0

    def start(self) -> Self:
        self._server_loop.start(self._listen())
        return self

    def cut(self) -> None:
        self._server_loop.call(self._cut())

    def restore(self) -> None:
        self._refusing = False

    def stop(self) -> None:
        self._server_loop.stop(self._close())

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._upstream(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)

    async def _upstream(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        """Client to server: bytes as they come."""
        await self._pipe(reader, writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _cut(self) -> None:
        self._refusing = True
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _close(self) -> None:
        await self._cut()
        if self._server is not None:
            self._server.close()


@contextlib.contextmanager
def tcp_proxy(host: str, port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(host, port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
