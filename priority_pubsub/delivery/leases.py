"""The lease keeper: extends a message's lease while the app works on it.

Extends every ``duration/3`` so two consecutive failures still leave time before expiry. A
``LeaseLost`` stops the keeper (logged as an error): the later settle will be refused by the
driver and reported, never silently attempted as if nothing happened.
"""

from __future__ import annotations

import asyncio
import contextlib

from priority_pubsub.core.errors import DriverError, LeaseLost
from priority_pubsub.core.message import Message
from priority_pubsub.drivers.base import Driver
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver

log = get_logger(__name__)


class LeaseKeeper:
    """Extends one message's lease while the app works on it.

    Most deliveries finish long before the first extension is due, so ``start`` only arms a
    timer and the extending task is created when the timer fires: a task created and
    cancelled for every message was a visible cost per delivery in the sidecar's profile.
    """

    def __init__(
        self, driver: Driver, message: Message, duration_s: float, observer: DeliveryObserver
    ) -> None:
        self._driver = driver
        self._message = message
        self._duration_s = duration_s
        self._observer = observer
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._duration_s / 3, self._begin)

    def _begin(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._keep(), name=f"lease-{self._message.id}")

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _keep(self) -> None:
        """Extend now (the first interval has passed), then every interval until stopped."""
        message = self._message
        interval = self._duration_s / 3
        while True:
            try:
                await self._driver.extend(message, self._duration_s)
            except LeaseLost as exc:
                log.error("lease lost while the app works", message_id=message.id,
                          queue=message.queue, error=str(exc))
                return
            except DriverError as exc:
                # Try again sooner while the current lease still runs.
                log.warning("lease extension failed", message_id=message.id,
                            queue=message.queue, error=str(exc), retriable=exc.retriable)
                interval = max(0.5, min(interval, message.lease.remaining_s() / 3))
                await asyncio.sleep(interval)
                continue
            interval = self._duration_s / 3
            self._observer.lease_extended(message)
            await asyncio.sleep(interval)
