"""The dispatcher's receive strategy, against an in-memory fake driver (our logic only:
every real driver runs the same code in the end-to-end suites)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from priority_pubsub.core.errors import DriverUnavailable
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.journal import JournalWriter, read_journal_lines
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver


class FakeDriver:
    """Queues of bodies; ``receive`` with a wait sleeps for it unless messages are there."""

    name = "fake"
    dead_letter_enabled = True

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.queues: dict[str, deque[str]] = {name: deque() for name in names}
        self.calls: list[tuple[str, int, float]] = []
        self.returned: list[str] = []

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        self.calls.append((queue, max_messages, wait_s))
        if wait_s and not self.queues[queue]:
            await asyncio.sleep(wait_s)
        taken = []
        while self.queues[queue] and len(taken) < max_messages:
            body = self.queues[queue].popleft()
            taken.append(Message(body, queue, self.names.index(queue), body.encode(), {}, 1, 0,
                                 Lease(None, 0)))
        return taken

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.returned.append(message.id)
        self.queues[message.queue].appendleft(message.id)


def settings(scheduling: str = "strict") -> Settings:
    return validate_config({"queues": [{"name": "high"}, {"name": "normal"}, {"name": "low"}],
                            "scheduling": scheduling})


def make(
    driver: FakeDriver, wait_s: float = 0.05, journal: JournalWriter | None = None
) -> Dispatcher:
    config = settings()
    observer = DeliveryObserver(Metrics(), journal, driver_type="fake")
    settler = Settler(config, driver, observer)  # type: ignore[arg-type]
    return Dispatcher(config, driver, observer, settler,  # type: ignore[arg-type]
                      idle_wait_s=wait_s)


async def test_strict_sweep_fills_free_slots_top_down() -> None:
    driver = FakeDriver(("high", "normal", "low"))
    driver.queues["high"].extend(["h1"])
    driver.queues["normal"].extend(["n1", "n2"])
    driver.queues["low"].extend(["l1"])
    got = await make(driver).take(3)
    assert [m.id for m in got] == ["h1", "n1", "n2"]
    assert driver.calls == [("high", 3, 0), ("normal", 2, 0)]


async def test_idle_rounds_after_a_quiet_one_skip_the_sweep() -> None:
    driver = FakeDriver(("high", "normal", "low"))
    dispatcher = make(driver)
    assert await dispatcher.take(2) == []
    first_round = len(driver.calls)
    assert first_round == 6  # sweep of three + a wait on each
    assert await dispatcher.take(2) == []
    assert len(driver.calls) - first_round == 3  # waits only
    assert all(wait > 0 for _, _, wait in driver.calls[first_round:])


async def test_waking_on_a_low_message_rechecks_higher_queues_and_returns_surplus(
    tmp_path: Path,
) -> None:
    driver = FakeDriver(("high", "normal", "low"))
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    dispatcher = make(driver, wait_s=0.2, journal=journal)
    assert await dispatcher.take(1) == []  # now quiet: next take goes straight to waiting

    async def arrive() -> None:
        await asyncio.sleep(0.05)
        driver.queues["low"].append("l1")
        driver.queues["high"].append("h1")  # the high wait is asleep: only a re-check sees it

    arrival = asyncio.create_task(arrive())
    got = await dispatcher.take(1)
    await arrival
    assert [m.id for m in got] == ["h1"]
    assert driver.returned == ["l1"]
    assert list(driver.queues["low"]) == ["l1"]
    # the surplus release is a settle like any other: journaled and counted
    await journal.close()
    [path] = tmp_path.glob("journal-*.jsonl")
    records, _ = read_journal_lines(path)
    assert [(r["message_id"], r["outcome"], r["reason"]) for r in records] == [
        ("l1", "release", "surplus: returned unseen")
    ]
    metrics = dispatcher._observer.metrics.render().decode()
    assert ('priority_pubsub_messages_settled_total{outcome="release",priority="2",queue="low"}'
            ' 1.0') in metrics


class StuckQueueDriver(FakeDriver):
    """Every receive on ``stuck`` hangs, as a broker call still under way when the take is
    abandoned (the app went down: the receiver pauses)."""

    def __init__(self, names: tuple[str, ...], stuck: str) -> None:
        super().__init__(names)
        self.stuck = stuck
        self.entered = asyncio.Event()

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        if queue == self.stuck:
            self.entered.set()
            await asyncio.Event().wait()
        return await super().receive(queue, max_messages, wait_s)


async def abandon(dispatcher: Dispatcher, driver: StuckQueueDriver, free: int) -> None:
    take = asyncio.create_task(dispatcher.take(free))
    await driver.entered.wait()
    take.cancel()
    try:
        await take
    except asyncio.CancelledError:
        return
    raise AssertionError("the abandoned take returned instead of ending cancelled")


async def test_a_take_abandoned_mid_sweep_hands_back_what_it_already_received() -> None:
    # before: h1 stayed leased by nobody until its lease ran out, an attempt spent unseen
    driver = StuckQueueDriver(("high", "normal", "low"), stuck="normal")
    driver.queues["high"].append("h1")
    await abandon(make(driver), driver, free=2)
    assert driver.returned == ["h1"]
    assert list(driver.queues["high"]) == ["h1"]


async def test_a_take_abandoned_while_rechecking_after_a_wake_hands_back_the_woken() -> None:
    driver = StuckQueueDriver(("high", "normal", "low"), stuck="none yet")
    dispatcher = make(driver, wait_s=0.05)
    assert await dispatcher.take(1) == []  # quiet: the next take goes straight to waiting
    driver.stuck = "high"  # its wait and its re-check both hang; low's wait wakes on l1
    driver.queues["low"].append("l1")
    await abandon(dispatcher, driver, free=1)
    assert driver.returned == ["l1"]
    assert list(driver.queues["low"]) == ["l1"]


async def test_a_take_that_fails_part_way_returns_what_it_already_received() -> None:
    class FailingNormal(FakeDriver):
        async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
            if queue == "normal":
                raise DriverUnavailable("normal: connection reset")
            return await super().receive(queue, max_messages, wait_s)

    driver = FailingNormal(("high", "normal", "low"))
    dispatcher = make(driver)
    driver.queues["high"].append("h1")
    # h1 is delivered, not handed back to a broker that is failing
    assert [m.id for m in await dispatcher.take(2)] == ["h1"]
    assert (driver.returned, dispatcher.healthy) == ([], False)
    with pytest.raises(DriverUnavailable):  # nothing else received: the error goes up
        await dispatcher.take(2)


async def test_a_take_abandoned_while_returning_surplus_still_returns_every_message() -> None:
    class SlowRelease(FakeDriver):
        def __init__(self, names: tuple[str, ...]) -> None:
            super().__init__(names)
            self.releasing = asyncio.Event()
            self.go_on = asyncio.Event()

        async def release(self, message: Message, delay_s: float = 0.0) -> None:
            self.releasing.set()
            await self.go_on.wait()
            await super().release(message, delay_s)

    driver = SlowRelease(("high", "normal", "low"))
    dispatcher = make(driver, wait_s=0.05)
    assert await dispatcher.take(1) == []  # quiet: the next take wakes on all three at once
    for queue, body in (("high", "h1"), ("normal", "n1"), ("low", "l1")):
        driver.queues[queue].append(body)
    take = asyncio.create_task(dispatcher.take(1))
    await driver.releasing.wait()  # n1 and l1 are surplus: their releases are under way
    take.cancel()
    driver.go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await take
    await asyncio.sleep(0.01)
    # the surplus all returned (before: the release after the cancel never happened) and
    # h1, kept for the abandoned take, handed back as well
    assert sorted(driver.returned) == ["h1", "l1", "n1"]


class NoWorker:
    async def handle(self, message: Message, answered: Callable[[], None]) -> None:
        answered()


async def test_a_take_abandoned_by_the_receiver_says_why_it_was_paused_or_stopped(
    tmp_path: Path,
) -> None:
    # the same reason as the app gate's releases of messages the app never saw
    driver = StuckQueueDriver(("high", "normal", "low"), stuck="normal")
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    dispatcher = make(driver, journal=journal)
    receiver = Receiver(settings(), dispatcher, NoWorker(),  # type: ignore[arg-type]
                        dispatcher._observer)
    driver.queues["high"].append("h1")
    await receiver.start()
    await driver.entered.wait()
    receiver.pause("app not reachable: ConnectionRefusedError")
    await asyncio.sleep(0.05)
    driver.entered.clear()
    receiver.resume()  # h1 again, then the stuck queue again: this time a stop abandons it
    await driver.entered.wait()
    await receiver.stop()
    await journal.close()
    [path] = tmp_path.glob("journal-*.jsonl")
    records, _ = read_journal_lines(path)
    assert [(r["message_id"], r["outcome"], r["reason"]) for r in records] == [
        ("h1", "release", "app not reachable: ConnectionRefusedError"),
        ("h1", "release", "sidecar shutting down: returned unseen"),
    ]


async def test_a_paused_queue_is_neither_swept_nor_waited_on() -> None:
    driver = FakeDriver(("high", "normal", "low"))
    driver.queues["high"].extend(["h1"])
    driver.queues["low"].extend(["l1"])
    dispatcher = make(driver)
    dispatcher.control.pause("high", "test")
    assert [m.id for m in await dispatcher.take(2)] == ["l1"]
    assert await dispatcher.take(2) == []  # a waiting round: on normal and low only
    assert {q for q, _, _ in driver.calls} == {"normal", "low"}
    dispatcher.control.resume("high")
    assert [m.id for m in await dispatcher.take(2)] == ["h1"]


async def test_a_drain_takes_nothing_until_it_ends() -> None:
    driver = FakeDriver(("high", "normal", "low"))
    driver.queues["normal"].extend(["n1"])
    dispatcher = make(driver)
    dispatcher.control.start_drain("test")
    take = asyncio.create_task(dispatcher.take(1))
    await asyncio.sleep(0.1)
    assert not take.done()
    assert driver.calls == []
    dispatcher.control.end_drain()
    assert await take == []  # woken by the change: the receiver's loop takes again
    assert [m.id for m in await dispatcher.take(1)] == ["n1"]


class Streams:
    """``Consumers`` as the stream hub answers: the queues a stream takes from now."""

    def __init__(self, taken: set[str]) -> None:
        self.now = frozenset(taken)
        self._changed = asyncio.Event()

    def taken(self) -> frozenset[str]:
        return self.now

    async def changed(self) -> None:
        await self._changed.wait()

    def open(self, queue: str) -> None:
        self.now |= {queue}
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


async def test_a_queue_added_while_a_take_waits_is_the_lowest_and_taken_once_streamed() -> None:
    driver = FakeDriver(("high", "normal", "low", "late"))
    live = LiveSettings(settings())
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    streams = Streams({"high", "normal", "low"})
    dispatcher = Dispatcher(live, driver, observer,  # type: ignore[arg-type]
                            Settler(live, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=5, consumers=streams)
    driver.queues["late"].append("x1")
    waiting = asyncio.create_task(dispatcher.take(3, busy=(0, 0, 0)))
    await asyncio.sleep(0.01)  # the take waits on the three queues
    assert live.add_queue("late")
    assert not live.add_queue("late")  # once only
    assert await asyncio.wait_for(waiting, 1) == []  # the change ends the wait at once
    waiting = asyncio.create_task(dispatcher.take(3, busy={}))
    await asyncio.sleep(0.01)  # the next take counts the new queue
    assert dispatcher.names == ("high", "normal", "low", "late")
    assert dispatcher.allowed() == [3, 3, 3, 0]  # no stream on it yet: left alone
    streams.open("late")  # ends the wait
    assert await asyncio.wait_for(waiting, 1) == []
    assert all(queue != "late" for queue, _, _ in driver.calls)  # not before its stream
    driver.queues["high"].append("h1")
    got = await dispatcher.take(3, busy=(0, 0, 0, 0))
    assert [m.id for m in got] == ["h1", "x1"]  # the known queue first
    assert [m.priority for m in got] == [0, 3]  # stamped with the priority in force


async def test_a_streamed_take_ends_when_its_waits_end_empty_not_when_a_stream_comes() -> None:
    """A driver's wait may end before the dispatcher's (SQS's ``wait_time_s``, Dapr's
    ``messageWaitTimeSeconds``, can be 1 s): with streams watched as well, the take must
    still end when every queue's wait has come back empty, so the next one waits anew. It
    used to go on waiting for a stream to come or go, and a message published meanwhile sat
    in its queue."""
    driver = FakeDriver(("high", "normal", "low"))
    config = settings()
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    dispatcher = Dispatcher(config, driver, observer,  # type: ignore[arg-type]
                            Settler(config, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=0.05, consumers=Streams({"high", "normal", "low"}))
    assert await asyncio.wait_for(dispatcher.take(1, busy=(0, 0, 0)), 2) == []
    driver.queues["low"].append("l1")
    got = await asyncio.wait_for(dispatcher.take(1, busy=(0, 0, 0)), 2)
    assert [m.id for m in got] == ["l1"]
