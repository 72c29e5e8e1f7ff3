"""The one observer of delivery events: metrics, the journal and the delivery log lines.

Receiving, the worker, the lease keeper and the settler only report what happened
(``received``, ``forwarded``, ``lease_extended``, ``receive_call``, ``settled``); this class
alone turns that into Prometheus samples, journal records and log lines, as dramatiq's
Prometheus middleware does. So every settle — surplus releases and failed settles included —
is counted and journaled the same way. (The in-flight gauge is read from the receiver at
scrape time.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from priority_pubsub.core.message import DeadLetter, Message, now_ms
from priority_pubsub.core.outcome import Kind
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.journal import JournalRecord, JournalWriter
from priority_pubsub.telemetry.live_capacity import LiveCapacity
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.metrics import Metrics

log = get_logger("priority_pubsub.delivery")
RECENT_DEAD_LETTERS = 1000
"""Dead letters this replica remembers for the monitor where the broker cannot list them."""


@dataclass(frozen=True, slots=True)
class Settled:
    """One settle as it happened at the broker (``kind`` SETTLE_FAILED when it did not)."""

    message: Message
    kind: Kind
    reason: str | None
    http_status: int | None = None
    forwarded_ms: int | None = None
    error: str | None = None
    """The driver's error when the settle failed or was refused."""


class DeliveryObserver:
    def __init__(
        self,
        metrics: Metrics,
        journal: JournalWriter | None,
        *,
        driver_type: str,
        capacity: LiveCapacity | None = None,
        live: LiveSettings | None = None,
    ) -> None:
        """``live``: the settings in force, for the log level (successes are logged at
        debug) and the queues ``capacity`` counts deliveries of (by priority)."""
        self.metrics = metrics
        self._journal = journal
        self._driver_type = driver_type
        self._live = live
        self._log_successes = False
        self._capacity = capacity
        self._capacity_queues: tuple[str, ...] = ()
        """The queues ``capacity`` counts now, highest first (the live ones, kept in step)."""
        if live is not None:
            self._capacity_queues = live.names
            self._settings_changed()
            live.on_change(self._settings_changed)
        self.last_received_ms: dict[str, int] = {}
        """Per queue, when this replica last received from it (the monitor's "last")."""
        self.dead_letters: deque[DeadLetter] = deque(maxlen=RECENT_DEAD_LETTERS)
        """This replica's own dead letters since it started, newest last (the monitor's
        list where the broker cannot browse its dead-letter queue: SQS, Pub/Sub)."""

    def _settings_changed(self) -> None:
        """A reload, or a queue added: the log level and the capacity's queues in force
        with their ``wait_slo_s`` (a queue kept keeps its window, wherever it moved)."""
        assert self._live is not None
        self._log_successes = self._live.settings.log.level == "debug"
        names = self._live.names
        if self._capacity is not None:  # the queues, or their wait_slo_s, may have changed
            before = {name: index for index, name in enumerate(self._capacity_queues)}
            self._capacity.reshape([before.get(name) for name in names],
                                   [queue.wait_slo_s for queue in self._live.queues])
        self._capacity_queues = names

    def received(self, message: Message) -> None:
        self.last_received_ms[message.queue] = message.received_ms
        metrics = self.metrics.queue(message.queue, message.priority)
        metrics.received.inc()
        metrics.wait_seconds.observe(max(0.0, (message.received_ms - message.enqueued_ms) / 1000))

    def promoted(self, message: Message) -> None:
        """The starvation bound took ``message`` ahead of higher queues."""
        self.metrics.promotions.labels(message.queue).inc()
        log.info("promoted", queue=message.queue, message_id=message.id,
                 untried_s=message.promoted_after_s)

    def slots_held(self, queue: str, seconds: float) -> None:
        """Free slots were held ``seconds`` for ``queue``, due and short of slots."""
        self.metrics.slots_held.labels(queue).inc(max(0.0, seconds))

    def rate_limited(self, queue: str, seconds: float) -> None:
        """``queue``'s rate kept it out ``seconds`` while it might have taken."""
        self.metrics.rate_limited.labels(queue).inc(max(0.0, seconds))

    def receive_call(self, queue: str, priority: int, *, empty: bool) -> None:
        self.metrics.queue(queue, priority).receive_calls[empty].inc()

    def forwarded(self, message: Message, duration_s: float) -> None:
        self.metrics.queue(message.queue, message.priority).forward_seconds.observe(duration_s)

    def lease_extended(self, message: Message) -> None:
        self.metrics.queue(message.queue, message.priority).lease_extensions.inc()

    def settled(self, event: Settled) -> None:
        message, kind = event.message, event.kind
        settled_ms = now_ms()
        self.metrics.queue(message.queue, message.priority).settled[kind.value].inc()
        if self._capacity is not None and kind is not Kind.RELEASE and self._live is not None:
            index = self._live.index.get(message.queue)  # None: a reload removed its queue
            if index is not None:
                started_ms = event.forwarded_ms or message.received_ms
                self._capacity.served(index, (settled_ms - started_ms) / 1000, message.slots)
        if kind is not Kind.ACK or self._log_successes:  # an ack logs nothing above debug
            self._log(event, settled_ms - (event.forwarded_ms or message.received_ms))
            if kind is Kind.DEAD:
                self.dead_letters.append(DeadLetter(
                    id=message.id, source=message.queue, reason=event.reason,
                    attempts=message.attempt, first_seen_ms=message.enqueued_ms,
                    last_seen_ms=settled_ms))
        if self._journal is not None:
            self._journal.append(JournalRecord(
                message_id=message.id, queue=message.queue, priority=message.priority,
                driver=self._driver_type, attempt=message.attempt,
                enqueued_ms=message.enqueued_ms, received_ms=message.received_ms,
                forwarded_ms=event.forwarded_ms, settled_ms=settled_ms,
                outcome=kind.value, http_status=event.http_status,
                reason=event.reason, bytes=len(message.body),
                promoted_after_s=message.promoted_after_s,
                slots=message.slots if message.slots > 1 else None,
            ))

    def _log(self, event: Settled, duration_ms: int) -> None:
        # Successes at debug, as Dapr logs them: the journal and the metrics count every
        # attempt; the log is for what needs a look.
        kind = event.kind
        if kind is Kind.ACK:
            if self._log_successes:
                log.debug("delivered", duration_ms=duration_ms, **fields(event))
        elif kind is Kind.RELEASE:
            log.debug("returned unseen", **fields(event))
        elif kind is Kind.SETTLE_FAILED:
            log.error("settle failed", error=event.error, **fields(event))
        else:
            log.warning("not delivered", duration_ms=duration_ms, **fields(event))


def fields(event: Settled) -> dict[str, object]:
    """The fields every delivery log line carries (docs/operations/index.md)."""
    message = event.message
    return {
        "message_id": message.id, "queue": message.queue, "priority": message.priority,
        "attempt": message.attempt, "outcome": event.kind.value,
        "http_status": event.http_status, "reason": event.reason,
    }
