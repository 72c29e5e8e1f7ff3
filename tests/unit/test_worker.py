"""The worker never strands a message: a broken transform or an internal error still ends in
exactly one settle call (with a fake driver: this is our logic, not a broker's)."""

from __future__ import annotations

from typing import Any

import pytest

from priority_pubsub.config import validate_config
from priority_pubsub.forwarder import Forwarder
from priority_pubsub.message import Lease, Message, now_ms
from priority_pubsub.metrics import Metrics
from priority_pubsub.transforms.base import Payload, TransformChain
from priority_pubsub.worker import Worker


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


def worker(driver: RecordingDriver) -> Worker:
    settings = validate_config({"queues": [{"name": "q"}], "dead_letter": {"queue": "dead"},
                                "retry": {"max_attempts": 3, "initial_delay_s": 2}})
    forwarder = Forwarder(settings.app, 1)
    return Worker(settings, driver, forwarder, Metrics(), None)  # type: ignore[arg-type]


async def test_a_transform_bug_dead_letters_with_the_reason() -> None:
    driver = RecordingDriver()
    subject = worker(driver)
    subject._chain = TransformChain([BrokenTransform()])
    await subject.handle(message())
    assert len(driver.calls) == 1
    verb, reason = driver.calls[0]
    assert verb == "dead_letter"
    assert "transform failed: broken: unexpected KeyError" in reason


@pytest.mark.parametrize(("attempt", "expected"), [(1, ("retry", 2.0)), (3, "dead_letter")])
async def test_an_internal_error_retries_then_dead_letters(
    attempt: int, expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = RecordingDriver()
    subject = worker(driver)

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("priority_pubsub.delivery.build_request", explode)
    await subject.handle(message(attempt))
    assert len(driver.calls) == 1
    if expected == "dead_letter":
        assert driver.calls[0][0] == "dead_letter"
        assert "internal error: RuntimeError: bug" in driver.calls[0][1]
    else:
        assert driver.calls[0] == expected
