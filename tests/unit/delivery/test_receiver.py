"""The receiver: fills free slots, waits at its gate while paused, drains on stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from priority_pubsub.app.gate import AppGate
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.settings.config import validate_config
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver


class FakeDispatcher:
    def __init__(self) -> None:
        self.waiting: asyncio.Queue[Message] = asyncio.Queue()
        self.takes = 0

    async def take(self, free: int, why_abandoned: Callable[[], str], **_: object
                   ) -> list[Message]:
        self.takes += 1
        return [await self.waiting.get()]


class FakeWorker:
    def __init__(self) -> None:
        self.handled: list[str] = []

    async def handle(self, message: Message, answered: Callable[[], None] = lambda: None) -> None:
        self.handled.append(message.id)


class SlowSettleWorker:
    """The app answers at once; the settle after it takes until ``settled`` is set."""

    def __init__(self) -> None:
        self.at_app = 0
        self.most_at_app = 0
        self.settling: list[str] = []
        self.settled = asyncio.Event()

    async def handle(self, message: Message, answered: Callable[[], None]) -> None:
        self.at_app += 1
        self.most_at_app = max(self.most_at_app, self.at_app)
        await asyncio.sleep(0)
        self.at_app -= 1
        answered()
        self.settling.append(message.id)
        await self.settled.wait()


def message(n: int) -> Message:
    return Message(f"m{n}", "q", 0, b"{}", {}, 1, now_ms(), Lease(None, now_ms() + 60_000))


def make_receiver(concurrency: int) -> tuple[Receiver, FakeDispatcher, FakeWorker]:
    """A receiver on one queue over the fakes, with a real observer and no app gate."""
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": concurrency})
    dispatcher, worker = FakeDispatcher(), FakeWorker()
    receiver = Receiver(settings, dispatcher, worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"))
    return receiver, dispatcher, worker


async def test_a_paused_receiver_takes_nothing_until_resumed() -> None:
    receiver, dispatcher, worker = make_receiver(concurrency=2)
    receiver.pause()
    await receiver.start()
    dispatcher.waiting.put_nowait(message(1))
    await asyncio.sleep(0.05)
    assert (receiver.paused, dispatcher.takes, worker.handled) == (True, 0, [])
    receiver.resume()
    await asyncio.sleep(0.05)
    assert worker.handled == ["m1"]
    await receiver.stop()
    assert receiver.in_flight == 0


class ScriptedProbe:
    answer: str | None = "ConnectionRefusedError"

    async def check(self) -> str | None:
        return self.answer

    async def close(self) -> None:
        pass


async def test_nothing_is_taken_before_the_app_gate_opens() -> None:
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": 2})
    dispatcher, worker, probe = FakeDispatcher(), FakeWorker(), ScriptedProbe()
    gate = AppGate(settings, Metrics(), probe=probe)  # type: ignore[arg-type]
    receiver = Receiver(settings, dispatcher, worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"),
                        capacity=gate.capacity)
    gate.attach(receiver)
    await receiver.start()
    dispatcher.waiting.put_nowait(message(1))
    await gate.probe_once()
    await asyncio.sleep(0.05)
    assert (dispatcher.takes, worker.handled) == (0, [])
    probe.answer = None
    await gate.probe_once()
    await asyncio.sleep(0.05)
    assert worker.handled == ["m1"]
    await receiver.stop()


async def test_pausing_abandons_a_take_still_waiting() -> None:
    receiver, dispatcher, worker = make_receiver(concurrency=2)
    await receiver.start()
    await asyncio.sleep(0.02)
    assert dispatcher.takes == 1  # waiting for a message
    receiver.pause()
    await asyncio.sleep(0.02)
    dispatcher.waiting.put_nowait(message(1))
    await asyncio.sleep(0.05)
    assert worker.handled == []
    assert dispatcher.waiting.qsize() == 1
    receiver.resume()
    await asyncio.sleep(0.05)
    assert worker.handled == ["m1"]
    await receiver.stop()


async def test_a_stop_while_a_pause_abandons_the_take_still_ends_the_loop() -> None:
    # pause and stop both cancel the receive loop's task in the same turn: the pause's
    # cancel is taken back, the stop's must not be
    receiver, dispatcher, worker = make_receiver(concurrency=2)
    await receiver.start()
    await asyncio.sleep(0.02)
    assert dispatcher.takes == 1
    receiver.pause()
    receiver.pause()  # a second pause while the first is being handled: one cancel only
    async with asyncio.timeout(2):  # no task in between: stop's cancel lands in this turn
        await receiver.stop()
    assert receiver._loop is not None
    assert receiver._loop.done()
    dispatcher.waiting.put_nowait(message(1))
    await asyncio.sleep(0.02)
    assert worker.handled == []


async def test_pause_and_resume_many_times_while_taking_loses_nothing() -> None:
    receiver, dispatcher, worker = make_receiver(concurrency=4)
    await receiver.start()
    for n in range(20):
        await asyncio.sleep(0.005)
        receiver.pause()
        dispatcher.waiting.put_nowait(message(n))
        await asyncio.sleep(0)
        receiver.resume()
    await asyncio.sleep(0.1)
    assert sorted(worker.handled) == sorted(f"m{n}" for n in range(20))
    await receiver.stop()


async def test_the_next_message_is_taken_while_the_previous_one_settles() -> None:
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": 1})
    dispatcher, worker = FakeDispatcher(), SlowSettleWorker()
    receiver = Receiver(settings, dispatcher, worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"))
    await receiver.start()
    for n in range(4):
        dispatcher.waiting.put_nowait(message(n))
    await asyncio.sleep(0.05)
    # answered by the app one at a time; two settles under way is as far as it goes
    assert worker.settling == ["m0", "m1"]
    assert worker.most_at_app == 1
    assert (receiver.in_flight, receiver.at_app) == (2, 0)
    worker.settled.set()
    await asyncio.sleep(0.05)
    assert worker.settling == ["m0", "m1", "m2", "m3"]
    assert receiver.in_flight == 0
    await receiver.stop()
