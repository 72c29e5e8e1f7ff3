"""An operator's cancel of a running delivery, the parts alone: what each
choice settles as (a drop is gone even where dead letters have a destination), the running
deliveries found by id, and the app gate learning nothing from it (no breaker trip, no
backoff: the app did not fail)."""

from __future__ import annotations

import asyncio

import pytest

from priority_pubsub.app.gate import AppGate
from priority_pubsub.core.outcome import Kind
from priority_pubsub.delivery.cancel import BY_OPERATOR, Running, by_operator, is_by_operator
from priority_pubsub.delivery.settlement import Verb, plan_settlement
from priority_pubsub.settings.config import RetryConfig
from priority_pubsub.telemetry.metrics import Metrics
from tests.support.waiting import wait_until
from tests.unit.delivery.test_cancel import Request
from tests.unit.delivery.test_cancel import message as message_of
from tests.unit.delivery.test_worker import RecordingDriver, hung_app, message, worker


def test_each_choice_settles_as_the_operator_chose() -> None:
    policy = RetryConfig(max_attempts=3)
    plans = {settle: plan_settlement(by_operator(settle), 1, policy, dead_letter_enabled=True)
             for settle in ("retry", "dead_letter", "drop")}
    assert {s: (p.kind, p.verb, p.reason) for s, p in plans.items()} == {
        "retry": (Kind.RETRY, Verb.RETRY, BY_OPERATOR),
        "dead_letter": (Kind.DEAD, Verb.DEAD_LETTER, BY_OPERATOR),
        "drop": (Kind.DROP, Verb.ACK, BY_OPERATOR),  # gone, not dead-lettered
    }
    assert plans["retry"].delay_s == policy.delay_for(1)  # later, with backoff
    # an operator's drop is gone where the driver settles drops itself too (Dapr)
    assert plan_settlement(by_operator("drop"), 1, policy, drop_handled=True).verb is Verb.ACK
    assert all(is_by_operator(by_operator(s)) for s in plans)


async def test_a_cancel_finds_the_delivery_by_id_and_returns_the_choice() -> None:
    running, request = Running(), Request()
    sending = asyncio.create_task(running.send(message_of("m1", "high"), request(), 60))
    await asyncio.sleep(0.01)
    assert running.queues_of("m1") == ["high"]
    assert (running.at_app("high", "m1"), running.at_app("low", "m1")) == (True, False)
    assert running.cancel("high", "m1", by_operator("dead_letter"))
    outcome = await asyncio.wait_for(sending, 1)
    assert (outcome.kind, outcome.reason) == (Kind.DEAD, BY_OPERATOR)
    assert request.cancelled
    assert running.queues_of("m1") == []
    assert not running.cancel("high", "m1", by_operator("drop"))  # it has ended


@pytest.mark.parametrize("channel", ["http", "grpc"])
async def test_an_operator_s_cancel_aborts_the_request_and_teaches_the_gate_nothing(
    channel: str,
) -> None:
    """The app sees its request go (the HTTP connection closed, the gRPC call cancelled), the
    slot is freed at once, the message is retried as chosen, and a circuit breaker that opens
    at the first app failure stays closed: the operator's cancel is no failure of the app."""
    driver = RecordingDriver()
    with hung_app(channel) as (url, cut_off):
        subject = worker(driver, app={"url": url,
                                      "circuit_breaker": {"consecutive_failures": 1}})
        gate = AppGate(subject._live, Metrics())
        gate.health.probe_passed()  # the app is up: the start gate is open
        subject._gate = gate
        await subject._channel.start()
        freed = asyncio.Event()
        try:
            handling = asyncio.create_task(subject.handle(message(), freed.set))
            await asyncio.to_thread(wait_until, lambda: len(subject.running) == 1, 20)
            assert subject.running.cancel("q", "m1", by_operator("retry"))
            await asyncio.wait_for(freed.wait(), 10)
            await asyncio.wait_for(handling, 20)
            await asyncio.to_thread(wait_until, lambda: cut_off() == 1, 20)
        finally:
            await subject._channel.close()
    assert driver.calls == [("retry", 2.0)]
    assert gate.blocked() is None  # the breaker did not open
