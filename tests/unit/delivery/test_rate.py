"""Per-queue rate: the token bucket alone, then the dispatcher asking a
rated queue for its whole tokens at most, going on to the next queue while it has none,
waking when its next token is due, and never taking more than ``burst + per_s x t``."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.rate import LATE_KEPT, HeldTime, TokenBucket, buckets_for
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import RateConfig, Settings, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from tests.e2e.helpers import total
from tests.unit.delivery.test_dispatcher_capacity_rule import CountingDriver


def test_a_bucket_starts_full_refills_at_its_rate_and_caps_at_its_burst() -> None:
    bucket = TokenBucket.full(RateConfig(per_s=2, burst=3), now=0.0)
    assert bucket.whole(0.0) == 3
    bucket.take(3, 0.0)
    assert (bucket.whole(0.0), bucket.next_in_s(0.0)) == (0, 0.5)
    assert (bucket.whole(0.49), bucket.whole(0.5), bucket.whole(1.0)) == (0, 1, 2)
    assert bucket.whole(100.0) == 3  # never more than the burst
    bucket.take(1, 100.0)
    bucket.give_back(5, 100.0)  # handed back unseen: not spent, still capped
    assert bucket.whole(100.0) == 3
    assert bucket.next_in_s(100.0) == 0.0


def test_a_backlogged_queue_keeps_its_schedule_through_slot_waits() -> None:
    """2 a second, burst 1, each message taken 0.06 s after its token was due (waiting for a
    free slot): on schedule, 40 in 20 s; a strict bucket loses 0.12 of a token each time."""
    for on_schedule, expected in ((True, 40), (False, 36)):
        bucket = TokenBucket.full(RateConfig(per_s=2, burst=1), 0.0)
        now, taken = 0.0, 0
        while now < 20:
            bucket.take(1, now, on_schedule=on_schedule)
            taken += 1
            now += bucket.next_in_s(now) + 0.06
        assert taken == expected, on_schedule
    quiet = TokenBucket.full(RateConfig(per_s=2, burst=1), 0.0)
    quiet.take(1, 100.0, on_schedule=True)  # full for 99.5 s: half a token kept at most
    assert (quiet.whole(100.0), quiet.next_in_s(100.0)) == (0, 0.25)


def test_a_reload_keeps_the_tokens_held_up_to_the_new_burst() -> None:
    kept = {"a": TokenBucket.full(RateConfig(per_s=1, burst=5), 0.0)}
    kept["a"].take(2, 0.0)
    again = buckets_for([("a", RateConfig(per_s=4, burst=2)), ("b", RateConfig(per_s=1)),
                         ("c", None)], kept, 0.0)
    assert sorted(again) == ["a", "b"]
    assert (again["a"].whole(0.0), again["a"].per_s) == (2, 4)
    assert again["b"].whole(0.0) == 1  # new: full


def test_held_time_counts_up_to_each_update() -> None:
    counted: list[tuple[str, float]] = []
    held = HeldTime(lambda name, s: counted.append((name, s)))
    held.update(1.0, ["a"])
    held.update(3.5, ["a", "b"])
    held.update(4.0, [])
    held.update(9.0, [])
    assert counted == [("a", 2.5), ("a", 0.5), ("b", 0.5)]


def test_a_bad_rate_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^queues\.0\.rate\.per_s: ") as caught:
        validate_config({"queues": [{"name": "a", "rate": {"per_s": 0}}]})
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"^queues\.0\.rate\.burst: "):
        validate_config({"queues": [{"name": "a", "rate": {"per_s": 1, "burst": 0}}]})


def rated(per_s: float = 2, burst: int = 1, concurrency: int = 4) -> Settings:
    return validate_config({"queues": [{"name": "hi", "rate": {"per_s": per_s, "burst": burst}},
                                       {"name": "lo"}], "concurrency": concurrency})


def dispatcher_on(settings: Settings | LiveSettings, driver: CountingDriver,
                  clock: list[float], wait_s: float = 0.01) -> Dispatcher:
    live = LiveSettings.of(settings)
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    return Dispatcher(live, driver, observer,  # type: ignore[arg-type]
                      Settler(live, driver, observer),  # type: ignore[arg-type]
                      idle_wait_s=wait_s, clock=lambda: clock[0])


async def test_a_rated_queue_is_asked_for_its_tokens_and_the_rest_goes_below() -> None:
    settings = rated()
    driver = CountingDriver(settings)  # fails on any hand-back
    driver.queues["hi"].extend(f"h{n}" for n in range(10))
    driver.queues["lo"].extend(f"l{n}" for n in range(10))
    clock = [0.0]
    dispatcher = dispatcher_on(settings, driver, clock)
    got = await dispatcher.take(4, busy=(0, 0))
    assert [m.id for m in got] == ["h0", "l0", "l1", "l2"]
    assert driver.calls == [("hi", 1, 0), ("lo", 3, 0)]  # hi asked for its one token
    clock[0] = 0.3
    got = await dispatcher.take(1, busy=(1, 3), slot_freed=asyncio.Event())
    assert [m.id for m in got] == ["l3"]  # no token yet: the worker goes to lo
    assert all(queue == "lo" for queue, _, _ in driver.calls[2:])
    clock[0] = 0.5
    got = await dispatcher.take(1, busy=(1, 3), slot_freed=asyncio.Event())
    assert [m.id for m in got] == ["h1"]
    metrics = dispatcher._observer.metrics.render().decode()
    assert 'priority_pubsub_rate_limited_seconds_total{queue="hi"} 0.2' in metrics


async def test_a_take_waiting_for_a_token_ends_when_it_is_due() -> None:
    """Only the rated queue has work: the take waits for its next token (0.5 s at 2 a
    second), not for the whole idle wait (5 s)."""
    settings = rated(per_s=2, burst=1)
    driver = CountingDriver(settings)
    driver.queues["hi"].extend(["h0", "h1"])
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    dispatcher = Dispatcher(settings, driver, observer,  # type: ignore[arg-type]
                            Settler(settings, driver, observer),  # type: ignore[arg-type]
                            idle_wait_s=5)
    assert [m.id for m in await dispatcher.take(1)] == ["h0"]
    started = time.monotonic()
    got = await asyncio.wait_for(dispatcher.take(2, busy=(1, 0), slot_freed=asyncio.Event()),
                                 4)
    if not got:  # the wait ended at the token: the next take takes it
        got = await asyncio.wait_for(
            dispatcher.take(2, busy=(1, 0), slot_freed=asyncio.Event()), 4)
    assert [m.id for m in got] == ["h1"]
    assert time.monotonic() - started < 2.5
    assert ("lo", 2, 5) in driver.calls  # lo was waited on meanwhile


@settings(max_examples=60, deadline=None)
@given(per_s=st.floats(0.5, 20), burst=st.integers(1, 6), seed=st.integers(0, 2**16),
       steps=st.lists(st.tuples(st.floats(0.01, 1.5), st.integers(1, 6)), min_size=5,
                      max_size=40))
def test_never_more_than_burst_plus_rate_times_time(
    per_s: float, burst: int, seed: int, steps: list[tuple[float, int]]
) -> None:
    """Whatever the takes' timing and free workers (a backlog on both queues, the app done
    at once), the rated queue's count by time t never passes ``burst + per_s x t`` and half
    a token kept for its schedule, and nothing is handed back (the driver fails on a
    release)."""
    settings = rated(per_s, burst, concurrency=6)
    driver = CountingDriver(settings)
    driver.queues["hi"].extend(f"h{n}" for n in range(1000))
    driver.queues["lo"].extend(f"l{n}" for n in range(1000))
    clock = [0.0]

    async def run() -> None:
        dispatcher = dispatcher_on(settings, driver, clock, wait_s=0.001)
        taken = 0
        for gap, free in steps:
            clock[0] += gap
            got = await dispatcher.take(free, busy=(0, 0), slot_freed=asyncio.Event())
            taken += sum(1 for m in got if m.queue == "hi")
            assert taken <= burst + per_s * clock[0] + LATE_KEPT + 1e-9, (taken, clock[0])

    asyncio.run(run())


async def test_a_due_heavy_queue_out_of_tokens_gets_no_slots_held() -> None:
    settings = validate_config({"queues": [
        {"name": "lo"},
        {"name": "heavy", "slots": 2, "max_wait_s": 1, "rate": {"per_s": 0.1, "burst": 1}},
    ], "concurrency": 4})
    driver = CountingDriver(settings)
    driver.queues["lo"].extend(f"l{n}" for n in range(10))
    driver.queues["heavy"].extend(["v0", "v1"])
    clock = [0.0]
    dispatcher = dispatcher_on(settings, driver, clock)
    clock[0] = 2.0  # heavy due: promoted into the two free slots, its one token spent
    assert [m.id for m in await dispatcher.take(2, busy=(2, 0))] == ["v0"]
    clock[0] = 5.0  # heavy due again, one slot free, no token (the next at 12 s)
    got = await dispatcher.take(1, busy=(3, 0), slot_freed=asyncio.Event())
    assert [m.id for m in got] == ["l0"]  # the slot was not held for heavy
    assert total(dispatcher._observer.metrics.render().decode(),
                 "priority_pubsub_slots_held_seconds_total") == 0


def test_looking_at_a_full_bucket_does_not_move_when_it_filled() -> None:
    """The dispatcher reads the tokens at every pick: a bucket read while full still knows
    it filled at 0.5 s, so a take at 0.56 s keeps the 0.06 s."""
    bucket = TokenBucket.full(RateConfig(per_s=2, burst=1), 0.0)
    bucket.take(1, 0.0)
    for now in (0.3, 0.5, 0.52, 0.55):
        bucket.whole(now)
    bucket.take(1, 0.56, on_schedule=True)
    assert bucket.next_in_s(0.56) == pytest.approx(0.44)


async def test_a_reload_changes_the_rate_for_the_next_take() -> None:
    """``rate`` is read through the live settings: the bucket keeps its tokens (none, just
    spent) and gains at the new rate from then on."""
    live = LiveSettings(rated(per_s=2, burst=1))
    driver = CountingDriver(live.settings)
    driver.queues["hi"].extend(f"h{n}" for n in range(10))
    clock = [0.0]
    dispatcher = dispatcher_on(live, driver, clock)
    assert [m.id for m in await dispatcher.take(1)] == ["h0"]
    live.replace(rated(per_s=100, burst=5))
    assert await dispatcher.take(4, slot_freed=asyncio.Event()) == []  # in force: 0 tokens
    clock[0] = 0.03  # 3 tokens at the new rate (none yet at the old one)
    got = await dispatcher.take(4, slot_freed=asyncio.Event())
    assert [m.id for m in got] == ["h1", "h2", "h3"]
    assert ("hi", 3, 0) in driver.calls
