"""Loop watchdog: a thread that notices when the event loop stops turning.

A blocked loop cannot answer probes at all, so Kubernetes would restart the pod anyway; the
watchdog makes the cause visible: it logs the stuck main thread's stack once per stall, and
``stalled`` (used by ``/healthz``) stays true for a while after a stall so a probe that gets
through right after the loop recovers still reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Callable

from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)


class LoopWatchdog:
    def __init__(
        self, stall_after_s: float = 10.0, tick_s: float = 0.5,
        on_stall: Callable[[], None] | None = None,
    ) -> None:
        self._stall_after_s = stall_after_s
        self._on_stall = on_stall  # called from the watchdog thread once per stall
        self._tick_s = tick_s
        self._last_beat = time.monotonic()
        self._last_stall_end = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beater: asyncio.Task[None] | None = None
        self._loop_thread_id = 0
        self.stalls = 0

    @property
    def stalled(self) -> bool:
        now = time.monotonic()
        return (now - self._last_beat > self._stall_after_s
                or now - self._last_stall_end < self._stall_after_s * 3)

    async def start(self) -> None:
        self._loop_thread_id = threading.get_ident()
        self._beater = asyncio.create_task(self._beat(), name="watchdog-beat")
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beater
        if self._thread is not None:
            self._thread.join(timeout=5)

    async def _beat(self) -> None:
        while True:
            self._last_beat = time.monotonic()
            await asyncio.sleep(self._tick_s)

    def _watch(self) -> None:
        in_stall = False
        while not self._stop.wait(self._tick_s):
            lag = time.monotonic() - self._last_beat
            if lag > self._stall_after_s and not in_stall:
                in_stall = True
                self.stalls += 1
                if self._on_stall is not None:
                    self._on_stall()
                frame = sys._current_frames().get(self._loop_thread_id)
                stack = "".join(traceback.format_stack(frame)) if frame else "unknown"
                log.error("event loop stalled", stalled_s=round(lag, 1), stack=stack[-4000:])
            elif lag <= self._stall_after_s and in_stall:
                in_stall = False
                self._last_stall_end = time.monotonic()
                log.warning("event loop running again")
