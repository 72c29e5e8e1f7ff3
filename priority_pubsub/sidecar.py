"""The sidecar process: driver, workers, server and journal, with an ordered shutdown.

Shutdown (SIGTERM/SIGINT): stop taking messages, let in-flight tasks finish for
``shutdown.grace_s``, then cancel what is left; cancelled workers return their messages at
once (visibility 0 / nack / abandon) so another replica picks them up.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal

from priority_pubsub.backoff import Backoff
from priority_pubsub.config import Settings
from priority_pubsub.delivery import Delivery
from priority_pubsub.dispatcher import Dispatcher
from priority_pubsub.drivers.base import DepthReporter, Driver, Pinger
from priority_pubsub.errors import DriverError
from priority_pubsub.forwarder import Forwarder
from priority_pubsub.journal import JournalWriter
from priority_pubsub.logs import get_logger
from priority_pubsub.message import Message
from priority_pubsub.metrics import Metrics
from priority_pubsub.plugins import build_driver
from priority_pubsub.server import OpsServer
from priority_pubsub.tracing import build_tracer
from priority_pubsub.watchdog import LoopWatchdog
from priority_pubsub.worker import Worker

log = get_logger(__name__)


class Sidecar:
    def __init__(
        self, settings: Settings, *, driver: Driver | None = None, rng: random.Random | None = None,
        delivery: Delivery | None = None,
    ) -> None:
        self.settings = settings
        self.driver = driver or build_driver(settings)
        self.metrics = Metrics()
        self.metrics.concurrency.set(settings.concurrency)
        self.forwarder = Forwarder(settings.app, settings.concurrency,
                                   exact_status=settings.dapr is not None)
        self.journal = (
            JournalWriter(settings.journal.path, settings.journal.rotate_mb)
            if settings.journal else None
        )
        self.dispatcher = Dispatcher(settings, self.driver, self.metrics, rng)
        self.tracer = build_tracer(settings)
        self.worker = Worker(settings, self.driver, self.forwarder, self.metrics, self.journal,
                             delivery, self.tracer)
        self.server = OpsServer(self)
        self.watchdog = LoopWatchdog(settings.server.stall_after_s,
                                     on_stall=self.metrics.loop_stalls.inc)
        self.connected = False
        self.draining = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._stop = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def readiness_problem(self) -> str | None:
        """Why the sidecar should not get traffic now, or None when it is ready."""
        if self.draining:
            return "draining"
        if not self.connected:
            return "driver not connected"
        if not self.dispatcher.healthy:
            return "driver unreachable: last receive failed"
        if isinstance(self.driver, Pinger):
            try:
                await self.driver.ping()
            except DriverError as exc:
                return f"driver unreachable: {exc}"
        return None

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run until ``request_stop()`` or a signal; then shut down in order."""
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        await self.watchdog.start()
        await self.server.start()
        await self.forwarder.start()
        if self.journal:
            self.journal.start()
        try:
            receiving = asyncio.create_task(self._receive_loop(), name="receive-loop")
            depth = asyncio.create_task(self._refresh_depth(), name="depth-refresh")
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({receiving, stop}, return_when=asyncio.FIRST_COMPLETED)
            self.draining = True
            for task in (receiving, depth, stop):
                task.cancel()
            await asyncio.gather(depth, stop, return_exceptions=True)
            with contextlib.suppress(asyncio.CancelledError):
                await receiving
            await self._drain()
        finally:
            await self._close()

    async def _connect(self) -> None:
        backoff = Backoff(initial_s=0.5, max_s=30.0)
        while not self._stop.is_set():
            try:
                await self.driver.start()
                self.connected = True
                log.info("driver connected", driver=self.settings.driver.type,
                         queues=list(self.settings.queue_names))
                return
            except DriverError as exc:
                if not exc.retriable:
                    raise
                log.warning("driver unavailable, retrying", error=str(exc),
                            retry_in_s=backoff.next_s())
                await backoff.sleep()

    async def _receive_loop(self) -> None:
        await self._connect()
        backoff = Backoff(initial_s=0.5, max_s=30.0)
        while True:
            free = self.settings.concurrency - len(self._tasks)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                messages = await self.dispatcher.take(free)
            except DriverError as exc:
                log.warning("receive failed, backing off", error=str(exc),
                            retry_in_s=backoff.next_s())
                await backoff.sleep()
                continue
            backoff.reset()
            for message in messages:
                self._start_task(message)

    async def _refresh_depth(self) -> None:
        """Keep ``priority_pubsub_queue_depth`` current (what KEDA/HPA scale on)."""
        if not isinstance(self.driver, DepthReporter):
            return
        while True:
            if self.connected:
                for name in self.settings.queue_names:
                    try:
                        depth = await self.driver.depth(name)
                    except DriverError as exc:
                        log.debug("depth refresh failed", queue=name, error=str(exc))
                        continue
                    if depth.visible is not None:
                        self.metrics.queue_depth.labels(name).set(depth.visible)
            await asyncio.sleep(self.settings.server.depth_interval_s)

    def _start_task(self, message: Message) -> None:
        metrics = self.metrics.queue(message.queue, message.priority)
        metrics.received.inc()
        metrics.wait_seconds.observe(
            max(0.0, (message.received_ms - message.enqueued_ms) / 1000)
        )
        task = asyncio.create_task(self.worker.handle(message), name=f"msg-{message.id}")
        self._tasks.add(task)
        self.metrics.in_flight.set(len(self._tasks))
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.metrics.in_flight.set(len(self._tasks))
        self._slot_freed.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("worker crashed", error=repr(error))

    async def _drain(self) -> None:
        grace = self.settings.shutdown.grace_s
        if self._tasks:
            log.info("draining", in_flight=len(self._tasks), grace_s=grace)
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
            if pending:
                log.warning("grace period over, returning unfinished messages",
                            count=len(pending))
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    async def _close(self) -> None:
        if self.journal:
            await self.journal.close()
        await self.forwarder.close()
        await self.tracer.close()
        await self.driver.close()
        await self.server.stop()
        await self.watchdog.stop()
        log.info("stopped")
