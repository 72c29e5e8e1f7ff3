"""The monitor's waiting desk on the local driver (a real SQLite file): the first waiting
messages of a consumed queue, listed again from a short cache; promotion only to a queue above,
the message gone from its queue and listed again afterwards; a message no longer waiting is a
409 (``ActionUnavailable``); a driver that cannot address one waiting message lists nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from priority_pubsub.drivers.base import Driver, DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver, LocalOptions
from priority_pubsub.monitor.dead_letters import ActionUnavailable
from priority_pubsub.monitor.waiting import SHOWN_WAITING, WaitingDesk

QUEUES = ("high", "normal", "low")


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    local = LocalDriver(LocalOptions(path=tmp_path / "queues.db"), DriverContext(queues=QUEUES))
    await local.start()
    yield local
    await local.close()


async def test_the_first_waiting_messages_of_a_consumed_queue(driver: LocalDriver) -> None:
    ids = [await driver.publish("low", f"{n}".encode()) for n in range(SHOWN_WAITING + 5)]
    desk = WaitingDesk(driver, QUEUES)
    assert desk.why_not is None
    assert [letter.id for letter in await desk.listing("low")] == ids[:SHOWN_WAITING]
    assert await desk.listing("elsewhere") == []


async def test_a_listing_is_shown_again_for_a_few_seconds(driver: LocalDriver) -> None:
    first = await driver.publish("low", b"1")
    desk = WaitingDesk(driver, QUEUES)
    assert [letter.id for letter in await desk.listing("low")] == [first]
    await driver.publish("low", b"2")
    assert [letter.id for letter in await desk.listing("low")] == [first]


def test_a_queue_may_go_only_above_itself() -> None:
    desk = WaitingDesk(cast(Driver, LocalDriver.__new__(LocalDriver)), QUEUES)
    assert desk.higher_than("low") == ["high", "normal"]
    assert desk.higher_than("high") == []
    assert desk.higher_than("elsewhere") == []


async def test_a_promoted_message_leaves_its_queue_for_the_higher_one(driver: LocalDriver) -> None:
    kept, moved = [await driver.publish("low", body) for body in (b"kept", b"moved")]
    desk = WaitingDesk(driver, QUEUES)
    await desk.listing("low")
    new_id = await desk.promote("low", moved, "high")
    assert [letter.id for letter in await desk.listing("low")] == [kept]  # not the cached list
    assert [letter.id for letter in await desk.listing("high")] == [new_id]
    [received] = await driver.receive("high", 1, 0)
    assert received.body == b"moved"


async def test_promoting_down_or_sideways_is_refused(driver: LocalDriver) -> None:
    message = await driver.publish("normal", b"x")
    desk = WaitingDesk(driver, QUEUES)
    for target in ("low", "normal", "elsewhere"):
        with pytest.raises(ValueError, match="is not a queue above"):
            await desk.promote("normal", message, target)


async def test_a_message_a_worker_took_is_409(driver: LocalDriver) -> None:
    message = await driver.publish("low", b"x")
    [taken] = await driver.receive("low", 1, 0)
    assert taken.id == message
    with pytest.raises(ActionUnavailable):
        await WaitingDesk(driver, QUEUES).promote("low", message, "high")
    assert await driver.receive("high", 1, 0) == []


async def test_a_driver_that_cannot_address_a_waiting_message_lists_nothing() -> None:
    class Receiving:
        name = "receiving-only"

    desk = WaitingDesk(cast(Driver, Receiving()), QUEUES)
    assert desk.why_not is not None
    assert "receiving-only" in desk.why_not
    assert await desk.listing("low") == []
