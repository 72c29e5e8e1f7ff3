"""An idle round's waits: one long poll per queue, raced against what ends the round.

When every queue is empty the dispatcher waits on all of them at once, so a message on any
queue wakes it; the first wait to bring messages ends the round, and the others are
cancelled (a driver's cancelled wait loses nothing: ``drivers.base.Driver.receive``). What
every finished wait brought is then the round's, the late ones' included.
"""

from __future__ import annotations

import asyncio
from typing import Any

from priority_pubsub.core.message import Message


class Waits:
    """The receives of one idle round and the changes that end it early.

    Kept apart from the dispatcher's choice of what to wait on, so the racing, the
    cancelling and the collecting read in one place: that is where a message could be lost.
    """

    __slots__ = ("_consumers_changed", "_idle_wait_s", "_receives", "_rules_changed")

    def __init__(self, receives: list[asyncio.Task[list[Message]]],
                 rules_changed: asyncio.Future[None],
                 consumers_changed: asyncio.Task[list[Message]] | None,
                 idle_wait_s: float) -> None:
        self._receives = receives
        self._rules_changed = rules_changed
        """Resolved by a reload: the rules the waits were chosen by are gone."""
        self._consumers_changed = consumers_changed
        """Ends when a stream comes or goes: a queue to wait on came or went."""
        self._idle_wait_s = idle_wait_s

    async def until_one_brings(self) -> None:
        """Until a wait brings a message, every wait ended (a driver's own long poll may be
        shorter than ours: SQS's ``wait_time_s``, Dapr's ``messageWaitTimeSeconds``, can be
        1 s), the streams changed or a reload changed the rules; with no wait at all (every
        queue shut out), until then or the idle wait's end."""
        receives = self._receives
        pending: set[asyncio.Future[Any]] = {*receives, self._rules_changed}
        if self._consumers_changed is not None:
            pending.add(self._consumers_changed)
        while not receives or not all(task.done() for task in receives):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED,
                                               timeout=None if receives else self._idle_wait_s)
            if not done or self._consumers_changed in done or self._rules_changed in done:
                return  # a queue to wait on came or went: the next round waits anew
            if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                return

    async def end(self) -> None:
        """Cancel what still runs, and wait for the cancelled receives to give back."""
        self._rules_changed.cancel()
        consumers_changed = self._consumers_changed
        if consumers_changed is not None and not consumers_changed.done():
            consumers_changed.cancel()
            await asyncio.gather(consumers_changed, return_exceptions=True)
        # only the waits still running need cancelling and awaiting: a gather of done tasks
        # still costs a loop turn, on the path of every wake-up
        unfinished = [task for task in self._receives if not task.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)

    def brought(self) -> list[Message]:
        """What the finished waits received; a wait's error only when none brought any."""
        woken: list[Message] = []
        errors: list[BaseException] = []
        for task in self._receives:
            if task.cancelled():
                continue
            if (error := task.exception()) is not None:
                errors.append(error)
            else:
                woken += task.result()
        if not woken and errors:
            raise errors[0]
        return woken
