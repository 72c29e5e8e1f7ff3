"""A queue closed while a take's wait catches a message: the pause is not late by a message.

The fake driver's wait on a queue catches a message and, in the same instant, a reload (or
an operator) closes that queue: the take must hand the message back unseen, with no attempt
spent, and deliver what it caught of the queues still open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from priority_pubsub.core.message import Lease, Message
from priority_pubsub.delivery.dispatcher import CLOSED_REASON, Dispatcher
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver, Settled


def settings(*queues: dict[str, Any]) -> Settings:
    return validate_config({"queues": list(queues) or [{"name": "hi"}, {"name": "lo"}]})


class CatchingDriver:
    """Every queue looks empty to a sweep. A wait on ``catches`` brings one message and
    runs ``meanwhile`` as it does (the reload landing in that instant); a wait on any other
    queue brings nothing until cancelled."""

    name = "fake"
    dead_letter_enabled = False

    def __init__(self, catches: str) -> None:
        self.catches = catches
        self.meanwhile: Callable[[], None] = lambda: None
        self.released: list[tuple[str, float]] = []

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        if not wait_s:
            return []
        if queue != self.catches:
            await asyncio.Event().wait()
        await asyncio.sleep(0)  # every wait has started
        self.meanwhile()
        return [Message(f"{queue}-1", queue, 0, b"", {}, 1, 0, Lease(None, 0))]

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.released.append((message.id, delay_s))


class Settles(DeliveryObserver):
    def __init__(self) -> None:
        super().__init__(Metrics(), None, driver_type="fake")
        self.events: list[Settled] = []

    def settled(self, event: Settled) -> None:
        self.events.append(event)
        super().settled(event)


def dispatcher_on(live: LiveSettings, driver: CatchingDriver) -> tuple[Dispatcher, Settles]:
    observer = Settles()
    settler = Settler(live, driver, observer)  # type: ignore[arg-type]
    return Dispatcher(live, driver, observer, settler,  # type: ignore[arg-type]
                      idle_wait_s=5), observer


def pause_lo_by_config(live: LiveSettings, dispatcher: Dispatcher) -> None:
    live.replace(settings({"name": "hi"}, {"name": "lo", "paused": True}))


def pause_lo_by_operator(live: LiveSettings, dispatcher: Dispatcher) -> None:
    dispatcher.control.pause("lo", "test")


def drain(live: LiveSettings, dispatcher: Dispatcher) -> None:
    dispatcher.control.start_drain("test")


def remove_lo(live: LiveSettings, dispatcher: Dispatcher) -> None:
    live.replace(settings({"name": "hi"}))


@pytest.mark.parametrize("close", [pause_lo_by_config, pause_lo_by_operator, drain, remove_lo])
async def test_what_a_wait_caught_as_its_queue_closed_goes_back_unseen(
    close: Callable[[LiveSettings, Dispatcher], None],
) -> None:
    live = LiveSettings(settings())
    driver = CatchingDriver(catches="lo")
    dispatcher, observer = dispatcher_on(live, driver)
    driver.meanwhile = lambda: close(live, dispatcher)
    assert await asyncio.wait_for(dispatcher.take(2), 5) == []
    assert driver.released == [("lo-1", 0.0)]  # a release: no attempt spent, no delay
    assert [(e.message.id, e.kind.value, e.reason) for e in observer.events] == [
        ("lo-1", "release", CLOSED_REASON)]


async def test_what_a_wait_caught_on_a_queue_still_open_is_delivered() -> None:
    """A reload that pauses another queue changes nothing for this one's catch."""
    live = LiveSettings(settings())
    driver = CatchingDriver(catches="hi")
    dispatcher, observer = dispatcher_on(live, driver)
    driver.meanwhile = lambda: pause_lo_by_config(live, dispatcher)
    assert [m.id for m in await asyncio.wait_for(dispatcher.take(2), 5)] == ["hi-1"]
    assert (driver.released, observer.events) == ([], [])
