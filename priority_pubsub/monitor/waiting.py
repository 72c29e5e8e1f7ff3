"""The monitor's waiting messages: the first ones of a queue, listed where the broker can
list a queue without receiving from it, and one promoted to a higher queue.

A promote is ``delivery.requeue.promote_one``, the requeue's own step (publish to the
target, then ack the original; Redis: one script). Where the broker can address one waiting
message: local, yes; Redis, only while this consumer group is the stream's only one;
RabbitMQ and Service Bus within the first messages waiting (``receive_ids`` scans up to
1,000, as the dead-letter actions do); SQS and Pub/Sub cannot (a receive takes the next
messages, leases them and counts an attempt): the page shows no promote button and the API
answers 409 with why. A message a worker took meanwhile answers 409: it is never in both
queues.

The list is read only for the queue the page asks about (``?waiting=QUEUE``), shown again
for a few seconds (RabbitMQ lists a queue by taking and handing back its messages).
"""

from __future__ import annotations

import time
from collections.abc import Collection

from priority_pubsub.delivery.requeue import CannotPromote, promote_one, why_not_promotable
from priority_pubsub.drivers.base import DeadLetter, DeadLetterBrowser, Driver
from priority_pubsub.monitor.dead_letters import LISTING_TTL_S, ActionUnavailable

SHOWN_WAITING = 20
"""The most waiting messages the page lists for one queue."""


class WaitingDesk:
    def __init__(self, driver: Driver, queue_names: Collection[str]) -> None:
        """``queue_names``: the queues consumed, highest first (a live view)."""
        self._driver = driver
        self._queue_names = queue_names
        self.why_not = why_not_promotable(driver)
        """Why this broker cannot promote at all (None: it can)."""
        self._listed: tuple[float, str, list[DeadLetter]] | None = None

    async def listing(self, queue: str) -> list[DeadLetter]:
        """The first messages waiting in ``queue`` (none where the broker cannot list)."""
        if self.why_not is not None or queue not in self._queue_names:
            return []
        listed = self._listed
        if listed is not None and listed[1] == queue and \
                time.monotonic() - listed[0] < LISTING_TTL_S:
            return listed[2]
        assert isinstance(self._driver, DeadLetterBrowser)
        letters = await self._driver.browse(queue, SHOWN_WAITING)
        self._listed = (time.monotonic(), queue, letters)
        return letters

    def higher_than(self, queue: str) -> list[str]:
        """The queues above ``queue``, highest first: where it may be promoted to."""
        names = list(self._queue_names)
        return names[:names.index(queue)] if queue in names else []

    async def promote(self, queue: str, message_id: str, to_queue: str) -> str:
        """Move one waiting message up to ``to_queue``: its id there. ``ActionUnavailable``
        (409) when the broker cannot address it or it is not waiting any more."""
        if to_queue not in self.higher_than(queue):
            raise ValueError(f"{to_queue!r} is not a queue above {queue!r}")
        try:
            moved = await promote_one(self._driver, queue, message_id, to_queue)
        except CannotPromote as exc:
            raise ActionUnavailable(str(exc)) from None
        self._listed = None  # the next page shows it gone
        return moved
