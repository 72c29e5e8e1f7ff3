"""The parked receive (``drivers/parking.py``) on a fake broker whose calls the test answers by
hand: the rules one by one, then generated schedules of receives, answers, errors, cancels,
timeouts and lapsing locks, checked for the kit's promise: every item a call brings ends
exactly once in a receive's result or in ``release``, no call is ever cancelled, and after
``close`` nothing is parked, stashed or running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from priority_pubsub.drivers.parking import Call, ParkedReceive

WAIT_S = 5.0
"""A receive that may wait; the fake's patience for it is None (until its call ends)."""
IMPATIENT_S = 0.5
"""A receive that may wait, out of patience at once (the fake gives it 0 s)."""


@dataclass
class FakeCall:
    key: str
    count: int
    wait_s: float
    answer: asyncio.Future[list[int]]


@dataclass
class FakeBroker:
    """Calls answered by the test; each item it hands out is a new number."""

    calls: list[FakeCall] = field(default_factory=list)
    handed_out: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    stale: set[int] = field(default_factory=set)
    """Items whose lock lapsed (``keep`` says no)."""
    adopted: int = 0

    def start(self, key: str, count: int, wait_s: float) -> asyncio.Future[list[int]]:
        answer: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self.calls.append(FakeCall(key, count, wait_s, answer))
        return answer

    def answer(self, call: FakeCall, n: int) -> list[int]:
        items = list(range(len(self.handed_out), len(self.handed_out) + n))
        self.handed_out += items
        call.answer.set_result(items)
        return items

    def release(self, key: str, items: list[int]) -> None:
        self.released += items

    @property
    def running(self) -> list[FakeCall]:
        return [call for call in self.calls if not call.answer.done()]

    def parking(self, *, keep: bool = False, beside: bool = True,
                park_quick: bool = True) -> ParkedReceive[int]:
        def patience(call: Call[int], wait_s: float, own: bool) -> float | None:
            return 0.0 if wait_s == IMPATIENT_S else None

        def adopt(key: str) -> None:
            self.adopted += 1

        return ParkedReceive(self.start, self.release, patience,
                             keep=(lambda item: item not in self.stale) if keep else None,
                             beside=beside, park_quick=park_quick, on_adopt=adopt)


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


async def turns(n: int = 5) -> None:
    """Let the loop run callbacks and woken tasks."""
    for _ in range(n):
        await asyncio.sleep(0)


async def all_released(broker: FakeBroker, parking: ParkedReceive[int], items: list[int]
                       ) -> None:
    """Once the loop ran its callbacks: ``items`` released, nothing left parked or running."""
    await turns()
    assert broker.released == items
    assert parking.idle


async def soon(receive: Awaitable[list[int]]) -> list[int]:
    """A receive's result, which must come without any further answer (a broken rule would
    make it call the broker and wait)."""
    return await asyncio.wait_for(receive, 2)


