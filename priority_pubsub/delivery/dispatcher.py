"""Receiving: fill free worker slots from the queues, in the scheduler's order.

Never takes more messages than free slots (no prefetch: another replica should get them).
When every queue is empty it waits on all queues at once with the broker's own long poll /
wake-up, so an idle sidecar costs almost nothing, and a message arriving on a higher queue
never waits behind a long poll on a lower one. After waking it re-checks the higher queues,
and returns any surplus at once: the lowest priorities (strict) or what the weighted draw
left (weighted). A take that is abandoned (the receiver pauses or stops) hands back at once
what it had already received, and one that fails part-way returns it: otherwise those
messages stayed leased by nobody until their lease ran out, an attempt spent unseen.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, Protocol

from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.scheduler import plan, share_by_weight
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.drivers.base import Driver
from priority_pubsub.settings.config import Settings
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver

log = get_logger(__name__)


class Consumers(Protocol):
    """Who takes which queue's messages now (``app_channel.streams.StreamHub``)."""

    def idle(self) -> frozenset[str]:
        """Queues nobody takes from now."""
        ...

    async def changed(self) -> None:
        """Until that changes."""
        ...


IDLE_WAIT_S = 20.0
SURPLUS_REASON = "surplus: returned unseen"
ABANDONED_REASON = "take abandoned: returned unseen"
"""Why an abandoned take handed back what it held, when its caller gives no reason."""


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        driver: Driver,
        observer: DeliveryObserver,
        settler: Settler,
        rng: random.Random | None = None,
        idle_wait_s: float = IDLE_WAIT_S,
        consumers: Consumers | None = None,
    ) -> None:
        self._settings = settings
        self._driver = driver
        self._observer = observer
        self._settler = settler
        self._rng = rng or random.Random()
        self._names = settings.queue_names
        self._weights = [q.weight for q in settings.queues]
        self._idle_wait_s = idle_wait_s
        self._quiet = False
        self._consumers = consumers
        """Queues nobody takes from now (streamed topics without a stream): left alone."""
        self._in_hand: list[Message] = []
        """What the take under way has received and not yet returned or handed back."""
        self.healthy = True

    async def take(
        self, free: int, why_abandoned: Callable[[], str] = lambda: ABANDONED_REASON
    ) -> list[Message]:
        """Up to ``free`` messages, highest priority first; waits while all queues are empty.

        After a waiting round in which every queue stayed empty, the next round waits again
        at once: the waits covered every queue, so a sweep would only repeat their answer
        (on SQS that halves the idle cost to one ReceiveMessage per queue per long poll).
        A receive that fails after others succeeded does not cost their messages: the take
        returns them (the error is logged; the next take meets it again and the receiver
        backs off). Cancelled (a pause, a stop), it hands back what it had received, the
        reason asked of ``why_abandoned`` then (the pause's, e.g. the app gate's).
        """
        self._in_hand = []
        try:
            try:
                taken = await self._take(free)
            except DriverError:
                if not self._in_hand:
                    raise
                taken = await self._keep_best(self._in_hand, free)
        except BaseException:
            in_hand, self._in_hand = self._in_hand, []
            if in_hand:  # shielded: a second cancel must not strand the rest
                await asyncio.shield(self._hand_back(in_hand, why_abandoned()))
            raise
        self._in_hand = []
        return taken

    async def _take(self, free: int) -> list[Message]:
        if not self._quiet:
            messages = await self._sweep(free, frozenset())
            if messages:
                return messages
        woken = await self._wait_any(free)
        self._quiet = not woken
        if not woken:
            return []
        if self._settings.scheduling == "strict":
            best = min(m.priority for m in woken)
            higher = frozenset(range(best, len(self._names)))
            woken = await self._sweep(free, higher) + woken
        return await self._keep_best(woken, free)

    def _idle(self) -> frozenset[int]:
        if self._consumers is None:
            return frozenset()
        idle = self._consumers.idle()
        return frozenset(i for i, name in enumerate(self._names) if name in idle)

    async def _sweep(self, free: int, skip: frozenset[int]) -> list[Message]:
        got: list[Message] = []
        empty = set(skip) | self._idle()
        while len(got) < free:
            picks = plan(self._settings.scheduling, self._weights, free - len(got),
                         frozenset(empty), self._rng)
            if not picks:
                break
            for index, count in picks:
                wanted = min(count, free - len(got))
                if wanted <= 0:
                    break
                batch = await self._receive(index, wanted, 0)
                got += batch
                if len(batch) < wanted:
                    empty.add(index)
        return got

    async def _wait_any(self, free: int) -> list[Message]:
        idle = self._idle()
        tasks = [
            asyncio.create_task(self._receive(i, free, self._idle_wait_s), name=f"wait-{name}")
            for i, name in enumerate(self._names) if i not in idle
        ]
        consumers_changed = (asyncio.create_task(self._consumers_changed(), name="consumers")
                             if self._consumers is not None else None)
        try:
            pending: set[asyncio.Task[Any]] = set(tasks)
            if consumers_changed is not None:
                pending.add(consumers_changed)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if consumers_changed in done:
                    break  # a queue to wait on came or went: the next round waits anew
                if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                    break
        finally:
            # only the waits still running need cancelling and awaiting: a gather of done
            # tasks still costs a loop turn, on the path of every wake-up
            if consumers_changed is not None and not consumers_changed.done():
                consumers_changed.cancel()
                await asyncio.gather(consumers_changed, return_exceptions=True)
            unfinished = [task for task in tasks if not task.done()]
            for task in unfinished:
                task.cancel()
            if unfinished:
                await asyncio.gather(*unfinished, return_exceptions=True)
        woken: list[Message] = []
        errors: list[BaseException] = []
        for task in tasks:
            if task.cancelled():
                continue
            if (error := task.exception()) is not None:
                errors.append(error)
            else:
                woken += task.result()
        if not woken and errors:
            raise errors[0]
        return woken

    async def _consumers_changed(self) -> list[Message]:
        assert self._consumers is not None
        await self._consumers.changed()
        return []

    async def _keep_best(self, messages: list[Message], free: int) -> list[Message]:
        keep, surplus = self._choose(messages, free)
        self._in_hand = keep  # the surplus is the releases' below, not an abandoned take's
        if surplus:  # settles like any other (journaled, counted), all of them even if cancelled
            await asyncio.shield(self._hand_back(surplus, SURPLUS_REASON))
        return keep

    def _choose(self, messages: list[Message], free: int) -> tuple[list[Message], list[Message]]:
        """Which woken messages to keep for ``free`` slots: the highest priorities (strict),
        or a share drawn by weight (weighted); the rest is surplus, handed back."""
        if self._settings.scheduling == "strict" or len(messages) <= free:
            ordered = sorted(messages, key=lambda m: m.priority)
            return ordered[:free], ordered[free:]
        by_queue: dict[str, list[Message]] = {name: [] for name in self._names}
        for message in messages:
            by_queue[message.queue].append(message)
        queues = list(by_queue.values())
        counts = share_by_weight([len(q) for q in queues], self._weights, free, self._rng)
        keep = [m for queue, n in zip(queues, counts, strict=True) for m in queue[:n]]
        surplus = [m for queue, n in zip(queues, counts, strict=True) for m in queue[n:]]
        return keep, surplus

    async def _receive(self, index: int, count: int, wait_s: float) -> list[Message]:
        name = self._names[index]
        try:
            batch = await self._driver.receive(name, count, wait_s)
        except DriverError as exc:
            self.healthy = False
            log.warning("receive failed", queue=name, error=str(exc), retriable=exc.retriable)
            raise
        self.healthy = True
        self._in_hand += batch
        self._observer.receive_call(name, index, empty=not batch)
        return batch

    async def _hand_back(self, messages: list[Message], reason: str) -> None:
        await asyncio.gather(*(self._settler.release(m, reason) for m in messages),
                             return_exceptions=True)

