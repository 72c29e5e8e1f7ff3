"""The stream hub's own rules (``app.channel.streams``): a topic unknown at start gets its
queue once, however many streams ask at the same time; without a way to make one the
stream is refused naming the topic; a stream's dead-letter topic is its topic's while open.
The streams themselves run against the real sidecar in tests/e2e/test_dapr_streaming.py."""

from __future__ import annotations

import asyncio

import pytest

from priority_pubsub.app.channel.streams import StreamHub, TopicRefused


async def test_a_topic_unknown_at_start_is_refused_without_a_queue_maker() -> None:
    hub = StreamHub("pubsub", {"orders": "orders"})
    await hub.add_topic("orders")  # known: nothing to do
    with pytest.raises(TopicRefused, match="topic late has no queue") as refused:
        await hub.add_topic("late")
    assert refused.value.code == "NOT_FOUND"
    assert "late" not in hub.queues


async def test_two_streams_on_one_new_topic_make_one_queue_taken_only_while_streamed() -> None:
    made: list[str] = []

    async def make(topic: str) -> str:
        made.append(topic)
        await asyncio.sleep(0.01)
        return f"app-{topic}"

    hub = StreamHub("pubsub", {}, make)
    await asyncio.gather(hub.add_topic("late"), hub.add_topic("late"))
    assert made == ["late"]
    assert hub.queues == {"late": "app-late"}
    assert hub.taken() == frozenset()  # made, but no stream open yet
    stream = hub.open("late")
    assert hub.taken() == {"app-late"}
    assert hub.topic_of("app-late") == "late"
    hub.close(stream)
    assert hub.taken() == frozenset()


async def test_a_refused_queue_leaves_the_topic_unknown() -> None:
    async def refuse(topic: str) -> str:
        raise TopicRefused(f"topic {topic}: no such queue", "NOT_FOUND")

    hub = StreamHub("pubsub", {}, refuse)
    with pytest.raises(TopicRefused, match="topic gone: no such queue"):
        await hub.add_topic("gone")
    assert hub.queues == {}


async def test_the_dead_letter_topic_is_the_latest_open_streams_that_names_one() -> None:
    hub = StreamHub("pubsub", {"orders": "orders"})
    assert hub.dead_letter_topic("orders") is None
    first = hub.open("orders", "poison")
    plain = hub.open("orders")
    assert hub.dead_letter_topic("orders") == "poison"  # the plain stream names none
    second = hub.open("orders", "poison-2")
    assert hub.dead_letter_topic("orders") == "poison-2"
    hub.close(second)
    assert hub.dead_letter_topic("orders") == "poison"
    hub.close(first)
    hub.close(plain)
    assert hub.dead_letter_topic("orders") is None
