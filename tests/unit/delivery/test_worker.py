"""The worker never strands a message: a broken transform or an internal error still ends in
exactly one settle call (with a fake driver: this is our logic, not a broker's); a hung app
is cut off at the delivery's timeout (real apps, HTTP and gRPC)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from priority_pubsub.app.channel import build_channel
from priority_pubsub.app.channel.bulk import Batch, BulkChannel, BulkSettings
from priority_pubsub.app.request import Prepared
from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.delivery.settlement import LAST_ATTEMPT_KEPT
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.delivery.worker import SHUTDOWN_REASON, STOPPING_REASON, Worker
from priority_pubsub.settings.config import validate_config
from priority_pubsub.telemetry.journal import JournalWriter, read_journal_lines
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from priority_pubsub.transforms.base import Payload, TransformChain
from tests.support.app import RecordingApp, Reply
from tests.support.grpc_app import UNTIL_CANCELLED, GrpcApp
from tests.support.waiting import wait_until


class RecordingDriver:
    name = "fake"
    dead_letter_enabled = True
    releases_count_as_attempts = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def ack(self, message: Message) -> None:
        self.calls.append(("ack", None))

    async def retry(self, message: Message, delay_s: float) -> None:
        self.calls.append(("retry", delay_s))

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.calls.append(("release", delay_s))

    async def dead_letter(self, message: Message, reason: str) -> None:
        self.calls.append(("dead_letter", reason))

    async def extend(self, message: Message, duration_s: float) -> None:
        self.calls.append(("extend", duration_s))


class BrokenTransform:
    name = "broken"

    def __call__(self, payload: Payload) -> Payload:
        raise KeyError("Message")


def message(attempt: int = 1) -> Message:
    return Message("m1", "q", 0, b"{}", {}, attempt, now_ms(), Lease(None, now_ms() + 60_000))


def worker(driver: RecordingDriver, journal: JournalWriter | None = None,
           **config: Any) -> Worker:
    settings = validate_config({"queues": [{"name": "q"}], "dead_letter": {"queue": "dead"},
                                "retry": {"max_attempts": 3, "initial_delay_s": 2}, **config})
    channel = build_channel(settings)
    observer = DeliveryObserver(Metrics(), journal, driver_type="fake")
    settler = Settler(settings, driver, observer)  # type: ignore[arg-type]
    return Worker(settings, driver, channel, observer, settler)  # type: ignore[arg-type]


async def test_a_transform_bug_dead_letters_with_the_reason() -> None:
    driver = RecordingDriver()
    subject = worker(driver)
    subject._chain = TransformChain([BrokenTransform()])
    await subject.handle(message())
    assert len(driver.calls) == 1
    verb, reason = driver.calls[0]
    assert verb == "dead_letter"
    assert "transform failed: broken: unexpected KeyError" in reason


@pytest.mark.parametrize("broken", [False, True])
async def test_the_app_slot_is_given_back_before_the_settle_call(broken: bool) -> None:
    """The receiver may take the next message while this one settles: ``answered`` comes
    once, before the driver's settle call, whether or not the attempt reached the app."""
    driver = RecordingDriver()
    subject = worker(driver)
    if broken:
        subject._chain = TransformChain([BrokenTransform()])
    settle_calls_when_answered: list[int] = []
    await subject.handle(message(), lambda: settle_calls_when_answered.append(len(driver.calls)))
    assert settle_calls_when_answered == [0]
    assert len(driver.calls) == 1


