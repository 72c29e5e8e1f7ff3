"""The receiver counts slots: a heavy message takes its ``slots`` from its
receive until the app answered, and a live reload that shrinks ``concurrency`` takes nothing
until the slots in use plus a message's fit the new value."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from priority_pubsub.core.message import Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from tests.unit.delivery.test_dispatcher_capacity_rule import CountingDriver


class HoldingWorker:
    """Each message stays at the app until the test ends it (``finish``)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._done: dict[str, asyncio.Event] = {}

    async def handle(self, message: Message, answered: Callable[[], None]) -> None:
        self.started.append(message.id)
        done = self._done[message.id] = asyncio.Event()
        await done.wait()
        answered()

    def finish(self, message_id: str) -> None:
        self._done[message_id].set()


def heavy_and_light(concurrency: int) -> Settings:
    return validate_config({"queues": [{"name": "heavy", "slots": 2}, {"name": "light"}],
                            "concurrency": concurrency})


async def settle(until: Callable[[], bool] | None = None) -> None:
    """Let the receive loop run: until ``until`` holds (10 s at most), then a moment more, in
    which anything taken beyond it would show; without ``until``, that moment alone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while until is not None and not until() and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)


async def test_a_shrunk_concurrency_takes_nothing_until_a_message_s_slots_fit() -> None:
    live = LiveSettings(heavy_and_light(6))
    driver = CountingDriver(live.settings)
    driver.queues["heavy"].extend(f"h{n}" for n in range(6))
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    dispatcher = Dispatcher(live, driver, observer,  # type: ignore[arg-type]
                            Settler(live, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=0.05)
    worker = HoldingWorker()
    receiver = Receiver(live, dispatcher, worker, observer)  # type: ignore[arg-type]
    await receiver.start()
    try:
        await settle(lambda: len(worker.started) >= 3)
        assert worker.started == ["h0", "h1", "h2"]  # 3 x 2 slots of 6
        assert (receiver.slots_in_use, receiver.at_app) == (6, 3)
        live.replace(heavy_and_light(4))
        worker.finish("h0")
        await settle(lambda: receiver.slots_in_use == 4)
        assert worker.started == ["h0", "h1", "h2"]  # 4 in use: 4 + 2 does not fit in 4
        assert receiver.slots_in_use == 4
        driver.queues["light"].append("l0")
        await settle()
        assert worker.started == ["h0", "h1", "h2"]  # nor does a light one: 4 of 4
        worker.finish("h1")
        await settle(lambda: len(worker.started) >= 4)
        assert worker.started == ["h0", "h1", "h2", "h3"]  # 2 in use: one heavy fits
        assert receiver.slots_in_use == 4
        assert list(driver.queues["light"]) == ["l0"]
    finally:
        for message_id in list(worker.started):
            worker.finish(message_id)
        await receiver.stop()
    assert receiver.slots_in_use == 0


async def test_light_messages_fill_the_slots_a_heavy_one_leaves() -> None:
    settings = heavy_and_light(5)
    driver = CountingDriver(settings)
    driver.queues["heavy"].extend(["h0", "h1", "h2"])
    driver.queues["light"].extend(["l0", "l1", "l2"])
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    dispatcher = Dispatcher(settings, driver, observer,  # type: ignore[arg-type]
                            Settler(settings, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=0.05)
    worker = HoldingWorker()
    receiver = Receiver(settings, dispatcher, worker, observer)  # type: ignore[arg-type]
    await receiver.start()
    try:
        await settle(lambda: len(worker.started) >= 3)
        assert worker.started == ["h0", "h1", "l0"]  # 2 + 2 + 1 of 5
        assert (receiver.slots_in_use, receiver.at_app) == (5, 3)
        worker.finish("l0")
        await settle(lambda: len(worker.started) >= 4)
        assert worker.started == ["h0", "h1", "l0", "l1"]  # one slot: not the heavy h2
    finally:
        for message_id in list(worker.started):
            worker.finish(message_id)
        await receiver.stop()


async def test_a_reload_changes_a_queue_s_slots_for_what_it_takes_next() -> None:
    """``slots`` is read through the live settings: a message keeps the slots it was taken
    with (the count of what runs stays right), the next ones take the new value."""
    live = LiveSettings(validate_config({"queues": [{"name": "heavy"}, {"name": "light"}],
                                         "concurrency": 4}))
    driver = CountingDriver(live.settings)
    driver.queues["heavy"].extend(f"h{n}" for n in range(4))
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    dispatcher = Dispatcher(live, driver, observer,  # type: ignore[arg-type]
                            Settler(live, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=0.05)
    worker = HoldingWorker()
    receiver = Receiver(live, dispatcher, worker, observer)  # type: ignore[arg-type]
    await receiver.start()
    try:
        await settle(lambda: len(worker.started) >= 4)
        assert (worker.started, receiver.slots_in_use) == (["h0", "h1", "h2", "h3"], 4)
        driver.queues["heavy"].extend(["h4", "h5"])
        live.replace(heavy_and_light(4))  # heavy: 2 slots each from now on
        worker.finish("h0")
        await settle(lambda: receiver.slots_in_use == 3)
        assert len(worker.started) == 4  # 3 in use: a 2-slot message does not fit
        worker.finish("h1")
        await settle(lambda: len(worker.started) >= 5)
        assert (worker.started[4:], receiver.slots_in_use) == (["h4"], 4)
    finally:
        for message_id in list(worker.started):
            worker.finish(message_id)
        await receiver.stop()
