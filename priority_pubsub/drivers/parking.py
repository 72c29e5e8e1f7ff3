"""The parked receive: a broker call that outlives the receive that started it.

Why it exists. The dispatcher waits on every queue at once and cancels the waits that lose
the race (``delivery.dispatcher._wait_any``), and the driver protocol says such a cancel must
lose no message (``base.Driver.receive``). Some brokers' calls cannot be cut short safely: a
boto3 ReceiveMessage runs on in its worker thread, a Pub/Sub pull the broker is answering
drops what it carries when cancelled (the emulator never redelivers it), the Service
Bus SDK is unsafe to cancel mid-frame. So a call is never cancelled here: the receive that
gives up on it *parks* it, the next receive of its queue *adopts* it, and whatever a call
brings that no receive takes goes to the driver's ``release`` (or, with ``keep``, to a stash
the next receive takes first).

A driver says only how to start a call (``start``), how to hand back what nobody took
(``release``) and how long a receive waits for a call (``patience``); ``ParkedReceive`` owns
the rest, so the code a lost message would hide in is written, and tested, once
(tests/unit/drivers/test_parking.py drives it with generated schedules of answers, cancels and
timeouts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Call", "ParkedReceive"]

T = TypeVar("T")


@dataclass(eq=False)
class Call(Generic[T]):
    """One broker call for ``key``, and the receives waiting for its answer."""

    key: str
    answer: asyncio.Future[list[T]]
    wait_s: float
    """The wait of the receive that started it."""
    started_at: float
    """Loop time it started."""
    waiters: int = 0
    landed: bool = False
    """Its answer has been given out (to ``items``, the stash or ``release``): once only."""
    items: list[T] = field(default_factory=list)
    """Its answer, landed while receives waited for it and not yet taken by them."""


class ParkedReceive(Generic[T]):
    """Receives of items ``T`` per queue ``key`` over broker calls that are never cancelled.

    The rules:

    * A receive first takes what the stash holds for its key (with ``keep`` only).
    * Then it needs a call. A receive that may wait (``wait_s > 0``) *adopts* the key's parked
      call; one that must answer at once adopts it only if it has answered already, else it
      starts its own beside it. With ``beside=False`` (a broker whose receiver takes one call
      at a time) every receive joins the key's running call, parked or not.
    * It waits for the call's answer at most ``patience(call, wait_s, own)`` seconds (None:
      until it ends). Cancelled or out of patience, it leaves the call running: parked, when
      no other call is parked for the key and the call may be (``park_quick=False``: a call
      started for a receive that must answer at once never is), else unowned.
    * An answer is given out exactly once, when its call ends: to the receives waiting for it
      (each takes at most its ``count``, in turn); what they leave, and the whole answer of a
      call nobody waits for, goes to ``release`` (without ``keep``) or to the stash, where it
      stays while ``keep`` holds (Service Bus: while the lock lasts) and is released once it
      no longer does.
    * ``close`` parks nothing more, waits for running calls (bounded), and releases what they
      bring and the whole stash; a call still running after it releases its answer at its end.

    Invariants: every item a call brings ends exactly once in a receive's result or in
    ``release`` (nothing lost, nothing taken twice); no call is ever cancelled; at most one
    call is parked per key; after ``close`` and the end of every call nothing is parked,
    stashed or running (``idle``). A call's error is raised to the receives waiting for it
    that got nothing, and dropped otherwise (a parked call's: the next call meets it again).
    """

    def __init__(
        self,
        start: Callable[[str, int, float], Awaitable[list[T]]],
        release: Callable[[str, list[T]], None],
        patience: Callable[[Call[T], float, bool], float | None],
        *,
        keep: Callable[[T], bool] | None = None,
        beside: bool = True,
        park_quick: bool = True,
        on_adopt: Callable[[str], None] | None = None,
    ) -> None:
        self._start_call = start
        """(key, count, wait_s) -> the broker call (a coroutine or a future)."""
        self._release = release
        """Hands items back to the broker; called on the loop, must not block (a task)."""
        self._patience = patience
        self._keep = keep
        self._beside = beside
        self._park_quick = park_quick
        self._on_adopt = on_adopt
        self._calls: set[Call[T]] = set()
        """Every call not yet ended: waited for, parked or unowned."""
        self._parked: dict[str, Call[T]] = {}
        self._stash: dict[str, list[T]] = {}
        self._closed = False

    @property
    def idle(self) -> bool:
        """Nothing parked, stashed or running."""
        return not (self._calls or self._parked or self._stash)

    async def receive(self, key: str, count: int, wait_s: float) -> list[T]:
        """Up to ``count`` items of ``key``: the stash's, else a call's answer (see the class
        docstring); ``[]`` when the call ends empty or patience runs out first."""
        if count <= 0:
            return []
        if got := self._take_stash(key, count):
            return got
        call, own = self._choose(key, count, wait_s)
        parkable = wait_s > 0 or self._park_quick
        call.waiters += 1
        try:
            await asyncio.wait({call.answer}, timeout=self._patience(call, wait_s, own))
        except BaseException:
            self._leave(call, parkable)
            raise
        if call.answer.done():  # its callback may not have run yet: give it out now
            self._land(call)
        got, call.items = call.items[:count], call.items[count:]
        self._leave(call, parkable)
        error = call.answer.exception() if call.landed and not call.answer.cancelled() else None
        if error is not None and not got:
            raise error
        return got

    async def close(self, timeout_s: float | None) -> None:
        """Park nothing more; wait up to ``timeout_s`` (None: no bound) for the running calls,
        then release what they brought and the stash. Idempotent."""
        self._closed = True
        self._parked.clear()
        if self._calls:
            await asyncio.wait({call.answer for call in self._calls}, timeout=timeout_s)
        for call in list(self._calls):
            if call.answer.done():
                self._land(call)
        stash, self._stash = self._stash, {}
        for key, items in stash.items():
            self._release(key, items)

    def _choose(self, key: str, count: int, wait_s: float) -> tuple[Call[T], bool]:
        """The call this receive waits for, and whether it is its own (not adopted)."""
        call = self._parked.get(key)
        if call is None and not self._beside:
            call = next((c for c in self._calls if c.key == key), None)
        if call is not None and (wait_s > 0 or call.answer.done() or not self._beside):
            if self._parked.get(key) is call:
                del self._parked[key]
            if self._on_adopt is not None:
                self._on_adopt(key)
            return call, False
        answer = asyncio.ensure_future(self._start_call(key, count, wait_s))
        call = Call(key, answer, wait_s, asyncio.get_running_loop().time())
        self._calls.add(call)
        answer.add_done_callback(lambda _: self._land(call))
        return call, True

    def _land(self, call: Call[T]) -> None:
        """Give out an ended call's answer, once: to its waiting receives, else as unclaimed.
        Its error (or cancellation, which only a loop shutting down does) gives out nothing."""
        if call.landed:
            return
        call.landed = True
        self._calls.discard(call)
        if self._parked.get(call.key) is call:
            del self._parked[call.key]
        if call.answer.cancelled() or call.answer.exception() is not None:
            return
        if call.waiters:
            call.items = call.answer.result()
        else:
            self._unclaimed(call.key, call.answer.result())

    def _leave(self, call: Call[T], parkable: bool) -> None:
        """A receive stops waiting for ``call``. The last one out gives back what the waiters
        left of a landed answer, or parks the call still running (if it may be parked)."""
        call.waiters -= 1
        if call.answer.done():
            self._land(call)
        if call.waiters:
            return
        if call.landed:
            items, call.items = call.items, []
            self._unclaimed(call.key, items)
        elif parkable and not self._closed and call.key not in self._parked:
            self._parked[call.key] = call

    def _unclaimed(self, key: str, items: list[T]) -> None:
        """Items no receive took: to the stash while ``keep`` may hold, else released."""
        if not items:
            return
        if self._keep is None or self._closed:
            self._release(key, items)
        else:
            self._stash.setdefault(key, []).extend(items)

    def _take_stash(self, key: str, count: int) -> list[T]:
        """Up to ``count`` stashed items ``keep`` still holds for; those it no longer holds
        for are released."""
        stash = self._stash.pop(key, None)
        if not stash or self._keep is None:
            return []
        marked = [(item, self._keep(item)) for item in stash]
        fresh = [item for item, kept in marked if kept]
        if stale := [item for item, kept in marked if not kept]:
            self._release(key, stale)
        if fresh[count:]:
            self._stash[key] = fresh[count:]
        return fresh[:count]
