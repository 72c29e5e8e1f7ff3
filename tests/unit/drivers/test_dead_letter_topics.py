"""The dead-letter-topic wrapper: a message whose topic is found is published there and
nothing else happens to it; one without goes to the driver's own dead letters, or is acked
where the driver keeps none; every other verb is the wrapped driver's."""

from __future__ import annotations

from typing import Any, cast

import pytest

from priority_pubsub.core.message import Lease, Message
from priority_pubsub.drivers.base import Driver
from priority_pubsub.drivers.dead_letter_topics import DeadLetterTopicDriver


class Recorder:
    """A driver that records the verbs it is asked for."""

    releases_count_as_attempts = True

    def __init__(self, *, dead_letters: bool) -> None:
        self.dead_letter_enabled = dead_letters
        self.calls: list[tuple[str, Any]] = []

    async def ack(self, message: Message) -> None:
        self.calls.append(("ack", message.id))

    async def dead_letter(self, message: Message, reason: str) -> None:
        self.calls.append(("dead_letter", (message.id, reason)))

    async def retry(self, message: Message, delay_s: float) -> None:
        self.calls.append(("retry", (message.id, delay_s)))

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.calls.append(("release", (message.id, delay_s)))

    async def depth(self, queue: str) -> int:
        return 7


class ToTopic(DeadLetterTopicDriver):
    name = "to-topic"

    def __init__(self, driver: Recorder, topics: dict[str, str]) -> None:
        super().__init__(cast(Driver, driver))
        self.topics = topics
        self.published: list[tuple[str, str, str]] = []

    async def _to_topic(self, message: Message, reason: str) -> bool:
        topic = self.topics.get(message.queue)
        if topic is None:
            return False
        self.published.append((topic, message.id, reason))
        return True


def message(queue: str) -> Message:
    return Message(id="m1", queue=queue, priority=1, body=b"{}", attributes={}, attempt=1,
                   enqueued_ms=0, lease=Lease(token="t", deadline_ms=0))


async def test_a_message_with_a_topic_goes_there_and_nowhere_else() -> None:
    driver = Recorder(dead_letters=True)
    wrapped = ToTopic(driver, {"orders": "orders-dead"})
    await wrapped.dead_letter(message("orders"), "fatal 400")
    assert wrapped.published == [("orders-dead", "m1", "fatal 400")]
    assert driver.calls == []


async def test_without_a_topic_it_goes_to_the_drivers_own_dead_letters() -> None:
    driver = Recorder(dead_letters=True)
    await ToTopic(driver, {}).dead_letter(message("orders"), "fatal 400")
    assert driver.calls == [("dead_letter", ("m1", "fatal 400"))]


async def test_without_a_topic_or_dead_letters_of_its_own_it_is_acked() -> None:
    driver = Recorder(dead_letters=False)
    await ToTopic(driver, {}).dead_letter(message("orders"), "fatal 400")
    assert driver.calls == [("ack", "m1")]


async def test_the_other_verbs_and_abilities_are_the_wrapped_drivers() -> None:
    driver = Recorder(dead_letters=False)
    wrapped = ToTopic(driver, {"orders": "orders-dead"})
    assert wrapped.dead_letter_enabled  # decided per message
    assert wrapped.releases_count_as_attempts
    await wrapped.retry(message("orders"), 2.5)
    await wrapped.release(message("orders"))
    await wrapped.ack(message("orders"))
    assert driver.calls == [("retry", ("m1", 2.5)), ("release", ("m1", 0.0)), ("ack", "m1")]
    assert await wrapped.depth("orders") == 7  # type: ignore[attr-defined]


async def test_the_base_class_says_where_the_topic_is_nowhere() -> None:
    with pytest.raises(NotImplementedError):
        await DeadLetterTopicDriver(cast(Driver, Recorder(dead_letters=True))).dead_letter(
            message("orders"), "x")
