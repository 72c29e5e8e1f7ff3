"""Every change to a message at the broker goes through ``Settler.settle``.

It plans the settle (``settlement.plan_settlement``), makes the one driver call — retried
with backoff while the lease lasts when the error is retriable — and reports one
``Settled`` event, which the observer journals and counts. A settle that failed or was
refused is reported as ``settle_failed``: the broker did not confirm what was asked, and
delivers the message again when its lease ends, unless a call did reach it and only the
answer was lost on the way back (a network cut), in which case what was asked was done.
"""

from __future__ import annotations

from priority_pubsub.app.request import DropHandler
from priority_pubsub.core.backoff import Backoff
from priority_pubsub.core.errors import DriverError, LeaseLost
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.delivery.settlement import Settlement, Verb, plan_settlement
from priority_pubsub.drivers.base import Driver
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver, Settled
from priority_pubsub.telemetry.tracing import NO_TRACE, AttemptTrace

log = get_logger("priority_pubsub.delivery")


class Settler:
    """The one way a message's fate reaches the broker: planned, retried, reported.

    Every ack, retry, release and dead-letter goes through it, so each is journaled and
    counted once, the retry policy in force is applied the same way everywhere, and a
    broker's refusal is reported instead of raised into the delivery path.
    """

    def __init__(self, settings: Settings | LiveSettings, driver: Driver,
                 observer: DeliveryObserver) -> None:
        self._live = LiveSettings.of(settings)
        """The retry policy is read from it at each settle (a reload may change it)."""
        self._driver = driver
        self._observer = observer
        # once: a runtime-checkable isinstance costs ~10 us, too much for every settle
        self._drop_handled = isinstance(driver, DropHandler)

    async def settle(
        self,
        message: Message,
        outcome: Outcome,
        *,
        forwarded_ms: int | None = None,
        shutting_down: bool = False,
        trace: AttemptTrace = NO_TRACE,
    ) -> Settled:
        """Settle ``message`` as ``outcome`` says and return what happened; never raises a
        driver's error (it is reported as ``settle_failed``). Callers shield it."""
        plan = plan_settlement(outcome, message.attempt, self._live.settings.retry,
                               shutting_down=shutting_down,
                               dead_letter_enabled=self._driver.dead_letter_enabled,
                               drop_handled=self._drop_handled)
        event = Settled(message, plan.kind, plan.reason, plan.http_status, forwarded_ms)
        trace.settling()
        try:
            await self._call_with_retries(message, plan)
        except Exception as exc:  # DriverError, or a third-party driver's bug: report, go on
            refused = isinstance(exc, LeaseLost)
            what = "settle refused: lease lost" if refused else "settle failed"
            detail = str(exc) if refused else repr(exc)
            reason = f"{plan.kind.value}: {plan.reason}" if plan.reason else plan.kind.value
            event = Settled(message, Kind.SETTLE_FAILED, f"{reason}; {what}: {exc}",
                            plan.http_status, forwarded_ms, detail)
        if trace is not NO_TRACE:
            trace.end(Outcome(event.kind, event.http_status, event.reason))
        self._observer.settled(event)
        return event

    async def release(self, message: Message, reason: str) -> None:
        """Hand back a message the app never saw (journaled ``release`` with ``reason``)."""
        await self.settle(message, Outcome.release(reason))

    async def _call_with_retries(self, message: Message, plan: Settlement) -> None:
        backoff: Backoff | None = None  # made on the first failure: most settles have none
        while True:
            try:
                await self._call(message, plan)
                return
            except DriverError as exc:
                backoff = backoff or Backoff(initial_s=0.1, max_s=5.0)
                if not exc.retriable or message.lease.remaining_s() < backoff.next_s():
                    raise
                log.warning("settle failed, retrying", message_id=message.id,
                            queue=message.queue, error=str(exc))
                await backoff.sleep()

    async def _call(self, message: Message, plan: Settlement) -> None:
        driver = self._driver
        if plan.verb is Verb.ACK:
            await driver.ack(message)
        elif plan.verb is Verb.RETRY:
            await driver.retry(message, plan.delay_s)
        elif plan.verb is Verb.RELEASE:
            await driver.release(message, plan.delay_s)
        elif plan.verb is Verb.DROP:
            assert isinstance(driver, DropHandler)
            await driver.drop(message, plan.reason or plan.kind.value)
        else:
            await driver.dead_letter(message, plan.reason or plan.kind.value)
