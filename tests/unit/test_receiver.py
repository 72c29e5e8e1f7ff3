"""The receiver: fills free slots, waits at its gate while paused, drains on stop."""

from __future__ import annotations

import asyncio

from priority_pubsub.config import validate_config
from priority_pubsub.message import Lease, Message, now_ms
from priority_pubsub.metrics import Metrics
from priority_pubsub.observer import DeliveryObserver
from priority_pubsub.receiver import Receiver


class FakeDispatcher:
    def __init__(self) -> None:
        self.waiting: asyncio.Queue[Message] = asyncio.Queue()
        self.takes = 0

    async def take(self, free: int) -> list[Message]:
        self.takes += 1
        return [await self.waiting.get()]


class FakeWorker:
    def __init__(self) -> None:
        self.handled: list[str] = []

    async def handle(self, message: Message) -> None:
        self.handled.append(message.id)


def message(n: int) -> Message:
    return Message(f"m{n}", "q", 0, b"{}", {}, 1, now_ms(), Lease(None, now_ms() + 60_000))


async def test_a_paused_receiver_takes_nothing_until_resumed() -> None:
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": 2})
    dispatcher, worker = FakeDispatcher(), FakeWorker()
    receiver = Receiver(settings, dispatcher, worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"))
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
