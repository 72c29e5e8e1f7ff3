"""Receiving: fill free worker slots from the queues, in the scheduler's order.

Never takes more messages than free slots (no prefetch: another replica should get them).
When every queue is empty it waits on all queues at once with the broker's own long poll /
wake-up, so an idle sidecar costs almost nothing, and a message arriving on a higher queue
never waits behind a long poll on a lower one. After waking it re-checks the higher queues,
and returns any surplus at once: the lowest priorities (strict) or what the weighted draw
left (weighted). A take that is abandoned (the receiver pauses or stops) hands back at once
what it had already received, and one that fails part-way returns it: otherwise those
messages stayed leased by nobody until their lease ran out, an attempt spent unseen.

Every receive asks a queue for at most what the capacity rule allows it now
(``scheduler.allowances``: reserves of higher queues, per-queue limits), recomputed before
each call from the messages at the app (``busy``) and those this take already holds: the rule
never makes a surplus to hand back. A queue the rule shuts out is not waited on; the wait
then also ends when a worker frees up (``slot_freed``), so it gets the worker at once. A
queue untried for its ``max_wait_s`` gets one message's try first (the starvation bound),
journaled with ``promoted_after_s``.

``free`` counts slots of ``concurrency``: a message of a ``slots: k`` queue takes k
(``Message.slots``, set at its receive), and a queue is asked only for the messages whose
slots are free. A due queue shut out only for want of free slots (a heavy one, under a steady
stream of light tasks that would take every slot as it frees) has the free slots held for it
until its k are free (``scheduler.short_of_slots``); the time held is counted in
``priority_pubsub_slots_held_seconds_total{queue}``.

A queue with a rate (``queues[].rate``, ``delivery.rate``) may take only the whole tokens of
its bucket: its allowance is capped there, so a receive never gets more than the rate keeps
and nothing is handed back for it. A queue out of tokens is not received from (the pick goes
on to the next queue that may take: no worker idles for it); the take's wait then also ends
when its next token is due. The time a rate kept a queue out while the rule let it take is
counted in ``priority_pubsub_rate_limited_seconds_total{queue}``.

The per-queue rules (order, weights, reserves, limits, bounds, the scheduling mode) are
derived from the live settings (``settings.live``) at the start of a take, when a reload
changed them: a take decides by one set of rules from start to end. A reload during a take
ends its wait at once and keeps what the wait had received (within the old rules' allowance:
handed to workers, never back to the broker), so the next take, under the new rules, begins.
What a take holds of a queue closed meanwhile (paused by the config or an operator, drained,
removed) goes back unseen instead, no attempt spent (``CLOSED_REASON``): a wait may catch a
message in the instant the pause lands, and a pause must not be late by that message.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.control import QueueControl
from priority_pubsub.delivery.rate import HeldTime, TokenBucket, buckets_for
from priority_pubsub.delivery.scheduler import (
    QueueLimits,
    Scheduling,
    allowances,
    overdue,
    plan,
    share_by_weight,
    short_of_slots,
)
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.delivery.take import Take
from priority_pubsub.delivery.waits import Waits
from priority_pubsub.drivers.base import Driver
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.observer import DeliveryObserver

log = get_logger(__name__)
IDLE_WAIT_S = 20.0
SURPLUS_REASON = "surplus: returned unseen"
ABANDONED_REASON = "take abandoned: returned unseen"
"""Why an abandoned take handed back what it held, when its caller gives no reason."""
CLOSED_REASON = "queue closed during the take: returned unseen"
"""Why a take handed back what it caught of a queue paused, drained or removed meanwhile."""


class Consumers(Protocol):
    """Who takes which queue's messages now (``app.channel.streams.StreamHub``)."""

    def taken(self) -> frozenset[str]:
        """Queues someone takes from now (every other queue is left alone)."""
        ...

    async def changed(self) -> None:
        """Until that changes."""
        ...


