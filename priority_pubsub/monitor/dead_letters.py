"""The monitor's dead letters: listed from the broker where it can browse, else from this
replica's own record; requeued (the ``requeue`` path) or deleted by id.

Where the driver is a ``DeadLetterBrowser`` (local, Redis, RabbitMQ, Service Bus) the list *is*
the dead-letter queue: every replica's dead letters; where it is also an ``IdReceiver`` (all
four) requeue and delete act on it: the chosen ids are taken out of the dead-letter queue
(``receive_ids``), then each goes through ``requeue_one`` (publish to its source, then ack:
the step ``priority-pubsub requeue`` takes for every message it moves) or is acked (delete).
Where the driver dead-letters each queue into a queue of its own (``OwnDeadLetterQueues``:
Service Bus, listed by peek) the list is all of those, and a requeued letter goes back to the
queue whose dead-letter queue held it. Elsewhere (SQS, Pub/Sub: a receive would lease the
message and count an attempt) the list is what this replica dead-lettered since it started,
and it cannot act on it: the page says so, and points to ``priority-pubsub requeue``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from priority_pubsub.core.errors import LeaseLost
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.requeue import requeue_one
from priority_pubsub.drivers.base import (
    DEAD_LETTER_SOURCE,
    DeadLetter,
    DeadLetterBrowser,
    Driver,
    IdReceiver,
    OwnDeadLetterQueues,
    Publisher,
)
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.monitor")
BROWSE_LIMIT = 1000
"""The most dead letters one list or one action reads (the page shows the first 200)."""
LISTING_TTL_S = 3.0
"""How long a list read from the broker is shown again (RabbitMQ browses by get and requeue:
not at every refresh of every page); an action here reads it afresh."""


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """What the page's filter form (a bookmarkable GET) selects: substrings of reason and id,
    the exact source queue; empty matches everything."""

    reason: str = ""
    queue: str = ""
    id: str = ""

    def matches(self, letter: DeadLetter) -> bool:
        return ((not self.queue or letter.source == self.queue)
                and self.id in letter.id
                and self.reason.lower() in (letter.reason or "").lower())

    @property
    def empty(self) -> bool:
        return not (self.reason or self.queue or self.id)


@dataclass(frozen=True, slots=True)
class Listing:
    source: str
    """``broker``: the dead-letter queue itself; ``replica``: this replica's record."""
    queue: str | None
    """The dead-letter queue listed (Service Bus: each consumed queue's, comma-separated)."""
    letters: list[DeadLetter]


