"""The composition root: build the parts, start them in order, stop them in reverse.

Parts, in start order: loop watchdog, ops server, driver connection, app channel, journal,
depth refresher, app probe (the start gate: the receiver takes nothing before the app is
reachable), receiver, config watch. The settings in force have one owner, ``self.live``
(``settings.live``), which every part reads through; a live reload (SIGHUP, or the config's
files changed: ``delivery.reload``) replaces them there. Shutdown (SIGTERM/SIGINT) stops
them in reverse: the receiver stops taking messages, lets in-flight tasks finish for
``shutdown.grace_s`` and cancels the rest (cancelled workers return their messages at once:
visibility 0 / nack / abandon), then the journal is flushed, the HTTP session and the driver
closed, the server stopped. With ``shutdown.mode: finish`` the receiver lets every delivery
run to its end or its own timeout instead, and ``GET /drain`` on the ops server (the app's
preStop hook) starts the same stop and answers once nothing is in flight
(``drain_on_request``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from priority_pubsub.app.channel import build_channel
from priority_pubsub.app.channel.bulk import BulkChannel, BulkSettings
from priority_pubsub.app.channel.streams import (
    StreamChannel,
    StreamDeadLetters,
    StreamHub,
    TopicRefused,
)
from priority_pubsub.app.gate import NO_APP, AppGate
from priority_pubsub.app.request import RequestBuilder
from priority_pubsub.core.backoff import Backoff
from priority_pubsub.core.errors import DriverError
from priority_pubsub.delivery.control import QueueControl
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.delivery.reload import Reloader, ReloadSource
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.delivery.worker import Worker
from priority_pubsub.drivers.base import DepthReporter, Driver, Pinger, QueueAdder
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.kube.deletion_cost import DeletionCost
from priority_pubsub.monitor.build import build_monitor
from priority_pubsub.monitor.state import DepthReading, drain_state
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.settings.watch import content_hash
from priority_pubsub.shipping.shipper import Shipper
from priority_pubsub.telemetry.journal import JournalWriter
from priority_pubsub.telemetry.live_capacity import LiveCapacity
from priority_pubsub.telemetry.logs import get_logger, set_log_level
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from priority_pubsub.telemetry.server import OpsServer
from priority_pubsub.telemetry.tracing import build_tracer
from priority_pubsub.telemetry.watchdog import LoopWatchdog

log = get_logger(__name__)
SPOOL_FULL = "journal spool over journal.upload.max_local_mb"
READINESS_PING_S = 2.0
"""A broker behind a network that drops packets answers nothing: /readyz says so within
this, instead of hanging until the driver's own call timeout (10-30 s)."""
PART_STOP_BOUND_S = 10.0
"""How long a part's stop may take at shutdown before the sidecar goes on without it (the
receiver and the journal excepted: their bounds are ``shutdown.*`` and ``journal.upload.*``).
A driver closing on a connection the broker's restart left half-open could otherwise wait
for its call timeout twice (RabbitMQ: 2 x 30 s), past a pod's termination grace; what it
held goes back to its queue anyway when the process's connection ends or its lease lapses."""


@dataclass(frozen=True, slots=True)
class Part:
    """Something the sidecar starts and stops; ``stop`` runs for every part whose ``start``
    began, in reverse order."""

    name: str
    start: Callable[[], Awaitable[None]]
    stop: Callable[[], Awaitable[None]]
    bounded: bool = True
    """Its stop gets ``PART_STOP_BOUND_S``; False for a part whose stop the settings bound."""


async def _stop_part(part: Part) -> None:
    """A part's stop, given up after ``PART_STOP_BOUND_S`` when bounded: the sidecar's exit
    must not wait on one part that hangs."""
    if not part.bounded:
        await part.stop()
        return
    try:
        await asyncio.wait_for(part.stop(), PART_STOP_BOUND_S)
    except TimeoutError:
        log.warning("part did not stop in time; going on without it", part=part.name,
                    within_s=PART_STOP_BOUND_S)


async def _nothing() -> None:
    """The start of a part that only needs stopping."""


