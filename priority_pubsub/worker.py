"""One worker's handling of one message: transform, forward, decide, settle, journal.

The forwarder returns an ``Outcome`` value; this module turns it into exactly one driver
call. Settling is shielded from cancellation (a shutdown must not leave a half-settled
message) and a retriable settle failure is retried until the lease would have lapsed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from priority_pubsub.backoff import Backoff
from priority_pubsub.config import Settings
from priority_pubsub.delivery import Delivery, DropHandler, NativeDelivery
from priority_pubsub.drivers.base import Driver
from priority_pubsub.errors import DriverError, LeaseLost, TransformError
from priority_pubsub.forwarder import Forwarder
from priority_pubsub.journal import JournalRecord, JournalWriter
from priority_pubsub.leases import LeaseKeeper
from priority_pubsub.logs import get_logger
from priority_pubsub.message import Message, now_ms
from priority_pubsub.metrics import Metrics
from priority_pubsub.outcome import Kind, Outcome
from priority_pubsub.tracing import NO_TRACE, NO_TRACING, AttemptTrace, DeliveryTracer
from priority_pubsub.transforms.base import Payload, TransformChain

log = get_logger("priority_pubsub.delivery")
SHUTDOWN_REASON = "sidecar shutting down: returned to the queue"
_Call = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class Attempt:
    message: Message
    forwarded_ms: int | None = None
    outcome: Outcome | None = None
    trace: AttemptTrace = NO_TRACE


class Worker:
    """Shared by all worker tasks: holds no per-message state between calls."""

    def __init__(
        self,
        settings: Settings,
        driver: Driver,
        forwarder: Forwarder,
        metrics: Metrics,
        journal: JournalWriter | None,
        delivery: Delivery | None = None,
        tracer: DeliveryTracer = NO_TRACING,
    ) -> None:
        self._settings = settings
        self._tracer = tracer
        self._driver = driver
        self._forwarder = forwarder
        self._metrics = metrics
        self._journal = journal
        self._chain = TransformChain.from_names(settings.transforms)
        self._delivery = delivery or NativeDelivery(settings)
        self._log_successes = settings.log.level == "debug"

    async def handle(self, message: Message) -> None:
        """Run one attempt to its settled end. Cancellation returns the message at once."""
        attempt = Attempt(message, trace=self._tracer.attempt(message))
        keeper = LeaseKeeper(self._driver, message, self._settings.lease.duration_s,
                             self._metrics)
        keeper.start()
        try:
            attempt.outcome = await self._decide(attempt)
        except asyncio.CancelledError:
            attempt.outcome = Outcome.retry(SHUTDOWN_REASON)
            await keeper.stop()
            await asyncio.shield(self._settle(attempt, immediate=True))
            raise
        except Exception as exc:
            # A bug must not strand the message under a lease extended forever: it is
            # retried with backoff and, if it keeps failing, dead-lettered with this reason.
            log.exception("internal error while delivering", message_id=message.id,
                          queue=message.queue)
            attempt.outcome = Outcome.retry(f"internal error: {type(exc).__name__}: {exc}"[:300])
        await keeper.stop()
        await asyncio.shield(self._settle(attempt, immediate=False))

    async def _decide(self, attempt: Attempt) -> Outcome:
        message = attempt.message
        if message.defect is not None:
            return Outcome.dead(f"unreadable message: {message.defect}")
        max_attempts = self._settings.retry.max_attempts
        # Where a release counts as an attempt (SQS, Pub/Sub, Service Bus), a count past the
        # limit may be releases the app never saw: deliver once more, the answer decides.
        if message.attempt > max_attempts and not self._driver.releases_count_as_attempts:
            return Outcome.dead(f"max attempts ({max_attempts}) exceeded before delivery")
        try:
            payload = self._chain(
                Payload(message.body, dict(message.attributes), message.content_type)
            )
        except TransformError as exc:
            return Outcome.dead(f"transform failed: {exc}")
        prepared = self._delivery.prepare(message, payload)
        if isinstance(prepared, Outcome):
            return prepared
        attempt.forwarded_ms = now_ms()
        started = time.perf_counter()
        request = attempt.trace.inject(prepared.request, prepared.url)
        outcome = await self._forwarder.forward(prepared.url, request)
        self._metrics.queue(message.queue, message.priority).forward_seconds.observe(
            time.perf_counter() - started
        )
        return outcome

    async def _settle(self, attempt: Attempt, *, immediate: bool) -> None:
        message, outcome = attempt.message, attempt.outcome
        assert outcome is not None
        outcome = self._final_outcome(message, outcome)
        delay_s = 0.0 if immediate else self._settings.retry.delay_for(message.attempt)
        decided = outcome
        attempt.trace.settling()
        try:
            await self._with_retries(message, lambda: self._settle_call(message, decided, delay_s))
        except LeaseLost as exc:
            outcome = Outcome(outcome.kind, outcome.http_status,
                              f"{outcome.reason or outcome.kind}; settle refused: {exc}")
            log.error("settle refused: lease lost", **self._fields(message, outcome))
        except Exception as exc:  # DriverError, or a third-party driver's bug: report, go on
            log.error("settle failed", error=repr(exc), **self._fields(message, outcome))
            outcome = Outcome(outcome.kind, outcome.http_status,
                              f"{outcome.reason or outcome.kind}; settle failed: {exc}")
        self._record(attempt, outcome)

    def _final_outcome(self, message: Message, outcome: Outcome) -> Outcome:
        max_attempts = self._settings.retry.max_attempts
        if outcome.kind is Kind.RETRY and outcome.reason != SHUTDOWN_REASON \
                and message.attempt >= max_attempts:
            return Outcome.dead(
                f"max attempts ({max_attempts}) reached; last: {outcome.reason}",
                outcome.http_status,
            )
        return outcome

    async def _settle_call(self, message: Message, outcome: Outcome, delay_s: float) -> None:
        if outcome.kind is Kind.ACK:
            await self._driver.ack(message)
        elif outcome.kind is Kind.RETRY:
            await self._driver.retry(message, delay_s)
        elif outcome.kind is Kind.RELEASE:
            await self._driver.release(message, delay_s)
        elif outcome.kind is Kind.DROP and isinstance(self._driver, DropHandler):
            await self._driver.drop(message, outcome.reason or outcome.kind.value)
        elif self._driver.dead_letter_enabled:
            await self._driver.dead_letter(message, outcome.reason or outcome.kind.value)
        else:
            # No dead-letter destination: delete, but the journal and the log keep the trace.
            await self._driver.ack(message)

    async def _with_retries(self, message: Message, call: _Call) -> None:
        backoff = Backoff(initial_s=0.1, max_s=5.0)
        while True:
            try:
                await call()
                return
            except DriverError as exc:
                if not exc.retriable or message.lease.remaining_s() < backoff.next_s():
                    raise
                log.warning("settle failed, retrying", message_id=message.id,
                            queue=message.queue, error=str(exc))
                await backoff.sleep()

    def _record(self, attempt: Attempt, outcome: Outcome) -> None:
        message = attempt.message
        settled = now_ms()
        attempt.trace.end(outcome)
        self._metrics.queue(message.queue, message.priority).settled[outcome.kind.value].inc()
        duration_ms = settled - (attempt.forwarded_ms or message.received_ms)
        # Successes at debug, as Dapr logs them: the journal and the metrics count every
        # attempt; the log is for what needs a look.
        if outcome.kind is not Kind.ACK:
            log.warning("not delivered", duration_ms=duration_ms,
                        **self._fields(message, outcome))
        elif self._log_successes:
            log.debug("delivered", duration_ms=duration_ms, **self._fields(message, outcome))
        if self._journal is not None:
            self._journal.append(JournalRecord(
                message_id=message.id, queue=message.queue, priority=message.priority,
                driver=self._settings.driver.type, attempt=message.attempt,
                enqueued_ms=message.enqueued_ms, received_ms=message.received_ms,
                forwarded_ms=attempt.forwarded_ms, settled_ms=settled,
                outcome=outcome.kind.value, http_status=outcome.http_status,
                reason=outcome.reason, bytes=len(message.body),
            ))

    @staticmethod
    def _fields(message: Message, outcome: Outcome) -> dict[str, object]:
        return {
            "message_id": message.id, "queue": message.queue, "priority": message.priority,
            "attempt": message.attempt, "outcome": outcome.kind.value,
            "http_status": outcome.http_status, "reason": outcome.reason,
        }
