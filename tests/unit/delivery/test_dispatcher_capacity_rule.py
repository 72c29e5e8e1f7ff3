"""The capacity rule (reserves, per-queue limits, the starvation bound), table-driven: the
documented examples and the edges around them, then the dispatcher asking only for it."""

from __future__ import annotations

import asyncio
import random

import pytest

from priority_pubsub.commands.capacity_plan import capacity_plan, plan_lines
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.scheduler import QueueLimits, allowances, overdue, plan
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from tests.unit.delivery.test_dispatcher import FakeDriver

HI_R1 = (QueueLimits(reserve=1), QueueLimits())
HI_MID_R1 = (QueueLimits(reserve=1), QueueLimits(reserve=1), QueueLimits())


@pytest.mark.parametrize(
    ("limits", "busy", "free", "expected"),
    [
        # [{hi, reserve 1}, {lo}] at concurrency 4: lo holds at most 3 while hi is idle ...
        (HI_R1, (0, 0), 4, [4, 3]),
        (HI_R1, (0, 2), 2, [2, 1]),
        (HI_R1, (0, 3), 1, [1, 0]),
        # ... and all 3 remaining while one hi runs
        (HI_R1, (1, 0), 3, [3, 3]),
        (HI_R1, (1, 2), 1, [1, 1]),
        (HI_R1, (1, 3), 0, [0, 0]),
        # [{hi r1}, {mid r1}, {lo}]: 2 lo + 1 hi running -> mid may take the last, lo not
        (HI_MID_R1, (1, 0, 2), 1, [1, 1, 0]),
        (HI_MID_R1, (0, 0, 0), 4, [4, 3, 2]),
        (HI_MID_R1, (0, 0, 2), 2, [2, 1, 0]),
        (HI_MID_R1, (0, 1, 1), 2, [2, 1, 1]),
        (HI_MID_R1, (2, 2, 0), 0, [0, 0, 0]),
        # a hi beyond its reserve does not widen anyone's room
        (HI_R1, (3, 0), 1, [1, 1]),
        # per-queue limits, alone and with reserves
        ((QueueLimits(max_concurrency=2), QueueLimits()), (2, 0), 2, [0, 2]),
        ((QueueLimits(max_concurrency=2), QueueLimits()), (1, 0), 3, [1, 3]),
        ((QueueLimits(), QueueLimits(max_concurrency=1)), (0, 0), 4, [4, 1]),
        ((QueueLimits(reserve=2, max_concurrency=2), QueueLimits(max_concurrency=3)),
         (0, 0), 4, [2, 2]),
        # no reserve, no limit: the plain pick (everyone may take every free worker)
        ((QueueLimits(), QueueLimits(), QueueLimits()), (1, 1, 1), 1, [1, 1, 1]),
        # AIMD lowered the effective concurrency to 1: the reserve keeps it for hi
        (HI_R1, (0, 0), 1, [1, 0]),
    ],
)
def test_allowances(limits: tuple[QueueLimits, ...], busy: tuple[int, ...], free: int,
                    expected: list[int]) -> None:
    assert allowances(limits, busy, free) == expected


def test_plan_offers_no_queue_more_than_it_is_allowed() -> None:
    rng = random.Random(5)
    assert plan("strict", [1, 1], 4, frozenset(), rng, [4, 3]) == [(0, 4), (1, 3)]
    assert plan("strict", [1, 1], 1, frozenset(), rng, [1, 0]) == [(0, 1)]
    for seed in range(50):
        picks = dict(plan("weighted", [1, 9], 4, frozenset(), random.Random(seed), [4, 1]))
        assert picks.get(1, 0) <= 1
        assert sum(picks.values()) == 4  # what lo may not take goes to hi


