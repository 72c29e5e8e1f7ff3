"""A real HTTP app on 127.0.0.1 that records every request and answers as a test scripts it.

It runs its own event loop in a thread, so synchronous tests and tests on pytest-asyncio's
loop can both use it; the sidecar reaches it over a real socket.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.loop_thread import LoopThread


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def event(self) -> dict[str, Any]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    until_closed: bool = False
    """Never answer: wait until the client closes the connection (``RecordingApp.closed``)."""
    slots: int = 1
    """What the request occupies in the app's own count of slots while it runs
    (``RecordingApp.max_slots_in_progress``): a heavy task's 2, say."""


@dataclass(frozen=True)
class Closed:
    """A request the client gave up on: its connection closed before the app answered."""

    request: Received
    at: float


Behaviour = Callable[[Received], Reply]


@dataclass
class RecordingApp:
    behaviour: Behaviour = field(default=lambda _: Reply())
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _server: LoopThread | None = None
    _runner: web.AppRunner | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    in_progress: int = 0
    max_in_progress: int = 0
    slots_in_progress: int = 0
    max_slots_in_progress: int = 0
    """The most slots (``Reply.slots``) the requests in progress held at once."""
    closed: list[Closed] = field(default_factory=list)
    """Requests answered ``until_closed``, as their connections closed."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingApp:
        self._server = LoopThread("recording-app")
        self._server.start(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.stop(self._stop())

    async def _start(self) -> None:
        app = web.Application(client_max_size=128 * 1024 * 1024)  # claim-checked bodies
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Tests stop the app with requests still parked in long sleeps: don't wait for them.
        # Headers as large as a Go server takes (aiohttp's own 8190 bytes is under the
        # largest W3C baggage, 8192).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5,
                                     max_field_size=64 * 1024)
        await self._runner.setup()
        # port 0: any free port; a test restarting "the same app" passes the old port
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.shutdown()
            await self._runner.cleanup()
        # Requests still parked in a long reply delay: end them before the loop closes.
        leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.Response:
        seen = Received(request.path, dict(request.headers), await request.read(), time.time())
        with self._lock:
            self.received.append(seen)
            self.in_progress += 1
            self.max_in_progress = max(self.max_in_progress, self.in_progress)
        slots = 0
        try:
            reply = self.behaviour(seen)
            slots = reply.slots
            with self._lock:
                self.slots_in_progress += slots
                self.max_slots_in_progress = max(self.max_slots_in_progress,
                                                 self.slots_in_progress)
            if reply.until_closed:
                await self._until_closed(request, seen)
            elif reply.delay_s:
                await asyncio.sleep(reply.delay_s)
        finally:
            with self._lock:
                self.in_progress -= 1
                self.slots_in_progress -= slots
        body = reply.body
        if isinstance(body, dict):
            return web.json_response(body, status=reply.status, headers=reply.headers)
        return web.Response(status=reply.status, body=body.encode() if isinstance(body, str)
                            else body, headers=reply.headers)

    async def _until_closed(self, request: web.Request, seen: Received) -> None:
        """Until the client closes the connection, watched on the transport: aiohttp neither
        cancels the handler (its default) nor offers an event for it."""
        while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        with self._lock:
            self.closed.append(Closed(seen, time.time()))

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[Received]:
        """Block until at least ``count`` requests arrived; return them all."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"app saw {len(self.received)} requests, expected {count}")

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.event for r in self.received]
