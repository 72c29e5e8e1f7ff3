"""Which queues a replica takes from: the operator's pauses and drain, the config's pauses,
and who is told of a change."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from priority_pubsub.delivery.control import QueueControl
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics


def settings(**queue: dict[str, Any]) -> Settings:
    """Queues hi and lo, each with the keys given for it."""
    return validate_config({"queues": [{"name": name, **queue.get(name, {})}
                                       for name in ("hi", "lo")]})


def gauge(metrics: Metrics, name: str, queue: str | None = None) -> float:
    labels = "" if queue is None else f'{{queue="{queue}"}}'
    for line in metrics.render().decode().splitlines():
        if line.startswith(f"{name}{labels} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not rendered")


def control_of(live: LiveSettings) -> tuple[QueueControl, Metrics, list[str]]:
    metrics = Metrics()
    control = QueueControl(live, metrics)
    told: list[str] = []
    control.on_change(lambda: told.append("changed"))
    return control, metrics, told


def test_an_operators_pause_closes_one_queue_until_resumed_and_says_so() -> None:
    control, metrics, told = control_of(LiveSettings(settings()))
    assert control.closed == frozenset()
    assert control.pause("hi", "deploying hi's consumer")
    assert not control.pause("hi", "twice")  # already paused: the first reason stays
    assert (control.closed, control.paused["hi"].reason) == ({"hi"}, "deploying hi's consumer")
    assert gauge(metrics, "priority_pubsub_queue_paused", "hi") == 1
    assert gauge(metrics, "priority_pubsub_queue_paused", "lo") == 0
    assert control.resume("hi")
    assert not control.resume("hi")
    assert control.closed == frozenset()
    assert gauge(metrics, "priority_pubsub_queue_paused", "hi") == 0
    assert told == ["changed", "changed"]  # each real change, not the no-ops


def test_an_unknown_queue_cannot_be_paused_or_resumed() -> None:
    control, _, told = control_of(LiveSettings(settings()))
    with pytest.raises(KeyError):
        control.pause("nope", "typo")
    with pytest.raises(KeyError):
        control.resume("nope")
    assert (control.closed, told) == (frozenset(), [])


def test_a_drain_closes_every_queue_and_its_end_reopens_only_the_unpaused() -> None:
    control, metrics, told = control_of(LiveSettings(settings()))
    control.pause("lo", "test")
    assert control.start_drain("node going away")
    assert not control.start_drain("again")
    assert (control.draining, control.closed) == (True, {"hi", "lo"})
    assert gauge(metrics, "priority_pubsub_draining") == 1
    assert control.end_drain()
    assert not control.end_drain()
    assert (control.draining, control.closed) == (False, {"lo"})
    assert gauge(metrics, "priority_pubsub_draining") == 0
    assert len(told) == 3


async def test_the_configs_pause_closes_a_queue_on_reload_and_wakes_a_waiter() -> None:
    """A reload that closes or opens a queue wakes whoever waits for a change (a dispatcher
    with every queue closed); the operator's listeners are not called: their retake is for
    the operator's changes, the dispatcher ends its own wait on a reload."""
    live = LiveSettings(settings())
    control, metrics, told = control_of(live)
    waiting = asyncio.create_task(control.wait_for_change())
    await asyncio.sleep(0)
    live.replace(settings(hi={"paused": True}))
    await asyncio.wait_for(waiting, 1)
    assert (control.closed, control.paused_by_config("hi"), control.paused) == ({"hi"}, True, {})
    assert gauge(metrics, "priority_pubsub_queue_paused", "hi") == 0  # the operator's gauge
    assert told == []


async def test_a_queue_is_closed_while_either_the_config_or_the_operator_holds_it() -> None:
    live = LiveSettings(settings(hi={"paused": True}))
    control, _, _ = control_of(live)
    control.pause("hi", "test")
    live.replace(settings())  # the config resumes hi: the operator still holds it
    assert control.closed == {"hi"}
    live.replace(settings(hi={"paused": True}))
    control.resume("hi")  # the operator resumes hi: the config still holds it
    assert control.closed == {"hi"}


async def test_a_reload_that_closes_nothing_new_wakes_nobody() -> None:
    live = LiveSettings(settings())
    control, _, _ = control_of(live)
    waiting = asyncio.create_task(control.wait_for_change())
    live.replace(settings(lo={"weight": 3}))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()


def test_each_change_replaces_the_closed_set() -> None:
    """The dispatcher maps ``closed`` to its queues' indices once per set, by identity."""
    control, _, _ = control_of(LiveSettings(settings()))
    before = control.closed
    control.pause("hi", "test")
    during = control.closed
    control.resume("hi")
    assert before is not during
    assert during is not control.closed


async def test_a_queue_added_at_run_time_can_be_paused_and_is_labelled() -> None:
    live = LiveSettings(settings())
    control, metrics, _ = control_of(live)
    assert live.add_queue("late")
    assert gauge(metrics, "priority_pubsub_queue_paused", "late") == 0
    assert control.pause("late", "test")
    assert control.closed == {"late"}
    assert gauge(metrics, "priority_pubsub_queue_paused", "late") == 1