class Dispatcher:
    """Decides, take by take, which queues' messages fill the free workers, and how long to
    wait when none has any.

    It lives as long as the sidecar: it holds the rules derived from the live settings and
    what spans takes (when each queue was last tried, the rates' tokens, whether the last
    round found every queue empty). Each ``take`` counts in a ``Take`` of its own, so no
    count of one take leaks into the next.
    """

    def __init__(
        self,
        settings: Settings | LiveSettings,
        driver: Driver,
        observer: DeliveryObserver,
        settler: Settler,
        rng: random.Random | None = None,
        idle_wait_s: float = IDLE_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
        consumers: Consumers | None = None,
        control: QueueControl | None = None,
    ) -> None:
        self._live = LiveSettings.of(settings)
        self._driver = driver
        self._observer = observer
        self._settler = settler
        self._rng = rng or random.Random()
        self._clock = clock
        self._names: tuple[str, ...] = ()
        self._index: dict[str, int] = {}
        self._weights: list[int] = []
        self._limits: list[QueueLimits] = []
        self._slots: list[int] = []
        """Per queue, the slots of ``concurrency`` one of its messages takes."""
        self._buckets: dict[str, TokenBucket] = {}
        """The rate limits' token buckets, by queue name (kept across reloads)."""
        self._backlogged: set[str] = set()
        """Rated queues whose last receive got all it asked for: they keep their schedule."""
        self._max_wait_s: list[float | None] = []
        self._scheduling: Scheduling = "strict"
        self._last_tried: list[float] = []
        """When each queue was last tried (a receive ended, with or without messages): the
        starvation bound's clock."""
        self._generation = 0
        """The live settings' generation the rules above were derived from."""
        self._idle_wait_s = idle_wait_s
        self._quiet = False
        """The last take's waits covered every queue and all stayed empty: the next take
        waits again at once, without a sweep that would only repeat their answer."""
        self._consumers = consumers
        """Queues nobody takes from now (streamed topics without a stream): left alone."""
        self._derive()
        self._current = Take.begin(0, (), self._names)
        """The take under way, or the last one: what ``allowed`` answers about."""
        self.control = control or QueueControl(self._live)
        """The operator's pauses and drain, and the config's pauses: queues it closes are
        left alone too."""
        self._closed: tuple[frozenset[str] | None, frozenset[int]] = (None, frozenset())
        """``control.closed`` as last read, and its queues' indices under these rules."""
        self._rules_changed: asyncio.Future[None] | None = None
        """While a take waits: resolved by a change of the live settings (ends the wait)."""
        self._live.on_change(self._live_changed)
        self.healthy = True
        self._slots_held = HeldTime(observer.slots_held)
        self._rate_held = HeldTime(observer.rate_limited)

    def _derive(self) -> None:
        """The rules of the settings in force (a take's start, when they changed); a queue
        kept keeps its starvation clock, a new one starts it now."""
        live = self._live
        tried = dict(zip(self._names, self._last_tried, strict=True))
        now = self._clock()
        self._names = live.names
        self._index = dict(live.index)
        self._weights = [q.weight for q in live.queues]
        self._limits = [QueueLimits(q.reserve, q.max_concurrency, q.slots)
                        for q in live.queues]
        self._slots = [q.slots for q in live.queues]
        self._buckets = buckets_for(((q.name, q.rate) for q in live.queues), self._buckets, now)
        self._max_wait_s = [q.max_wait_s for q in live.queues]
        self._scheduling = live.settings.scheduling
        self._last_tried = [tried.get(name, now) for name in self._names]
        self._closed = (None, frozenset())
        self._quiet = False  # a queue may be new, or newly open: sweep first
        self._generation = live.generation

    def _live_changed(self) -> None:
        if self._rules_changed is not None and not self._rules_changed.done():
            self._rules_changed.set_result(None)

    async def take(
        self,
        free: int,
        why_abandoned: Callable[[], str] = lambda: ABANDONED_REASON,
        *,
        busy: Sequence[int] | Mapping[str, int] = (),
        slot_freed: asyncio.Event | None = None,
    ) -> list[Message]:
        """Up to ``free`` messages, highest priority first; waits while all queues are empty.

        ``busy`` counts each queue's messages at the app now (by name, or by priority under
        the rules in force; none if left out): with the queues' reserves and limits it caps
        what each queue may take. ``slot_freed`` is set
        when a worker frees up during the take: a wait that shut a queue out ends then.

        After a waiting round in which every queue stayed empty, the next round waits again
        at once: the waits covered every queue, so a sweep would only repeat their answer
        (on SQS that halves the idle cost to one ReceiveMessage per queue per long poll).
        A receive that fails after others succeeded does not cost their messages: the take
        returns them (the error is logged; the next take meets it again and the receiver
        backs off). Cancelled (a pause, a stop), it hands back what it had received, the
        reason asked of ``why_abandoned`` then (the pause's, e.g. the app gate's).
        """
        if self._generation != self._live.generation:
            self._derive()
        take = self._current = Take.begin(free, busy, self._names)
        try:
            try:
                taken = await self._take(take, slot_freed)
            except DriverError:
                if not take.in_hand:
                    raise
                taken = await self._keep_best(take, take.in_hand)
            taken = await self._without_closed(take, taken)
        except BaseException:
            if in_hand := take.let_go():  # shielded: a second cancel must not strand the rest
                await asyncio.shield(self._hand_back(in_hand, why_abandoned()))
            raise
        take.let_go()
        return taken

    async def _without_closed(self, take: Take, taken: list[Message]) -> list[Message]:
        """``taken`` but what belongs to a queue closed now: a pause, a drain or a reload
        that removed the queue may land while a wait catches a message of it (the wait is
        cancelled a loop turn later), and the take must not deliver it after the pause took
        effect. Those go back unseen, as a surplus does: released, no attempt spent."""
        while closed := self._closed_now(taken):
            taken = [m for m in taken if all(m is not c for c in closed)]
            take.in_hand = taken  # a cancel while handing back: the rest is the abandon's
            await asyncio.shield(self._hand_back(closed, CLOSED_REASON))
        return taken

    def _closed_now(self, messages: list[Message]) -> list[Message]:
        """Those of ``messages`` whose queue may not be taken from now."""
        if not messages:
            return []
        idle = self._idle()
        in_force = self._live.index
        return [m for m in messages
                if m.queue not in in_force or self._index[m.queue] in idle]

    @property
    def names(self) -> tuple[str, ...]:
        """The queues taken from, highest first (those added while running last), under the
        rules of the latest take."""
        return self._names

    def allowed(self) -> list[int]:
        """What each queue may take now, in the take under way (``scheduler.allowances``);
        nothing for a queue nobody consumes now (a streamed topic without a stream)."""
        return self._allowed(self._current)

    def _allowed(self, take: Take) -> list[int]:
        allowed = allowances(self._limits, take.busy, take.free, take.holding)
        if self._buckets:
            now = self._clock()
            for name, bucket in self._buckets.items():  # a rate: its whole tokens at most
                index = self._index[name]
                allowed[index] = min(allowed[index], bucket.whole(now))
        for index in self._idle():
            allowed[index] = 0
        return allowed

    def _rate_limited(self, take: Take, now: float) -> list[str]:
        """The queues the capacity rule and the operator let take now that their rate keeps
        out (no whole token)."""
        room = allowances(self._limits, take.busy, take.free, take.holding)
        idle = self._idle()
        return [name for name, bucket in self._buckets.items()
                if room[index := self._index[name]] > 0 and index not in idle
                and bucket.whole(now) == 0]

    def _token_due_in_s(self, take: Take) -> float | None:
        """When the first queue its rate keeps out may take again; None: none is."""
        now = self._clock()
        due = [self._buckets[name].next_in_s(now) for name in self._rate_limited(take, now)]
        return min(due) if due else None

    def _idle(self) -> frozenset[int]:
        """Queues not to take from now: those the operator or the config closed (paused,
        draining) and, with streamed topics, those without a stream."""
        closed = self._closed_indices()
        if self._consumers is None:
            return closed
        taken = self._consumers.taken()
        return closed | frozenset(i for i, name in enumerate(self._names) if name not in taken)

    def _closed_indices(self) -> frozenset[int]:
        names = self.control.closed
        seen, indices = self._closed
        if names is not seen:  # the control replaces its set on each change
            indices = frozenset(self._index[name] for name in names if name in self._index)
            self._closed = (names, indices)
        return indices

    async def _take(self, take: Take, slot_freed: asyncio.Event | None) -> list[Message]:
        if self._names and len(self._closed_indices()) == len(self._names):  # all held:
            await self.control.wait_for_change()        # until that changes (a retake too)
            return []
        promoted = await self._promote(take)
        if promoted or not self._quiet:
            messages = promoted + await self._sweep(take, frozenset())
            if messages:
                return messages
        allowed = self._allowed(take)
        idle = self._idle()
        shut_out = any(n == 0 for i, n in enumerate(allowed) if i not in idle)
        woken = await self._wait(take, allowed, slot_freed if shut_out else None,
                                 self._token_due_in_s(take))
        # quiet only when every queue was waited on to the end and stayed empty
        self._quiet = not woken and not shut_out and self._generation == self._live.generation
        if not woken:
            return []
        if self._scheduling == "strict":
            # the woken are in hand, not yet chosen: the higher queues may bid for their places
            take.count_in(woken, self._index, -1)
            best = min(self._index[m.queue] for m in woken)
            higher = frozenset(range(best, len(self._names)))
            woken = await self._sweep(take, higher) + woken
        return await self._keep_best(take, woken)

    async def _promote(self, take: Take) -> list[Message]:
        """The starvation bound: one message's try, ahead of the queues above, for each queue
        untried for its ``max_wait_s`` (most overdue first) that the rule lets take one. The
        most overdue one shut out only for want of free slots has them held for it for the
        rest of the take (``allowed``): nothing else takes them, so they add up as running
        messages end, and a later take tries it once its slots are free."""
        take.holding = None
        promoted: list[Message] = []
        now = self._clock()
        for index, untried_s in overdue(self._max_wait_s, self._last_tried, now):
            if self._allowed(take)[index] <= 0:
                if take.holding is None and self._may_hold_for(take, index, now):
                    take.holding = index
                continue
            for message in await self._receive(take, index, 1, 0):
                message.promoted_after_s = round(untried_s, 3)
                self._observer.promoted(message)
                promoted.append(message)
        self._slots_held.update(now, () if take.holding is None
                                else (self._names[take.holding],))
        self._rate_held.update(now, self._rate_limited(take, now))
        return promoted

    def _may_hold_for(self, take: Take, index: int, now: float) -> bool:
        """Whether the free slots are to be held for due queue ``index``: taken from, shut
        out only for want of free slots, and not kept out by its rate (a hold for a queue
        that may not take would idle the slots for nothing)."""
        bucket = self._buckets.get(self._names[index])
        return (index not in self._idle()
                and (bucket is None or bucket.whole(now) > 0)
                and short_of_slots(self._limits, take.busy, take.free,
                                   take.slots_now(self._slots), index))

    async def _sweep(self, take: Take, skip: frozenset[int]) -> list[Message]:
        """Fill the free workers from the queues not in ``skip``, as the mode picks, each
        receive asking at most the rule's allowance at that moment."""
        got: list[Message] = []
        empty = set(skip)
        while take.free > 0:
            picks = plan(self._scheduling, self._weights, take.free,
                         frozenset(empty), self._rng, self._allowed(take), self._slots)
            if not picks:
                break
            for index, count in picks:
                wanted = min(count, self._allowed(take)[index])
                if wanted <= 0:  # shut out by the rule for the rest of this take
                    empty.add(index)
                    continue
                batch = await self._receive(take, index, wanted, 0)
                got += batch
                if len(batch) < wanted:
                    empty.add(index)
        return got

    async def _wait(self, take: Take, allowed: list[int], slot_freed: asyncio.Event | None,
                    wake_in_s: float | None = None) -> list[Message]:
        """``_wait_any`` on the queues allowed to take; while the rule shuts one out, also
        until a worker frees up, and while a rate keeps one out, until its next token is due
        (``wake_in_s``). Then what the waits already received is kept, not handed back: it was
        within their allowance, which a freed worker or a token only raises."""
        if slot_freed is None and wake_in_s is None:
            return await self._wait_any(take, allowed)
        waiting = asyncio.ensure_future(self._wait_any(take, allowed))
        ends: list[asyncio.Future[Any]] = []
        if slot_freed is not None:
            ends.append(asyncio.ensure_future(slot_freed.wait()))
        if wake_in_s is not None:
            ends.append(asyncio.ensure_future(asyncio.sleep(wake_in_s)))
        try:
            await asyncio.wait({waiting, *ends}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for end in ends:
                end.cancel()
            if not waiting.done():
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
        if waiting.cancelled():
            return list(take.in_hand)
        return waiting.result()

    async def _wait_any(self, take: Take, allowed: list[int]) -> list[Message]:
        """Every queue allowed to take waited on at once, until one brings messages (or the
        rules or the streams change): what every finished wait brought."""
        if self._generation != self._live.generation:
            return []  # a reload since this take began: the next take waits under its rules
        waits = self._start_waits(take, allowed)
        try:
            await waits.until_one_brings()
        finally:
            self._rules_changed = None
            await waits.end()
        return waits.brought()

    def _start_waits(self, take: Take, allowed: list[int]) -> Waits:
        """A long poll on each queue allowed to take, and the changes that end them early."""
        rules_changed = self._rules_changed = asyncio.get_running_loop().create_future()
        receives = [
            asyncio.create_task(self._receive(take, i, allowed[i], self._idle_wait_s),
                                name=f"wait-{name}")
            for i, name in enumerate(self._names) if allowed[i] > 0
        ]
        consumers_changed = (asyncio.create_task(self._consumers_changed(), name="consumers")
                             if self._consumers is not None else None)
        return Waits(receives, rules_changed, consumers_changed, self._idle_wait_s)

    async def _keep_best(self, take: Take, messages: list[Message]) -> list[Message]:
        keep, surplus = self._choose(take, messages)
        take.in_hand = keep  # the surplus is the releases' below, not an abandoned take's
        if surplus:  # settles like any other (journaled, counted), all of them even if cancelled
            await asyncio.shield(self._hand_back(surplus, SURPLUS_REASON))
        return keep

    def _choose(self, take: Take, messages: list[Message]) -> tuple[list[Message], list[Message]]:
        """Which woken messages to keep for the take's slots: the highest priorities
        (strict), or a share drawn by weight (weighted), each kept only as the capacity rule
        allows with those kept before it; the rest is surplus, handed back."""
        free = take.free_at_start
        if self._scheduling == "strict" or sum(m.slots for m in messages) <= free:
            ordered = sorted(messages, key=lambda m: self._index[m.queue])
        else:
            by_queue: dict[str, list[Message]] = {name: [] for name in self._names}
            for message in messages:
                by_queue[message.queue].append(message)
            queues = list(by_queue.values())
            counts = share_by_weight([len(q) for q in queues], self._weights, free, self._rng,
                                     self._slots)
            ordered = [m for queue, n in zip(queues, counts, strict=True) for m in queue[:n]]
            ordered += [m for queue, n in zip(queues, counts, strict=True) for m in queue[n:]]
        busy = list(take.busy_at_start)
        keep: list[Message] = []
        surplus: list[Message] = []
        for message in ordered:
            index = self._index[message.queue]
            if allowances(self._limits, busy, free, take.holding)[index] > 0:
                keep.append(message)
                busy[index] += 1
                free -= message.slots
            else:
                surplus.append(message)
        return keep, surplus

    async def _receive(self, take: Take, index: int, count: int,
                       wait_s: float) -> list[Message]:
        name = self._names[index]
        # a rate's tokens are spent when asked (what it gains meanwhile is kept, not lost to
        # its burst while the broker answers); what does not come back is given back
        bucket = self._buckets.get(name)
        if bucket is not None:
            bucket.take(count, self._clock(), on_schedule=name in self._backlogged)
        got = 0
        try:
            batch = await self._driver.receive(name, count, wait_s)
            got = len(batch)
        except asyncio.CancelledError:  # a wait cut short found the queue empty until now
            self._last_tried[index] = self._clock()
            raise
        except DriverError as exc:
            self.healthy = False
            log.warning("receive failed", queue=name, error=str(exc), retriable=exc.retriable)
            raise
        finally:
            if bucket is not None:
                if got < count:
                    bucket.give_back(count - got, self._clock())
                    self._backlogged.discard(name)
                else:
                    self._backlogged.add(name)
        self.healthy = True
        self._last_tried[index] = self._clock()
        for message in batch:  # its priority now (a reload may have reordered the queues)
            message.priority = index
        for message in batch:  # what it occupies while it runs (the receiver counts it)
            message.slots = self._slots[index]
        take.received(batch, self._index)
        self._observer.receive_call(name, index, empty=not batch)
        return batch

    async def _consumers_changed(self) -> list[Message]:
        assert self._consumers is not None
        await self._consumers.changed()
        return []

    async def _hand_back(self, messages: list[Message], reason: str) -> None:
        now = self._clock()
        for message in messages:  # never delivered: its token is not spent
            if (bucket := self._buckets.get(message.queue)) is not None:
                bucket.give_back(1, now)
        await asyncio.gather(*(self._settler.release(m, reason) for m in messages),
                             return_exceptions=True)