async def cancelled(task: asyncio.Task[list[int]]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def parked_call(broker: FakeBroker, parking: ParkedReceive[int], count: int = 5,
                      key: str = "q") -> FakeCall:
    """A waiting receive cancelled before its call answers: the call stays running."""
    waiting = asyncio.create_task(parking.receive(key, count, WAIT_S))
    await turns()
    await cancelled(waiting)
    return broker.calls[-1]


# -- the rules ----------------------------------------------------------------------------


async def test_a_cancelled_wait_leaves_its_call_for_the_next_wait_to_adopt(
    broker: FakeBroker,
) -> None:
    parking = broker.parking()
    call = await parked_call(broker, parking)
    assert not call.answer.cancelled()  # never cancelled: the broker may be answering it
    adopter = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    items = broker.answer(call, 2)
    assert await soon(adopter) == items
    assert len(broker.calls) == 1
    assert broker.adopted == 1
    assert broker.released == []
    assert parking.idle


async def test_an_answer_nobody_waits_for_is_released_at_once(broker: FakeBroker) -> None:
    parking = broker.parking()
    call = await parked_call(broker, parking)
    items = broker.answer(call, 3)
    await all_released(broker, parking, items)


async def test_an_adopter_takes_its_count_and_the_surplus_is_released(broker: FakeBroker) -> None:
    parking = broker.parking()
    call = await parked_call(broker, parking, count=5)
    adopter = asyncio.create_task(parking.receive("q", 2, WAIT_S))
    await turns()
    items = broker.answer(call, 5)
    assert await soon(adopter) == items[:2]
    assert broker.released == items[2:]


async def test_a_receive_that_must_answer_at_once_starts_beside_a_running_parked_call(
    broker: FakeBroker,
) -> None:
    parking = broker.parking()
    parked = await parked_call(broker, parking)
    quick = asyncio.create_task(parking.receive("q", 5, 0))
    await turns()
    assert len(broker.calls) == 2
    mine = broker.answer(broker.calls[1], 1)
    assert await soon(quick) == mine
    later = broker.answer(parked, 1)  # still parked; nobody waits: released
    await turns()
    assert broker.released == later


@pytest.mark.timeout(10)
async def test_a_receive_that_must_answer_at_once_takes_a_parked_answer_already_there(
    broker: FakeBroker,
) -> None:
    """The call has answered but its callback has not run yet: the answer is adopted, not
    released (nor taken twice)."""
    parking = broker.parking()
    parked = await parked_call(broker, parking)
    items = broker.answer(parked, 2)
    assert await parking.receive("q", 5, 0) == items  # now, in this turn
    await turns()
    assert len(broker.calls) == 1
    assert broker.released == []


async def test_park_quick_false_leaves_a_cancelled_quick_call_unowned(broker: FakeBroker) -> None:
    parking = broker.parking(park_quick=False)
    quick = asyncio.create_task(parking.receive("q", 5, 0))
    await turns()
    await cancelled(quick)
    waiting = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    assert len(broker.calls) == 2  # not adopted: a call of its own
    stray = broker.answer(broker.calls[0], 2)
    await turns()
    assert broker.released == stray
    mine = broker.answer(broker.calls[1], 1)
    assert await soon(waiting) == mine


async def test_out_of_patience_a_receive_returns_nothing_and_parks_its_call(
    broker: FakeBroker,
) -> None:
    parking = broker.parking()
    assert await parking.receive("q", 5, IMPATIENT_S) == []
    adopter = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    items = broker.answer(broker.calls[0], 1)
    assert await soon(adopter) == items
    assert len(broker.calls) == 1


async def test_an_answer_and_a_cancel_in_the_same_turn_give_the_answer_out_once(
    broker: FakeBroker,
) -> None:
    """The call answers, then its receive is cancelled before any callback ran: the
    receive's leaving and the call's landing both see the answer; it is released once."""
    parking = broker.parking()
    waiting = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    items = broker.answer(broker.calls[0], 3)
    await cancelled(waiting)
    await all_released(broker, parking, items)


async def test_an_error_reaches_the_receive_waiting_for_it_and_a_parked_one_is_dropped(
    broker: FakeBroker,
) -> None:
    parking = broker.parking()
    waiting = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    broker.calls[0].answer.set_exception(ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        await soon(waiting)
    call = await parked_call(broker, parking)
    call.answer.set_exception(ConnectionError("refused"))
    await turns()
    fresh = asyncio.create_task(parking.receive("q", 5, WAIT_S))
    await turns()
    assert len(broker.calls) == 3  # a new call: the parked one's error is not raised
    items = broker.answer(broker.calls[2], 1)
    assert await soon(fresh) == items


async def test_keep_stashes_what_nobody_takes_and_serves_it_first_while_fresh(
    broker: FakeBroker,
) -> None:
    parking = broker.parking(keep=True)
    call = await parked_call(broker, parking)
    items = broker.answer(call, 4)
    await turns()
    assert broker.released == []  # kept, not released
    broker.stale.add(items[0])  # its lock lapsed while stashed
    assert await soon(parking.receive("q", 2, 0)) == items[1:3]
    assert len(broker.calls) == 1  # served from the stash, no call
    assert broker.released == items[:1]
    await parking.close(0)
    assert broker.released == [items[0], items[3]]
    assert parking.idle


async def test_one_call_at_a_time_every_receive_joins_the_running_call(broker: FakeBroker) -> None:
    parking = broker.parking(keep=True, beside=False)
    first = asyncio.create_task(parking.receive("q", 2, WAIT_S))
    await turns()
    quick = asyncio.create_task(parking.receive("q", 2, 0))  # joins, does not call beside
    await turns()
    assert len(broker.calls) == 1
    items = broker.answer(broker.calls[0], 5)
    got = await soon(first) + await soon(quick)
    assert sorted(got) == items[:4]
    assert await soon(parking.receive("q", 5, 0)) == items[4:]  # the rest was stashed


async def test_close_waits_for_running_calls_and_releases_what_they_bring(
    broker: FakeBroker,
) -> None:
    parking = broker.parking(keep=True)
    call = await parked_call(broker, parking)
    closing = asyncio.create_task(parking.close(None))
    await turns()
    assert not closing.done()
    items = broker.answer(call, 2)
    await closing
    assert broker.released == items
    assert parking.idle


async def test_close_is_bounded_and_a_call_ending_later_releases_its_answer(
    broker: FakeBroker,
) -> None:
    parking = broker.parking()
    call = await parked_call(broker, parking)
    await parking.close(0.01)
    assert not parking.idle  # still running
    items = broker.answer(call, 2)
    await all_released(broker, parking, items)


# -- generated schedules ------------------------------------------------------------------

KEYS = ("a", "b")

receive_op = st.tuples(st.just("receive"), st.sampled_from(KEYS), st.integers(0, 4),
                       st.sampled_from([0.0, WAIT_S, IMPATIENT_S]))
answer_op = st.tuples(st.just("answer"), st.integers(0, 7), st.integers(0, 5))
fail_op = st.tuples(st.just("fail"), st.integers(0, 7))
cancel_op = st.tuples(st.just("cancel"), st.integers(0, 7))
turn_op = st.tuples(st.just("turn"), st.integers(1, 4))
expire_op = st.tuples(st.just("expire"))
schedules = st.lists(st.one_of(receive_op, answer_op, fail_op, cancel_op, turn_op, expire_op),
                     max_size=40)
modes = st.fixed_dictionaries({"keep": st.booleans(), "beside": st.booleans(),
                               "park_quick": st.booleans(),
                               "close_s": st.sampled_from([None, 0.0])})


@dataclass
class Run:
    """One schedule's receives, and the checks made while it runs."""

    broker: FakeBroker
    parking: ParkedReceive[int]
    beside: bool
    close_s: float | None
    """``close``'s bound: None waits for every call, 0 for none (they end after it)."""
    receives: list[tuple[int, asyncio.Task[list[int]]]] = field(default_factory=list)

    def check_running(self) -> None:
        if not self.beside:  # one call per key at a time
            keys = [call.key for call in self.broker.running]
            assert len(keys) == len(set(keys)), keys

    def pending(self) -> list[asyncio.Task[list[int]]]:
        return [task for _, task in self.receives if not task.done()]

    async def step(self, op: tuple[object, ...]) -> None:
        broker, running = self.broker, self.broker.running
        match op:
            case ("receive", str(key), int(count), float(wait_s)):
                task = asyncio.create_task(self.parking.receive(key, count, wait_s))
                self.receives.append((count, task))
            case ("answer", int(which), int(n)) if running:
                broker.answer(running[which % len(running)], n)
            case ("fail", int(which)) if running:
                running[which % len(running)].answer.set_exception(ConnectionError("refused"))
            case ("cancel", int(which)) if self.pending():
                pending = self.pending()
                pending[which % len(pending)].cancel()
            case ("turn", int(n)):
                await turns(n)
            case ("expire",):
                broker.stale.update(broker.handed_out)
        self.check_running()

    async def finish(self) -> list[int]:
        """Close while every call still running answers, until every receive has ended."""
        closing = asyncio.create_task(self.parking.close(self.close_s))
        while self.pending() or self.broker.running or not closing.done():
            for call in self.broker.running:
                self.broker.answer(call, 1)
            await turns(1)
            self.check_running()
        await closing
        received: list[int] = []
        for count, task in self.receives:
            if task.cancelled() or task.exception() is not None:
                continue
            assert len(task.result()) <= count
            received += task.result()
        return received


async def run_schedule(ops: list[tuple[object, ...]], keep: bool, beside: bool,
                       park_quick: bool, close_s: float | None = None
                       ) -> tuple[FakeBroker, ParkedReceive[int], list[int]]:
    broker = FakeBroker()
    parking = broker.parking(keep=keep, beside=beside, park_quick=park_quick)
    run = Run(broker, parking, beside, close_s)
    for op in ops:
        await run.step(op)
    return broker, parking, await run.finish()


def play(ops: list[tuple[object, ...]], mode: dict[str, Any]
         ) -> tuple[FakeBroker, ParkedReceive[int], list[int]]:
    async def main() -> tuple[FakeBroker, ParkedReceive[int], list[int]]:
        return await asyncio.wait_for(run_schedule(ops, **mode), 10)

    return asyncio.run(main())


@settings(max_examples=400, deadline=None)
@given(ops=schedules, mode=modes)
def test_every_item_ends_once_in_a_receive_or_released_and_nothing_stays(
    ops: list[tuple[object, ...]], mode: dict[str, Any]
) -> None:
    broker, parking, received = play(ops, mode)
    # nothing lost, nothing taken twice
    assert sorted(received + broker.released) == broker.handed_out, (
        f"lost {sorted(set(broker.handed_out) - set(received) - set(broker.released))}, "
        f"twice {sorted(i for i in set(received) if (received + broker.released).count(i) > 1)}")
    assert not any(call.answer.cancelled() for call in broker.calls)  # no call cancelled
    assert parking.idle  # after close: nothing parked, stashed or running


@settings(max_examples=200, deadline=None)
@given(ops=schedules)
def test_without_cancels_or_impatience_waiting_receives_release_nothing_they_could_take(
    ops: list[tuple[object, ...]]
) -> None:
    """Receives that are never cancelled nor run out of patience, each asking for more than
    any answer holds: every answer goes to a receive, none is released."""
    calm = [op for op in ops if op[0] != "cancel"
            and not (op[0] == "receive" and op[3] == IMPATIENT_S)]
    calm = [("receive", op[1], 5, op[3]) if op[0] == "receive" else op for op in calm]
    broker, _, received = play(calm, {"keep": False, "beside": True, "park_quick": True})
    assert sorted(received) == broker.handed_out
    assert broker.released == []


def test_a_call_may_be_a_coroutine_or_a_future() -> None:
    """``start`` may return a future (SQS's thread answer) or a coroutine (Pub/Sub, Service
    Bus): both are accepted."""

    async def main() -> list[int]:
        async def pull(key: str, count: int, wait_s: float) -> list[int]:
            return [1, 2]

        start: Callable[[str, int, float], Awaitable[list[int]]] = pull
        parking = ParkedReceive(start, lambda key, items: None, lambda *_: None)
        return await parking.receive("q", 1, 0)

    assert asyncio.run(main()) == [1]
