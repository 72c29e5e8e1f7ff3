"""Receiving: keep every free worker slot busy, one task per message, and drain on stop.

The receive loop asks the dispatcher for at most as many messages as there are free slots,
starts one worker task per message and waits for a slot to free up when all are busy. A slot
is the app's: it frees as soon as the app has answered (``AppSlot``), not when the settle
that follows is done, so the next message's receive overlaps the previous one's ack (at
concurrency 1 that overlap is what lets the sidecar keep up with a naive receive-POST-ack
loop, bench/throughput.py); the app never has more than ``concurrency`` messages at once,
and the sidecar never holds more than twice that (settles under way included).
``pause()`` closes a gate the loop waits on before each take (in-flight messages carry on)
and abandons a take still waiting (the driver hands back whatever it caught); ``resume()``
opens it again. The take runs in the receive loop's own task and a pause cancels it there
(a task per take raced against a "paused" waiter cost two tasks and three loop turns per
take: at concurrency 1, per message). The app gate (``app.gate.AppGate``) pauses and resumes
it as the app comes and goes, and sets how many messages may be in hand (``capacity``: the
effective concurrency). ``stop()`` stops taking, lets in-flight tasks finish for
``shutdown.grace_s``, then cancels the rest: cancelled workers return their messages at once
(``worker.stopped``: a counted retry if the app had the message, never past the last attempt,
else a release), and what a cancelled take held goes back unseen (``STOPPING_REASON``).
With ``shutdown.mode: finish`` nothing is cancelled: ``stop()`` waits for every task, each
bounded by its own delivery timeout (``cancel.Running``: past it, a retry with reason
``timeout``, as at any other time), its lease kept alive by its worker meanwhile.

Slots (``queues[].slots``): ``concurrency`` counts slots, and a message occupies its
``Message.slots`` of them from its receive until the app answered; the free slots are what a
take may fill (the dispatcher takes a heavy message only when its slots are free), so a
reload that shrinks ``concurrency`` takes nothing until the slots in use plus a message's fit.

``concurrency`` is read from the live settings (``settings.live``) at each take: a reload that
grows it lets the loop take at once (a change wakes it), one that shrinks it takes nothing
until fewer messages than the new value are at the app. Messages are counted per queue by
name, so a queue a reload removed or moved keeps its count until its messages are settled.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from priority_pubsub.core.backoff import Backoff
from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.worker import STOPPING_REASON, Worker
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver

log = get_logger("priority_pubsub.sidecar")
PAUSED_REASON = "receiver paused: returned unseen"
RETAKE_REASON = "queues paused or resumed by an operator: returned unseen"


class AppSlot:
    """One message's place (its slots) among the app's ``concurrency``: taken when the
    message is received, given back once (``free``) when the app answered or the task ended,
    whichever comes first."""

    __slots__ = ("_give_back", "_held")

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back = give_back
        self._held = True

    def free(self) -> None:
        if self._held:
            self._held = False
            self._give_back()


RECEIVE_BACKOFF_MAX_S = 5.0


class Receiver:
    """Keeps the app's slots busy: takes what the dispatcher picks, one worker task per
    message, and drains them on stop.

    It owns the count of what is at the app (slots, per queue) and the pause and stop of
    taking; the dispatcher decides which messages, the worker what happens to each. Kept
    apart so that a pause, a gate or a drain never has to know how messages are chosen.
    """

    def __init__(
        self,
        settings: Settings | LiveSettings,
        dispatcher: Dispatcher,
        worker: Worker,
        observer: DeliveryObserver,
        capacity: Callable[[int], int] | None = None,
    ) -> None:
        self._live = live = LiveSettings.of(settings)
        self._capacity = capacity or (lambda in_flight: live.settings.concurrency - in_flight)
        """How many more messages may be taken with ``in_flight`` in hand."""
        self._grace_s = live.settings.shutdown.grace_s
        self._finish = live.settings.shutdown.mode == "finish"
        self._dispatcher = dispatcher
        self._worker = worker
        self._observer = observer
        self._tasks: dict[asyncio.Task[None], Message] = {}
        """Each worker task and its message (the monitor lists them)."""
        self._at_app = 0
        """Messages the app has or is about to get (slots not yet freed)."""
        self._slots_in_use = 0
        """The slots of ``concurrency`` they occupy: what ``capacity`` counts."""
        self._at_app_by_queue: Counter[str] = Counter()
        """``_at_app`` per queue name: what the capacity rule (reserves, limits) counts."""
        self._slot_freed = asyncio.Event()
        self._open = asyncio.Event()
        self._open.set()
        self._taking: asyncio.Task[None] | None = None
        """The receive loop's task while it waits on a take: what ``pause`` cancels."""
        self._abandoning = False
        """``pause`` cancelled the take (not ``stop``): the loop carries on."""
        self._abandon_reason = PAUSED_REASON
        self._loop: asyncio.Task[None] | None = None
        live.on_change(self._slot_freed.set)  # the concurrency may have grown: look again

    @property
    def _most_held(self) -> int:
        """Messages held at once, settles under way included: a broker slow to settle
        must not let leases pile up while the app keeps answering."""
        return 2 * self._live.settings.concurrency

    @property
    def in_flight(self) -> int:
        """Messages held (until settled), including those whose settle is under way."""
        return len(self._tasks)

    def held(self) -> list[Message]:
        """The messages in flight now (a copy: the monitor reads it between awaits)."""
        return list(self._tasks.values())

    @property
    def at_app(self) -> int:
        return self._at_app

    @property
    def slots_in_use(self) -> int:
        """Slots of ``concurrency`` the messages at the app occupy."""
        return self._slots_in_use

    def has_room(self) -> bool:
        """Whether another message could be taken now (a filling batch can still grow)."""
        return (self._open.is_set() and self._capacity(self._slots_in_use) > 0
                and len(self._tasks) < self._most_held)

    @property
    def at_app_by_queue(self) -> dict[str, int]:
        """Messages of each queue at the app now, by name (a copy)."""
        return dict(self._at_app_by_queue)

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self, reason: str = PAUSED_REASON) -> None:
        """Stop taking new messages (in-flight ones finish) until ``resume``. ``reason`` is
        the release reason of what an abandoned take had already received (the app gate's
        reason, as its releases of messages the app never saw)."""
        self._open.clear()
        self._abandon_reason = reason
        if self._taking is not None and not self._abandoning:
            self._abandoning = True
            self._taking.cancel()

    def resume(self) -> None:
        self._open.set()

    def retake(self) -> None:
        """Abandon the take under way, if any, and start again (the queues to take from
        changed: ``queue_control``); what it held goes back unseen."""
        if self._taking is not None and not self._abandoning:
            self._abandon_reason = RETAKE_REASON
            self._abandoning = True
            self._taking.cancel()

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._receive_loop(), name="receive-loop")

    async def wait(self) -> None:
        """Until the receive loop ends by itself (a bug: it never should); raises its error."""
        if self._loop is not None:
            await self._loop

    async def stop(self) -> None:
        """Stop taking, drain in-flight tasks for the grace period, cancel the rest (mode
        ``finish``: drain them all, each to its end or its timeout)."""
        if self._loop is not None:
            self._abandon_reason = STOPPING_REASON
            self._loop.cancel()
            # its error, if any, was raised by ``wait``: the drain must happen regardless
            await asyncio.gather(self._loop, return_exceptions=True)
        await self._drain()

    async def _receive_loop(self) -> None:
        # at most 5 s between tries: a broker back (a healed network, a restart) is used
        # again within seconds; a failing receive every 5 s costs a down broker nothing
        backoff = Backoff(initial_s=0.5, max_s=RECEIVE_BACKOFF_MAX_S)
        while True:
            if not self._open.is_set():
                await self._open.wait()
            self._slot_freed.clear()  # set again by any slot freed from now on, the take included
            free = min(self._capacity(self._slots_in_use), self._most_held - len(self._tasks))
            if free <= 0:
                await self._slot_freed.wait()
                continue
            try:
                messages = await self._take_unless_paused(free)
            except DriverError as exc:
                log.warning("receive failed, backing off", error=str(exc),
                            retry_in_s=backoff.next_s())
                await backoff.sleep()
                continue
            backoff.reset()
            for message in messages:
                self._start_task(message)

    async def _take_unless_paused(self, free: int) -> list[Message]:
        """``dispatcher.take``, abandoned (its receives cancelled, nothing lost) as soon as
        the receiver is paused: while the app is down or busy nothing is received."""
        task = asyncio.current_task()
        assert task is not None
        self._taking = task
        try:
            return await self._dispatcher.take(free, self._why_abandoned,
                                               busy=self._at_app_by_queue,
                                               slot_freed=self._slot_freed)
        except asyncio.CancelledError:
            # ``uncancel`` counts the cancel requests: a ``stop`` as well still ends the loop
            if self._abandoning and task.uncancel() == 0:
                return []
            raise
        finally:
            self._taking = None
            self._abandoning = False

    def _why_abandoned(self) -> str:
        return self._abandon_reason

    def _start_task(self, message: Message) -> None:
        self._observer.received(message)
        queue = message.queue
        slots = message.slots
        self._at_app += 1
        self._slots_in_use += slots
        self._at_app_by_queue[queue] += 1
        slot = AppSlot(lambda: self._slot_given_back(queue, slots))
        task = asyncio.create_task(self._worker.handle(message, slot.free),
                                   name=f"msg-{message.id}")
        self._tasks[task] = message
        task.add_done_callback(lambda done: self._task_done(done, slot))

    def _slot_given_back(self, queue: str, slots: int) -> None:
        self._at_app -= 1
        self._slots_in_use -= slots
        self._at_app_by_queue[queue] -= 1
        self._slot_freed.set()

    def _task_done(self, task: asyncio.Task[None], slot: AppSlot) -> None:
        self._tasks.pop(task, None)
        slot.free()
        if len(self._tasks) == self._most_held - 1:  # a settle ended: room under the bound
            self._slot_freed.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("worker crashed", error=repr(error))

    async def _drain(self) -> None:
        if not self._tasks:
            return
        if self._finish:
            log.info("draining: every delivery runs to its end or its timeout",
                     in_flight=len(self._tasks))
            await asyncio.wait(set(self._tasks))
            return
        log.info("draining", in_flight=len(self._tasks), grace_s=self._grace_s)
        _, pending = await asyncio.wait(set(self._tasks), timeout=self._grace_s)
        if pending:
            log.warning("grace period over, returning unfinished messages", count=len(pending))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