@pytest.mark.parametrize(("attempt", "expected"), [(1, ("retry", 2.0)), (3, "dead_letter")])
async def test_an_internal_error_retries_then_dead_letters(
    attempt: int, expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = RecordingDriver()
    subject = worker(driver)

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("priority_pubsub.app.request.build_request", explode)
    await subject.handle(message(attempt))
    assert len(driver.calls) == 1
    if expected == "dead_letter":
        assert driver.calls[0][0] == "dead_letter"
        assert "internal error: RuntimeError: bug" in driver.calls[0][1]
    else:
        assert driver.calls[0] == expected


class FailingAck(RecordingDriver):
    def __init__(self, error: DriverError) -> None:
        super().__init__()
        self.error = error

    async def ack(self, message: Message) -> None:
        self.calls.append(("ack", None))
        raise self.error


@pytest.mark.parametrize(("error", "said"), [
    (DriverError("broker said no"), "ack; settle failed: broker said no"),
    (LeaseLost("lease lapsed"), "ack; settle refused: lease lost: lease lapsed"),
])
async def test_a_failed_settle_is_journaled_as_settle_failed_never_ack(
    error: DriverError, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app said 200 but the delete failed: the broker will deliver the
    message again, so the journal must not say ``ack``."""
    async def app_says_ok(*_: object) -> Outcome:
        return Outcome.ack(200)

    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    subject = worker(FailingAck(error), journal)
    monkeypatch.setattr(subject._channel, "post", app_says_ok)
    await subject.handle(message())
    await journal.close()
    [path] = tmp_path.glob("journal-*.jsonl")
    [record] = read_journal_lines(path)[0]
    assert (record["outcome"], record["http_status"], record["reason"]) == (
        "settle_failed", 200, said)


async def test_a_retriable_settle_failure_is_retried_while_the_lease_lasts() -> None:
    driver = FailingAck(DriverUnavailable("blip"))
    attempts = 0

    async def flaky_ack(message: Message) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise DriverUnavailable("blip")

    driver.ack = flaky_ack  # type: ignore[method-assign]
    subject = worker(driver)

    async def app_says_ok(*_: object) -> Outcome:
        return Outcome.ack(200)

    subject._channel.post = app_says_ok  # type: ignore[method-assign]
    await subject.handle(message())
    assert attempts == 3


@contextlib.contextmanager
def hung_app(channel: str) -> Iterator[tuple[str, Callable[[], int]]]:
    """An app that never answers: its URL, and how many of its requests it saw cut off (the
    HTTP connection closed, the gRPC call cancelled)."""
    if channel == "http":
        with RecordingApp(behaviour=lambda _: Reply(until_closed=True)) as app:
            yield app.url, lambda: len(app.closed)
    else:
        with GrpcApp(answer=lambda _: UNTIL_CANCELLED) as grpc_app:
            yield grpc_app.url, lambda: len(grpc_app.cancelled)


@pytest.mark.parametrize("channel", ["http", "grpc"])
@pytest.mark.parametrize("set_on", ["queue", "app"])
async def test_a_hung_app_is_cut_off_at_the_timeout_and_the_message_retried(
    channel: str, set_on: str, tmp_path: Path
) -> None:
    """Past its timeout (the queue's over the app's, one mechanism) the
    request is cancelled and the app sees it go, the slot is given back at once, and the
    message is retried with backoff, a counted attempt, with reason ``timeout``."""
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    driver = RecordingDriver()
    with hung_app(channel) as (url, cut_off):
        timeouts: dict[str, Any] = (
            {"queues": [{"name": "q", "timeout_s": 0.5}], "app": {"url": url, "timeout_s": 600}}
            if set_on == "queue" else {"app": {"url": url, "timeout_s": 0.5}})
        subject = worker(driver, journal, **timeouts)
        await subject._channel.start()
        started = time.monotonic()
        freed: list[float] = []
        try:
            await subject.handle(message(), lambda: freed.append(time.monotonic() - started))
            await asyncio.to_thread(wait_until, lambda: cut_off() == 1, 5)
        finally:
            await subject._channel.close()
    await journal.close()
    assert 0.5 <= freed[0] < 3, freed
    assert driver.calls == [("retry", 2.0)]  # retry.initial_delay_s: an attempt, as any retry
    [path] = tmp_path.glob("journal-*.jsonl")
    [record] = read_journal_lines(path)[0]
    assert (record["outcome"], record["attempt"], record["reason"]) == (
        "retry", 1, "timeout: app did not answer within 0.5s")


class HeldByTheApp:
    """An app channel whose app takes the request and never answers."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def deliver(self, prepared: Prepared) -> Outcome:
        self.reached.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")


class StuckTransform:
    """An async transform that never ends (a claim check's fetch that hangs)."""

    name = "stuck"

    def __init__(self) -> None:
        self.reached = asyncio.Event()

    async def apply(self, payload: Payload) -> Payload:
        self.reached.set()
        await asyncio.Event().wait()
        return payload


def journaled(directory: Path) -> list[tuple[str, int, str]]:
    [path] = directory.glob("journal-*.jsonl")
    return [(r["outcome"], r["attempt"], r["reason"]) for r in read_journal_lines(path)[0]]


async def stop_when(reached: asyncio.Event, subject: Worker, held: Message) -> None:
    """Run ``held`` through ``subject`` and cancel it (the stop past its grace period) once
    it got as far as ``reached``."""
    task = asyncio.create_task(subject.handle(held))
    await asyncio.wait_for(reached.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(("attempt", "call", "reason"), [
    (1, ("retry", 0.0), SHUTDOWN_REASON),
    (2, ("retry", 0.0), SHUTDOWN_REASON),
    (3, ("release", 0.0), f"{SHUTDOWN_REASON}; {LAST_ATTEMPT_KEPT}"),
])
async def test_a_stop_returns_what_the_app_had_at_once_counted_never_past_the_limit(
    attempt: int, call: tuple[str, float], reason: str, tmp_path: Path
) -> None:
    """The app had it, so the attempt counts; but at the last one
    (``retry.max_attempts`` 3) a counted return would make the next delivery the fourth,
    which ``admit`` dead-letters before the app sees it: there it goes back uncounted."""
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    driver = RecordingDriver()
    subject = worker(driver, journal)
    subject._channel = app = HeldByTheApp()
    await stop_when(app.reached, subject, message(attempt))
    await journal.close()
    assert driver.calls == [call]
    assert journaled(tmp_path) == [("retry", attempt, reason)]


async def test_a_stop_before_the_app_got_the_message_releases_it_unseen(
    tmp_path: Path
) -> None:
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    driver = RecordingDriver()
    subject = worker(driver, journal)
    subject._chain = TransformChain([stuck := StuckTransform()])
    subject._channel = app = HeldByTheApp()
    await stop_when(stuck.reached, subject, message(2))
    await journal.close()
    assert not app.reached.is_set()
    assert driver.calls == [("release", 0.0)]
    assert journaled(tmp_path) == [("release", 2, STOPPING_REASON)]


class NoBulkAnswer:
    async def deliver_bulk(self, batch: Batch) -> dict[str, Outcome] | Outcome:
        raise AssertionError("the batch was never to be sent")


async def test_a_stop_releases_a_bulk_entry_whose_batch_was_not_sent(tmp_path: Path) -> None:
    """Dapr's bulk subscriptions: an entry waits in its batch (``maxAwaitDurationMs``) with
    its worker; stopped there, the app never saw it: released, uncounted."""
    journal = JournalWriter(tmp_path, rotate_mb=1)
    journal.start()
    driver = RecordingDriver()
    subject = worker(driver, journal)
    inner = HeldByTheApp()
    subject._channel = BulkChannel(inner, NoBulkAnswer(), {"q": BulkSettings(10, 60)},
                                     has_room=lambda: True)
    task = asyncio.create_task(subject.handle(message(3)))
    await asyncio.to_thread(wait_until, lambda: len(subject.running) == 1, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await journal.close()
    assert not inner.reached.is_set()
    assert driver.calls == [("release", 0.0)]
    assert journaled(tmp_path) == [("release", 3, STOPPING_REASON)]
