"""One worker's handling of one message: admit, transform, send, decide, settle.

The app channel returns an ``Outcome`` value; the ``Settler`` turns it into exactly one
driver call and one ``settled`` event. Settling is shielded from cancellation (a shutdown
must not leave a half-settled message). The request to the app is sent through ``running``
(``cancel.Running``): its queue's timeout, or any other cancel, cuts it short with an outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from priority_pubsub.app.gate import AppGate
from priority_pubsub.app.request import AppChannel, NativeRequestBuilder, NeverSent, RequestBuilder
from priority_pubsub.core.errors import TransformError
from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.delivery.cancel import Running, is_by_operator
from priority_pubsub.delivery.leases import LeaseKeeper
from priority_pubsub.delivery.settlement import admit
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.drivers.base import Driver
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver
from priority_pubsub.telemetry.tracing import NO_TRACE, NO_TRACING, AttemptTrace, DeliveryTracer
from priority_pubsub.transforms.base import Payload, TransformChain

log = get_logger("priority_pubsub.delivery")
SHUTDOWN_REASON = "sidecar shutting down: returned to the queue"
"""A delivery the stop cut short while the app had it: a retry at once, counted."""
STOPPING_REASON = "sidecar shutting down: returned unseen"
"""A message the stop found before it reached the app: released, uncounted where the
broker can (the receiver's abandoned take says the same)."""


@dataclass(slots=True)
class Attempt:
    message: Message
    forwarded_ms: int | None = None
    outcome: Outcome | None = None
    trace: AttemptTrace = NO_TRACE
    payload: Payload | None = None
    """The transformed payload, for the transforms' settle hooks (claim checks); None when
    there are no transforms (nothing to call after the settle)."""


def stopped(attempt: Attempt, cancel: asyncio.CancelledError) -> Outcome:
    """What an attempt the stop cancelled settles as (with ``shutting_down``: at once, never
    a dead letter): a retry when its request had left for the app, which counts the attempt;
    a release when it had not (before the send, or a ``NeverSent`` bulk entry)."""
    if attempt.forwarded_ms is None or isinstance(cancel, NeverSent):
        return Outcome.release(STOPPING_REASON)
    return Outcome.retry(SHUTDOWN_REASON)


class Worker:
    """Shared by all worker tasks: holds no per-message state between calls. The retry policy
    and the timeouts are read from the live settings at each delivery (a reload changes
    them for the next one; a delivery under way keeps the timeout it started with)."""

    def __init__(
        self,
        settings: Settings | LiveSettings,
        driver: Driver,
        channel: AppChannel,
        observer: DeliveryObserver,
        settler: Settler,
        request_builder: RequestBuilder | None = None,
        tracer: DeliveryTracer = NO_TRACING,
        *,
        gate: AppGate | None = None,
    ) -> None:
        self._live = live = LiveSettings.of(settings)
        self._tracer = tracer
        self._gate = gate
        """None: no app gating (tests of what follows a delivery)."""
        self._driver = driver
        self._channel = channel
        self._observer = observer
        self._settler = settler
        self._chain = TransformChain.from_config(live.settings.transforms)
        self._request_builder = request_builder or NativeRequestBuilder(live)
        self.running = Running()
        """The deliveries at the app now: what a cancel (the timeout's, an operator's) finds."""

    async def handle(self, message: Message, answered: Callable[[], None] = lambda: None) -> None:
        """Run one attempt to its settled end. Cancellation (the stop, past its grace period)
        returns the message at once (``stopped``).

        ``answered`` is called once the app is done with the message (it answered, or the
        attempt ended without reaching it), before the settle: the receiver counts the
        app's concurrency up to there, so the next message's receive overlaps this settle."""
        attempt = Attempt(message, trace=self._tracer.attempt(message))
        keeper = LeaseKeeper(self._driver, message, self._live.settings.lease.duration_s,
                             self._observer)
        keeper.start()
        try:
            attempt.outcome = await self._decide(attempt)
        except asyncio.CancelledError as stop:
            attempt.outcome = stopped(attempt, stop)
            await keeper.stop()
            await asyncio.shield(self._settle(attempt, shutting_down=True))
            raise
        except Exception as exc:
            # A bug must not strand the message under a lease extended forever: it is
            # retried with backoff and, if it keeps failing, dead-lettered with this reason.
            log.exception("internal error while delivering", message_id=message.id,
                          queue=message.queue)
            attempt.outcome = Outcome.retry(f"internal error: {type(exc).__name__}: {exc}"[:300])
        answered()
        await keeper.stop()
        await asyncio.shield(self._settle(attempt, shutting_down=False))

    async def _settle(self, attempt: Attempt, *, shutting_down: bool) -> None:
        assert attempt.outcome is not None
        settled = await self._settler.settle(attempt.message, attempt.outcome,
                                             forwarded_ms=attempt.forwarded_ms,
                                             shutting_down=shutting_down, trace=attempt.trace)
        if settled.kind is not Kind.SETTLE_FAILED:
            await self._after_settle(attempt, Outcome(settled.kind, settled.http_status,
                                                      settled.reason))

    async def _decide(self, attempt: Attempt) -> Outcome:
        message = attempt.message
        if message.defect is not None:
            return Outcome.dead(f"malformed message: {message.defect}")
        refused = admit(message.attempt, self._live.settings.retry,
                        releases_counted=self._driver.releases_count_as_attempts)
        if refused is not None:
            return refused
        payload = Payload(message.body, dict(message.attributes), message.content_type)
        if not self._chain.empty:
            try:
                payload = await self._chain.apply(payload)
            except TransformError as exc:
                if exc.retriable:
                    return Outcome.retry(f"transform unavailable: {exc}")
                return Outcome.dead(f"transform failed: {exc}")
            attempt.payload = payload  # for the settle hooks
        prepared = self._request_builder.prepare(message, payload)
        if isinstance(prepared, Outcome):
            return prepared
        if self._gate is not None and (blocked := self._gate.blocked()) is not None:
            # Paused since this message was received: hand it back, the app never saw it.
            return self._gate.settle_release(message, Outcome.release(blocked))
        if prepared.request.adjusted_headers:
            log.warning("headers made safe or left out: characters a header cannot carry",
                        message_id=message.id, queue=message.queue,
                        headers=list(prepared.request.adjusted_headers))
        attempt.forwarded_ms = now_ms()
        started = time.perf_counter()
        request = attempt.trace.inject(prepared.request, prepared.url)
        if request is not prepared.request:  # tracing on: the app gets its traceparent
            prepared = dataclasses.replace(prepared, request=request)
        outcome = await self.running.send(
            message, self._channel.deliver(prepared),
            self._live.timeout_s(message.queue))
        self._observer.forwarded(message, time.perf_counter() - started)
        if self._gate is None or is_by_operator(outcome):  # the app did not fail: no lesson
            return outcome
        return self._gate.observe(message, outcome)

    async def _after_settle(self, attempt: Attempt, outcome: Outcome) -> None:
        """The transforms' settle hooks; their failures are logged, never change the outcome
        (the message is settled already)."""
        if attempt.payload is None:
            return
        try:
            await self._chain.after_settle(outcome, attempt.payload)
        except Exception as exc:
            log.warning("after-settle hook failed", message_id=attempt.message.id,
                        queue=attempt.message.queue, error=repr(exc))