class Sidecar:
    """One process's parts, wired once and run as a whole.

    Every part is built here and nowhere else, so what a process runs can be read in one
    place, and a test builds the same process with a fake driver or channel. ``run`` owns
    the order: each part started only after the one it needs, stopped before it.
    """

    def __init__(
        self, settings: Settings, *, driver: Driver | None = None, rng: random.Random | None = None,
        request_builder: RequestBuilder | None = None,
        bulk: Mapping[str, BulkSettings] | None = None,
        streams: StreamHub | None = None,
        reload: ReloadSource | None = None,
    ) -> None:
        """``reload``: how to read the config again (SIGHUP, a watched file changed); None:
        the settings stay as given (a SIGHUP is logged and ignored)."""
        self.live = LiveSettings(
            settings, source_hash=content_hash(reload.paths) if reload is not None else "")
        """The settings in force: the one owner every part reads them through."""
        self.driver = driver or build_driver(settings)
        if streams is not None and request_builder is None:  # native mode: topics are queues
            self.driver = StreamDeadLetters(self.driver, streams)
            if streams.make_queue is None:
                streams.make_queue = self._queue_of_topic
        self.metrics = Metrics()
        # no app to push to: every queue is a streamed topic's, delivered to its streams
        self.channel = build_channel(settings) if streams is None else StreamChannel(streams)
        if bulk:  # topics delivered in batches; a batch grows while the receiver has room
            self.channel = BulkChannel(self.channel, self.channel, bulk,  # type: ignore[arg-type]
                                       lambda: self.receiver.has_room())
        self.journal = (
            JournalWriter(settings.journal.path, settings.journal.rotate_mb,
                          settings.journal.fsync)
            if settings.journal else None
        )
        upload = settings.journal.upload if settings.journal else None
        self.shipper = (Shipper(upload, self.journal, self.metrics.registry)
                        if upload is not None and self.journal is not None else None)
        """Uploads the journal's closed files (``journal.upload``); its library is imported
        when it starts."""
        live = self.live
        self.capacity = LiveCapacity([q.wait_slo_s for q in settings.queues],
                                     settings.server.capacity_window_s)
        self.observer = DeliveryObserver(self.metrics, self.journal,
                                         driver_type=settings.driver.type,
                                         capacity=self.capacity, live=live)
        self._workers_needed: set[str] = set()
        """Queues whose ``workers_needed`` gauge is exported now."""
        self._settings_changed()
        live.on_change(self._settings_changed)
        settler = Settler(live, self.driver, self.observer)
        self.control = QueueControl(live, self.metrics)
        self.dispatcher = Dispatcher(live, self.driver, self.observer, settler, rng,
                                     consumers=streams, control=self.control)
        self.tracer = build_tracer(settings)
        self.gate = AppGate(live, self.metrics,
                            probe=NO_APP if streams is not None else None)
        worker = Worker(live, self.driver, self.channel, self.observer, settler,
                        request_builder,
                        self.tracer, gate=self.gate)
        self.receiver = Receiver(live, self.dispatcher, worker, self.observer,
                                 capacity=self.gate.capacity)
        self.gate.attach(self.receiver)  # paused until the app is reachable (the start gate)
        self.control.on_change(self.receiver.retake)
        # read at scrape time: two gauge updates (each taking a lock) per message were a cost
        self.metrics.in_flight.set_function(lambda: float(self.receiver.in_flight))
        self.watchdog = LoopWatchdog(settings.server.stall_after_s,
                                     on_stall=self.metrics.loop_stalls.inc)
        self.depths: dict[str, DepthReading] = {}
        """What the depth refresher last read per queue (the monitor shows it)."""
        self.reloader = (Reloader(live, reload, self.metrics, add_queue=self._driver_adds_queue())
                         if reload is not None else None)
        self.monitor = build_monitor(
            live, driver=self.driver, metrics=self.metrics, gate=self.gate,
            receiver=self.receiver, control=self.control, observer=self.observer,
            depths=self.depths, connected=lambda: self.connected, running=worker.running,
        ) if settings.monitor.enabled else None
        self.server = OpsServer(
            settings.server, stalled=lambda: self.watchdog.stalled,
            readiness_problem=self.readiness_problem, render_metrics=self.metrics.render,
            more_routes=self.monitor.add_routes if self.monitor else None,
            drain=self.drain_on_request if settings.shutdown.mode == "finish" else None,
        )
        self._drained = asyncio.Event()
        """Set once the receiver has stopped and nothing is in flight: ``GET /drain``'s answer."""
        self.deletion_cost = DeletionCost(
            settings.kubernetes, lambda: self.receiver.in_flight > 0,
            self.metrics.deletion_cost_patches,
        ) if settings.kubernetes.deletion_cost else None
        self.connected = False
        self.draining = False
        self._stop = asyncio.Event()
        self._parts = [
            Part("watchdog", self.watchdog.start, self.watchdog.stop),
            Part("ops server", self.server.start, self._stop_server),
            *([Part("deletion cost", self.deletion_cost.start, self.deletion_cost.stop)]
              if self.deletion_cost else []),
            Part("driver", self._connect, self.driver.close),
            Part("app channel", self.channel.start, self.channel.close),
            Part("tracer", _nothing, self.tracer.close),
            *([Part("journal", self._start_journal, self._stop_journal, bounded=False)]
              if self.journal else []),
            Part("depth refresher", self._start_depth, self._stop_depth),
            *([Part("monitor history", self._start_history, self._stop_history)]
              if self.monitor else []),
            Part("app probe", self._start_probe, self._stop_probe),
            Part("receiver", self.receiver.start, self._stop_receiver, bounded=False),
            Part("config watch", self._start_watch, self._stop_watch),
        ]
        self._reload_ready = asyncio.Event()
        """Set once every part has started: a SIGHUP before then is applied then."""
        self._watch: asyncio.Task[None] | None = None
        self._depth: asyncio.Task[None] | None = None
        self._history: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None

    @property
    def settings(self) -> Settings:
        """The settings in force (``live``'s)."""
        return self.live.settings

    @property
    def in_flight(self) -> int:
        return self.receiver.in_flight

    def _driver_adds_queue(self) -> Callable[[str], Awaitable[None]] | None:
        """The driver's ``add_queue``, or None when it takes no queue after start."""
        return self.driver.add_queue if isinstance(self.driver, QueueAdder) else None

    async def add_queue(self, queue: str) -> None:
        """Receive from ``queue`` too, below every queue in force (a streamed topic unknown
        at start). Raises ``TopicRefused`` when the driver cannot take it."""
        if queue in self.live.index:  # the shared layout's queue: already taken from
            return
        if not isinstance(self.driver, QueueAdder):
            raise TopicRefused(f"queue {queue} is not configured, and the "
                               f"{self.settings.driver.type} driver takes no queue after "
                               "start: list it under queues", "FAILED_PRECONDITION")
        try:
            await self.driver.add_queue(queue)
        except DriverError as exc:
            raise TopicRefused(f"queue {queue}: {exc}", "NOT_FOUND") from None
        if self.live.add_queue(queue):  # every part follows; the next take counts it
            log.info("queue added", queue=queue, priority=self.live.index[queue])

    def _settings_changed(self) -> None:
        """What the composition root itself derives from the settings in force: the
        concurrency gauge, the ``workers_needed`` gauges (queues with ``wait_slo_s``), the
        log level."""
        live = self.live
        self.metrics.concurrency.set(live.settings.concurrency)
        wanted = {queue.name for queue in live.queues if queue.wait_slo_s is not None}
        for name in self._workers_needed - wanted:
            self.metrics.workers_needed.remove(name)
        for name in wanted - self._workers_needed:
            self.metrics.workers_needed.labels(name).set_function(self._needed_reader(name))
        self._workers_needed = wanted
        set_log_level(live.settings.log.level)

    def _needed_reader(self, queue: str) -> Callable[[], float]:
        """``priority_pubsub_workers_needed`` for ``queue``, computed at scrape time (Erlang
        C over the window: cheap, and never stale)."""
        def read() -> float:
            index = self.live.index.get(queue)
            return 0.0 if index is None else float(self.capacity.workers_needed()[index] or 0)
        return read

    def _reload_requested(self, trigger: str) -> None:
        """SIGHUP: reload now (once every part has started); never exits the process (the
        handler stays while it stops: SIGHUP's default would end it)."""
        if self.reloader is None or self.draining:
            why = "stopping" if self.draining else "this sidecar was given no config to read"
            log.warning(f"config reload asked, but {why}: ignored", trigger=trigger)
            return
        asyncio.get_running_loop().create_task(self._reload_when_ready(trigger))

    async def _reload_when_ready(self, trigger: str) -> None:
        await self._reload_ready.wait()
        assert self.reloader is not None
        self.reloader.request(trigger)

    async def _queue_of_topic(self, topic: str) -> str:
        """Native mode: a streamed topic is the queue of its name."""
        try:
            await self.add_queue(topic)
        except TopicRefused as exc:
            raise TopicRefused(f"topic {topic}: {exc}", exc.code) from None
        return topic

    async def readiness_problem(self) -> str | None:
        """Why the sidecar should not get traffic now, or None when it is ready."""
        if self.draining:
            return "draining"
        if (drain := drain_state(self.control, self.in_flight)) is not None:
            who = "by an operator" if self.control.drain is None or \
                self.control.drain.reason != SPOOL_FULL else f"({SPOOL_FULL})"
            return f"{drain} {who} ({self.in_flight} in flight)"
        if not self.connected:
            return "driver not connected"
        if not self.gate.health.up:
            return self.gate.health.reason
        if not self.dispatcher.healthy:
            return "driver unreachable: last receive failed"
        if isinstance(self.driver, Pinger):
            try:
                async with asyncio.timeout(READINESS_PING_S):
                    await self.driver.ping()
            except DriverError as exc:
                return f"driver unreachable: {exc}"
            except TimeoutError:
                return f"driver unreachable: no answer to a ping within {READINESS_PING_S:g} s"
        return None

    def request_stop(self) -> None:
        self._stop.set()

    async def drain_on_request(self) -> None:
        """``GET /drain`` (``shutdown.mode: finish``): the stop a SIGTERM starts, nothing
        more; returns once the receiver has stopped and nothing is in flight."""
        self.request_stop()
        await self._drained.wait()

    async def _stop_receiver(self) -> None:
        try:
            await self.receiver.stop()
        finally:
            self._drained.set()

    async def _stop_server(self) -> None:
        self._drained.set()  # the receiver never started (nothing was taken): answer too
        await self.server.stop()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run until ``request_stop()`` or a signal; then stop the parts in reverse."""
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            loop.add_signal_handler(signal.SIGHUP, self._reload_requested, "SIGHUP")
        started: list[Part] = []
        try:
            running = asyncio.create_task(self._start_and_serve(started), name="sidecar")
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({running, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop.done() and not running.done():
                await self._block_shutdown()
            self.draining = True
            for task in (running, stop):
                task.cancel()
            await asyncio.gather(stop, return_exceptions=True)
            with contextlib.suppress(asyncio.CancelledError):
                await running
        finally:
            for part in reversed(started):
                await _stop_part(part)
            gc.unfreeze()  # what this run froze can be collected again
            log.info("stopped")

    async def _block_shutdown(self) -> None:
        """daprd's ``--dapr-block-shutdown-duration``: keep delivering for ``block_s`` after
        the stop request, or until the app's health probe reports it down."""
        deadline = asyncio.get_running_loop().time() + self.settings.shutdown.block_s
        if self.settings.shutdown.block_s > 0:
            log.info("shutdown blocked", block_s=self.settings.shutdown.block_s)
        # polled: the probe has no event to wait on
        while asyncio.get_running_loop().time() < deadline and self.gate.health.up:  # noqa: ASYNC110
            await asyncio.sleep(0.1)

    async def _start_and_serve(self, started: list[Part]) -> None:
        for part in self._parts:
            started.append(part)
            await part.start()
        _freeze_startup_objects()
        await self.receiver.wait()

    async def _connect(self) -> None:
        backoff = Backoff(initial_s=0.5, max_s=30.0)
        while True:
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

    async def _start_journal(self) -> None:
        assert self.journal is not None
        self.journal.start()
        if self.shipper is not None:
            self.shipper.on_full = self._spool_full
            await self.shipper.start()

    async def _stop_journal(self) -> None:
        """After the last delivery settled: close the open file, then give the final
        uploads ``journal.upload.stop_timeout_s``."""
        assert self.journal is not None
        await self.journal.close()
        if self.shipper is not None:
            await self.shipper.stop()

    def _spool_full(self, full: bool) -> None:
        """``journal.upload.when_full: pause_delivery``: a drain of this replica while the
        spool is over its bound (an operator's drain is left alone)."""
        if full:
            self.control.start_drain(SPOOL_FULL)
        elif self.control.drain is not None and self.control.drain.reason == SPOOL_FULL:
            self.control.end_drain()

    async def _start_depth(self) -> None:
        if isinstance(self.driver, DepthReporter):
            self._depth = asyncio.create_task(self._refresh_depth(self.driver),
                                              name="depth-refresh")

    async def _stop_depth(self) -> None:
        if self._depth is not None:
            self._depth.cancel()
            await asyncio.gather(self._depth, return_exceptions=True)

    async def _start_watch(self) -> None:
        self._reload_ready.set()
        if self.reloader is not None and self.settings.reload.watch:
            self._watch = asyncio.create_task(self.reloader.watch(), name="config-watch")

    async def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self.reloader is not None:
            await self.reloader.stop()

    async def _start_history(self) -> None:
        assert self.monitor is not None
        history = self.monitor.sources.history
        self._history = asyncio.create_task(_every(history.interval_s, history.sample),
                                            name="monitor-history")

    async def _stop_history(self) -> None:
        if self._history is not None:
            self._history.cancel()
            await asyncio.gather(self._history, return_exceptions=True)

    async def _start_probe(self) -> None:
        self._probe = asyncio.create_task(self.gate.run(), name="app-probe")

    async def _stop_probe(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)

    async def _refresh_depth(self, driver: DepthReporter) -> None:
        """Keep ``priority_pubsub_queue_depth`` current (what KEDA/HPA scale on)."""
        while True:
            for name in self.live.names:
                try:
                    depth = await driver.depth(name)
                except DriverError as exc:
                    log.debug("depth refresh failed", queue=name, error=str(exc))
                    continue
                index = self.live.index.get(name)  # None: a reload removed it meanwhile
                if depth.visible is not None and index is not None:
                    self.metrics.queue_depth.labels(name).set(depth.visible)
                    self.capacity.depth_seen(index, depth.visible)
                if depth.oldest_age_s is not None:
                    self.metrics.oldest_wait_seconds.labels(name).set(depth.oldest_age_s)
                self.depths[name] = DepthReading(depth, time.monotonic())
            await asyncio.sleep(self.settings.server.depth_interval_s)


async def _every(interval_s: float, job: Callable[[], None]) -> None:
    while True:
        job()
        await asyncio.sleep(interval_s)


def _freeze_startup_objects() -> None:
    """Leave the objects made at start (modules, settings, clients, metrics: some 60,000)
    out of every later garbage collection.

    They live as long as the process, yet each full collection walked them all: in the
    local driver's throughput benchmark at concurrency 16, collections took ~80 ms per 3,000
    deliveries, half of them the two full ones, and the sidecar's CPU per message fell by
    about a tenth with this (bench/throughput.py, side by side). ``run`` unfreezes at stop.

    No full collection first: at this point it found 20 unreachable objects and gave back no
    resident memory, yet walking the ~62,000 took 31-36 ms of CPU on the way to ready, a
    tenth of the start's (``priority-pubsub run``, local driver; bench.footprint)."""
    gc.freeze()
