"""The lease keeper against a scripted driver: when it extends, how it meets a failed or a
lost lease, and that a stop ends it.

The keeper's sleeps between extensions are recorded and cut to a loop turn, so the intervals
it chooses are read exactly instead of measured on a loaded machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from priority_pubsub.core.errors import DriverUnavailable, LeaseLost
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.delivery.leases import LeaseKeeper
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver

REAL_SLEEP = asyncio.sleep


class ScriptedDriver:
    """Each ``extend`` answers with the next step of its script (None: extended, else the
    error raised); past the script it hangs, as a broker that does not answer."""

    def __init__(self, *script: Exception | None) -> None:
        self.script = list(script)
        self.extended: list[float] = []

    async def extend(self, message: Message, duration_s: float) -> None:
        self.extended.append(duration_s)
        if not self.script:
            await asyncio.Event().wait()
        if (step := self.script.pop(0)) is not None:
            raise step


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The keeper's sleeps: recorded, each a loop turn long."""
    asked: list[float] = []

    async def sleep(delay_s: float) -> None:
        asked.append(delay_s)
        await REAL_SLEEP(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return asked


def message(lease_left_s: float) -> Message:
    """A message whose lease has ``lease_left_s`` left, however long the test runs."""
    lease = Lease("token", 10_000 + int(lease_left_s * 1000), clock=lambda: 10_000)
    return Message("m1", "q", 0, b"", {}, 1, 0, lease)


def keeper_for(driver: ScriptedDriver, duration_s: float,
               lease_left_s: float = 60) -> tuple[LeaseKeeper, Metrics]:
    metrics = Metrics()
    observer = DeliveryObserver(metrics, None, driver_type="fake")
    keeper = LeaseKeeper(driver, message(lease_left_s), duration_s, observer)  # type: ignore[arg-type]
    return keeper, metrics


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    async def poll() -> None:
        while not condition():
            await REAL_SLEEP(0.005)

    await asyncio.wait_for(poll(), timeout_s)


def extensions(metrics: Metrics) -> float:
    for line in metrics.render().decode().splitlines():
        if line.startswith("priority_pubsub_lease_extensions_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def settle_down() -> None:
    """A few loop turns: a keeper that went on would have called again by then."""
    for _ in range(20):
        await REAL_SLEEP(0)


async def test_a_delivery_done_within_a_third_of_the_lease_extends_nothing() -> None:
    driver = ScriptedDriver()
    keeper, _ = keeper_for(driver, duration_s=0.15)
    keeper.start()
    await keeper.stop()  # the app answered at once
    await REAL_SLEEP(0.2)  # past the first extension's time
    assert driver.extended == []


async def test_it_extends_by_the_whole_lease_every_third_of_it_until_stopped(
    sleeps: list[float],
) -> None:
    driver = ScriptedDriver(None, None, None)
    keeper, metrics = keeper_for(driver, duration_s=0.03)
    keeper.start()
    await until(lambda: len(driver.extended) == 4)  # three done, the fourth hangs
    assert driver.extended == [0.03] * 4
    assert sleeps == [pytest.approx(0.01)] * 3
    assert extensions(metrics) == 3
    await keeper.stop()
    await settle_down()
    assert len(driver.extended) == 4


async def test_a_failed_extension_is_tried_again_sooner_while_the_lease_runs(
    sleeps: list[float],
) -> None:
    """A third of what the lease has left (1.65 s) comes before the next third of the
    lease (1.8 s): the retry is then, and a success goes back to the rhythm."""
    driver = ScriptedDriver(DriverUnavailable("broker away"), DriverUnavailable("broker away"),
                            None)
    keeper, metrics = keeper_for(driver, duration_s=1.8, lease_left_s=1.65)
    keeper.start()  # the first extension is due in 0.6 s
    await until(lambda: len(driver.extended) == 4)
    assert sleeps == [pytest.approx(0.55), pytest.approx(0.55), pytest.approx(0.6)]
    assert extensions(metrics) == 1
    await keeper.stop()


async def test_a_failed_extension_waits_half_a_second_at_least(sleeps: list[float]) -> None:
    """Even when the lease is nearly gone: a broker that refuses at once is not hammered."""
    driver = ScriptedDriver(None, DriverUnavailable("broker away"), None)
    keeper, _ = keeper_for(driver, duration_s=0.03, lease_left_s=0.3)
    keeper.start()
    await until(lambda: len(driver.extended) == 4)
    assert sleeps == [pytest.approx(0.01), 0.5, pytest.approx(0.01)]
    await keeper.stop()


async def test_a_lost_lease_ends_the_keeper_and_is_not_tried_again(
    sleeps: list[float],
) -> None:
    driver = ScriptedDriver(None, LeaseLost("the broker gave it to another consumer"))
    keeper, metrics = keeper_for(driver, duration_s=0.03)
    keeper.start()
    await until(lambda: len(driver.extended) == 2)
    await settle_down()
    assert (driver.extended, sleeps, extensions(metrics)) == (
        [0.03, 0.03], [pytest.approx(0.01)], 1)
    await keeper.stop()  # a keeper that ended by itself stops all the same