def test_overdue_names_queues_untried_for_their_bound_most_overdue_first() -> None:
    assert overdue([None, 10.0, 5.0], [0.0, 0.0, 0.0], 9.0) == [(2, 9.0)]
    assert overdue([None, 10.0, 5.0], [0.0, 0.0, 8.0], 12.0) == [(1, 12.0)]
    assert overdue([None, 10.0, 5.0], [0.0, 1.0, 0.0], 12.0) == [(2, 12.0), (1, 11.0)]
    assert overdue([None, None], [0.0, 0.0], 1e9) == []


def config(queues: list[dict[str, object]], concurrency: int = 4) -> dict[str, object]:
    return {"queues": queues, "concurrency": concurrency}


@pytest.mark.parametrize(
    ("queues", "concurrency", "message"),
    [
        ([{"name": "hi", "reserve": 2}, {"name": "mid", "reserve": 2}, {"name": "lo"}], 4,
         r"^config: queues: reserves \(hi 2, mid 2\) must sum below concurrency 4$"),
        ([{"name": "hi"}, {"name": "lo", "reserve": 1}], 4,
         r"^config: queues: a reserve on the lowest queue 'lo' means nothing"),
        ([{"name": "hi", "reserve": 2, "max_concurrency": 1}, {"name": "lo"}], 4,
         r"^queues\.0: queue 'hi': max_concurrency 1 is below its reserve 2$"),
        ([{"name": "hi", "reserve": -1}, {"name": "lo"}], 4, r"^queues\.0\.reserve: "),
        ([{"name": "hi", "max_wait_s": 0}, {"name": "lo"}], 4, r"^queues\.0\.max_wait_s: "),
        ([{"name": "hi", "timeout_s": 0}, {"name": "lo"}], 4, r"^queues\.0\.timeout_s: "),
    ],
)
def test_bad_capacity_settings_are_one_line_naming_the_queues(
    queues: list[dict[str, object]], concurrency: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        validate_config(config(queues, concurrency))
    assert "\n" not in str(caught.value)


def test_check_shows_a_queue_timeout_beside_its_capacity() -> None:
    settings = validate_config({**config([{"name": "hi", "reserve": 1, "timeout_s": 30},
                                          {"name": "lo"}]), "app": {"timeout_s": 600}})
    assert [entry["timeout_s"] for entry in capacity_plan(settings)] == [30, None]
    assert plan_lines(settings)[1:] == [
        "  hi: up to 4 workers (1 reserved for it; a delivery cancelled after 30 s)",
        "  lo: up to 3 workers (1 kept for higher queues)",
    ]


def test_good_capacity_settings_load() -> None:
    settings = validate_config(config([
        {"name": "hi", "reserve": 1, "max_concurrency": 2},
        {"name": "lo", "max_wait_s": 600, "wait_slo_s": 30},
    ]))
    assert [(q.reserve, q.max_concurrency, q.max_wait_s) for q in settings.queues] == [
        (1, 2, None), (0, None, 600)]


class CountingDriver(FakeDriver):
    """``test_dispatcher``'s in-memory queues, failing on any hand-back (the rule must make
    none)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.queue_names)

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        raise AssertionError(f"handed back {message.id}: the rule made a surplus")


def dispatcher_for(settings: Settings, driver: CountingDriver,
                   clock: list[float] | None = None, wait_s: float = 0.05) -> Dispatcher:
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    settler = Settler(settings, driver, observer)  # type: ignore[arg-type]
    now = clock if clock is not None else [0.0]
    return Dispatcher(settings, driver, observer, settler,  # type: ignore[arg-type]
                      idle_wait_s=wait_s, clock=lambda: now[0])


async def test_a_full_low_backlog_leaves_the_reserved_worker_free() -> None:
    settings = validate_config(config([{"name": "hi", "reserve": 1}, {"name": "lo"}]))
    driver = CountingDriver(settings)
    driver.queues["lo"].extend(f"l{i}" for i in range(10))
    got = await dispatcher_for(settings, driver).take(4, busy=(0, 0))
    assert [m.id for m in got] == ["l0", "l1", "l2"]
    assert driver.calls == [("hi", 4, 0), ("lo", 3, 0)]  # lo was asked for 3, not 4


async def test_a_shut_out_queue_is_not_waited_on_and_a_freed_worker_ends_the_wait() -> None:
    settings = validate_config(config([{"name": "hi", "reserve": 1}, {"name": "lo"}]))
    driver = CountingDriver(settings)
    driver.queues["lo"].extend(["l3", "l4"])
    freed = asyncio.Event()
    dispatcher = dispatcher_for(settings, driver, wait_s=5)
    take = asyncio.create_task(dispatcher.take(1, busy=(0, 3), slot_freed=freed))
    await asyncio.sleep(0.05)
    assert driver.calls == [("hi", 1, 0), ("hi", 1, 5)]  # lo (3 of 4 held) is not asked
    freed.set()  # a lo task ended: the take ends at once, not after the 5 s wait
    assert await asyncio.wait_for(take, 1) == []
    got = await dispatcher.take(2, busy=(0, 2), slot_freed=asyncio.Event())
    assert [m.id for m in got] == ["l3"]
    assert driver.calls[-1] == ("lo", 1, 0)


async def test_a_high_message_during_the_wait_takes_the_reserved_worker() -> None:
    settings = validate_config(config([{"name": "hi", "reserve": 1}, {"name": "lo"}]))
    driver = CountingDriver(settings)
    driver.queues["lo"].append("l4")
    dispatcher = dispatcher_for(settings, driver, wait_s=2)
    take = asyncio.create_task(dispatcher.take(1, busy=(0, 3), slot_freed=asyncio.Event()))
    await asyncio.sleep(0.05)
    driver.queues["hi"].append("h1")  # the fake's wait only looks again when it ends
    got = await asyncio.wait_for(take, 3)
    assert [m.id for m in got] == ["h1"]
    assert list(driver.queues["lo"]) == ["l4"]


async def test_max_concurrency_caps_the_receive() -> None:
    settings = validate_config(config([{"name": "hi", "max_concurrency": 2}, {"name": "lo"}]))
    driver = CountingDriver(settings)
    driver.queues["hi"].extend(f"h{i}" for i in range(5))
    driver.queues["lo"].extend(f"l{i}" for i in range(5))
    got = await dispatcher_for(settings, driver).take(4, busy=(1, 0))
    assert [m.id for m in got] == ["h0", "l0", "l1", "l2"]
    assert driver.calls == [("hi", 1, 0), ("lo", 3, 0)]


async def test_the_starvation_bound_tries_an_untried_queue_first_once_per_period() -> None:
    settings = validate_config(config([{"name": "hi"}, {"name": "lo", "max_wait_s": 10}]))
    driver = CountingDriver(settings)
    clock = [0.0]
    dispatcher = dispatcher_for(settings, driver, clock)
    driver.queues["hi"].extend(f"h{i}" for i in range(100))
    driver.queues["lo"].extend(f"l{i}" for i in range(100))
    served = []
    for second in range(31):  # one free worker a second under continuous high load
        clock[0] = float(second)
        served += [(second, m.id, m.promoted_after_s) for m in await dispatcher.take(1)]
    lows = [entry for entry in served if entry[1].startswith("l")]
    assert lows == [(10, "l0", 10.0), (20, "l1", 10.0), (30, "l2", 10.0)]
    metrics = dispatcher._observer.metrics.render().decode()
    assert 'priority_pubsub_promotions_total{queue="lo"} 3.0' in metrics


async def test_the_starvation_bound_never_takes_a_reserved_worker() -> None:
    settings = validate_config(config([{"name": "hi", "reserve": 1},
                                       {"name": "lo", "max_wait_s": 10}]))
    driver = CountingDriver(settings)
    clock = [100.0]
    dispatcher = dispatcher_for(settings, driver, clock, wait_s=0.01)
    driver.queues["lo"].extend(["l1", "l2"])
    got = await dispatcher.take(1, busy=(0, 3), slot_freed=asyncio.Event())
    assert got == []
    assert all(queue == "hi" for queue, _, _ in driver.calls)
