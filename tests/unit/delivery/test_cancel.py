"""The one cancel path of a running delivery (``delivery.cancel``): the timer's cancel and
any other settle the outcome they carry, a shutdown's cancellation still propagates, nothing
is cancelled once the request is over; and a bulk batch sent to a real app is cancelled only
once every entry's delivery was cut short."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from priority_pubsub.app.channel.bulk import BulkChannel, BulkSettings
from priority_pubsub.app.channel.http import HttpAppChannel
from priority_pubsub.app.request import NativeRequestBuilder
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.delivery.cancel import Running, timed_out
from priority_pubsub.settings.config import validate_config
from priority_pubsub.transforms.base import Payload
from tests.support.app import RecordingApp, Reply
from tests.support.waiting import wait_until


def message(message_id: str = "m1", queue: str = "q") -> Message:
    return Message(message_id, queue, 0, b"{}", {}, 1, now_ms(), Lease(None, now_ms() + 60_000))


class Request:
    """A request to the app that answers when told, and says whether it was cancelled."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.cancelled = False

    async def __call__(self) -> Outcome:
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return Outcome.ack(200)


async def test_past_its_timeout_a_request_is_cancelled_and_settles_as_a_timeout() -> None:
    running, request = Running(), Request()
    started = time.monotonic()
    outcome = await running.send(message(), request(), 0.05)
    assert time.monotonic() - started < 1
    assert outcome == timed_out(0.05)
    assert outcome.kind is Kind.RETRY
    assert outcome.reason == "timeout: app did not answer within 0.05s"
    assert request.cancelled  # cut short where it was, not left to run
    assert len(running) == 0
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the worker's task is not left cancelled


async def test_another_cancel_settles_its_own_outcome_once() -> None:
    running, request = Running(), Request()
    sending = asyncio.create_task(running.send(message(), request(), 60))
    await asyncio.sleep(0)
    assert not running.cancel("q", "other", Outcome.release("no such delivery"))
    assert running.cancel("q", "m1", Outcome.release("cancelled by an operator"))
    assert not running.cancel("q", "m1", Outcome.dead("too late: the first cancel wins"))
    assert await sending == Outcome.release("cancelled by an operator")
    assert request.cancelled
    assert not running.cancel("q", "m1", Outcome.release("over"))  # no longer at the app


async def test_cancel_all_cuts_every_running_delivery_short() -> None:
    running = Running()
    sends = [asyncio.create_task(running.send(message(f"m{i}"), Request()(), 60))
             for i in range(3)]
    await asyncio.sleep(0)
    assert running.cancel_all(Outcome.retry("finishing")) == 3
    assert await asyncio.gather(*sends) == [Outcome.retry("finishing")] * 3


@pytest.mark.parametrize("also_cut_short", [False, True])
async def test_a_shutdown_cancellation_still_propagates(also_cut_short: bool) -> None:
    """The worker hands the message back unseen on its task's cancellation: ``send`` must not
    turn that into a settle, even when a cancel of its own came first."""
    running, request = Running(), Request()
    sending = asyncio.create_task(running.send(message(), request(), 60))
    await asyncio.sleep(0)
    if also_cut_short:
        running.cancel("q", "m1", Outcome.retry("cut short"))
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert request.cancelled
    assert len(running) == 0


async def test_an_answer_in_time_disarms_the_timer() -> None:
    running, request = Running(), Request()
    request.answer.set()
    assert await running.send(message(), request(), 0.05) == Outcome.ack(200)
    await asyncio.sleep(0.2)  # past the timeout: a stray cancel would end this test here
    assert not running.cancel("q", "m1", Outcome.retry("late"))


@pytest.fixture
def hung_app() -> Iterator[RecordingApp]:
    with RecordingApp(behaviour=lambda _: Reply(until_closed=True)) as app:
        yield app


async def test_a_sent_batch_is_cancelled_once_every_entry_left(hung_app: RecordingApp) -> None:
    settings = validate_config({"queues": [{"name": "q"}], "app": {"url": hung_app.url}})
    channel = HttpAppChannel(settings.app, exact_status=True)
    bulk = BulkChannel(channel, channel, {"q": BulkSettings(max_messages=2)}, lambda: True)
    await bulk.start()
    running = Running()
    try:
        prepare = NativeRequestBuilder(settings).prepare
        deliveries = [running.send(m, bulk.deliver(prepare(m, Payload(b"{}", {}, None))), 60)
                      for m in (message("m1"), message("m2"))]
        sends = [asyncio.create_task(delivery) for delivery in deliveries]
        await asyncio.to_thread(hung_app.wait_for, 1)
        assert len(hung_app.received[0].event["entries"]) == 2  # both in one request
        assert running.cancel("q", "m1", Outcome.retry("first cut short"))
        assert await sends[0] == Outcome.retry("first cut short")
        await asyncio.sleep(0.3)
        assert hung_app.closed == []  # m2 still waits for the answer
        assert running.cancel("q", "m2", Outcome.retry("second cut short"))
        assert await sends[1] == Outcome.retry("second cut short")
        await asyncio.to_thread(wait_until, lambda: len(hung_app.closed) == 1, 5)
    finally:
        await bulk.close()