class DeadLetterDesk:
    def __init__(self, driver: Driver, queue: str | None, queue_names: Collection[str],
                 recorded: Callable[[], Sequence[DeadLetter]]) -> None:
        """``queue_names``: the queues consumed (a live view: a requeue goes back to one)."""
        self._driver = driver
        self._dead_queues: tuple[str, ...] = ()
        """The dead-letter queues listed: ``dead_letter.queue``, or each consumed queue's own
        (Service Bus)."""
        self._sources: dict[str, str] = {}
        """A queue's own dead-letter queue -> that queue (its letters name no source)."""
        if isinstance(driver, OwnDeadLetterQueues):
            self._sources = {driver.dead_letter_queue_of(q): q for q in queue_names}
            self._dead_queues = tuple(self._sources)
        elif queue is not None:
            self._dead_queues = (queue,)
        self._queue_names = queue_names
        self._recorded = recorded
        self._listed: tuple[float, DeadLetterFilter, int, Listing] | None = None
        self._turn = asyncio.Lock()
        """Reads and actions on the dead-letter queue take turns: a RabbitMQ browse holds
        what it read until its channel closes, so an action's ``receive_ids`` meanwhile found
        those letters missing and left them (a page refreshing on a loaded machine hit it);
        and a read begun before an action stored the list as it was before it."""

    @property
    def browsable(self) -> bool:
        """Whether the list is the broker's dead-letter queue."""
        return bool(self._dead_queues) and isinstance(self._driver, DeadLetterBrowser)

    @property
    def actionable(self) -> bool:
        """Whether listed dead letters can be requeued and deleted from here."""
        return (self.browsable and isinstance(self._driver, IdReceiver)
                and isinstance(self._driver, Publisher))

    async def listing(self, selected: DeadLetterFilter, limit: int = BROWSE_LIMIT) -> Listing:
        listed = self._listed
        if listed is not None and listed[1:3] == (selected, limit) and \
                time.monotonic() - listed[0] < LISTING_TTL_S:
            return listed[3]
        async with self._turn:
            found = await self._read(selected, limit)
            self._listed = (time.monotonic(), selected, limit, found)
        return found

    async def _read(self, selected: DeadLetterFilter, limit: int) -> Listing:
        if not self.browsable:
            letters = list(reversed(self._recorded()))  # newest first
            chosen = [letter for letter in letters if selected.matches(letter)][:limit]
            return Listing("replica", self._named(), chosen)
        assert isinstance(self._driver, DeadLetterBrowser)
        chosen = []
        for dead_queue in self._dead_queues:
            if len(chosen) >= limit:
                break
            # unfiltered, only what is shown is read (the page asks at every refresh)
            letters = await self._driver.browse(
                dead_queue, limit - len(chosen) if selected.empty else BROWSE_LIMIT)
            chosen += [letter for letter in letters if selected.matches(letter)]
        return Listing("broker", self._named(), chosen[:limit])

    def _named(self) -> str | None:
        return ", ".join(self._dead_queues) or None

    async def requeue(self, ids: Sequence[str]) -> int:
        """Move these dead letters back to the queue each came from; how many moved. One
        whose source is not a consumed queue is handed back to the dead-letter queue."""
        async with self._turn:
            return await self._requeue(ids)

    async def _requeue(self, ids: Sequence[str]) -> int:
        moved = 0
        for dead_queue, message in await self._take(ids):
            source = (message.attributes.get(DEAD_LETTER_SOURCE)
                      or self._sources.get(dead_queue, ""))
            try:
                if source in self._queue_names:
                    await requeue_one(self._driver, message, dead_queue, source)
                    moved += 1
                else:
                    await self._driver.release(message)
            except LeaseLost as exc:  # the rest of the batch goes on
                log.warning("requeued dead letter was taken by another action meanwhile: "
                            "it may arrive twice", message_id=message.id, error=str(exc))
        self._listed = None
        return moved

    async def delete(self, ids: Sequence[str]) -> int:
        async with self._turn:
            return await self._delete(ids)

    async def _delete(self, ids: Sequence[str]) -> int:
        deleted = 0
        for _, message in await self._take(ids):
            try:
                await self._driver.ack(message)
                deleted += 1
            except LeaseLost as exc:
                log.warning("deleted dead letter was taken by another action meanwhile",
                            message_id=message.id, error=str(exc))
        self._listed = None
        return deleted

    async def _take(self, ids: Sequence[str]) -> list[tuple[str, Message]]:
        self._listed = None  # what follows changes the queue
        if not self.actionable:
            raise ActionUnavailable(
                "this driver cannot take chosen dead letters out of its queue: use "
                "`priority-pubsub requeue`")
        assert isinstance(self._driver, IdReceiver)
        wanted = list(dict.fromkeys(ids))[:BROWSE_LIMIT]
        taken: list[tuple[str, Message]] = []
        for dead_queue in self._dead_queues:
            if not wanted:
                break
            got = await self._driver.receive_ids(dead_queue, wanted)
            taken += [(dead_queue, message) for message in got]
            found = {message.id for message in got}
            wanted = [i for i in wanted if i not in found]
        return taken


class ActionUnavailable(Exception):
    """An action this deployment cannot do (the page says why; the API answers 409)."""

