"""The Service Bus test broker itself, through the real azure-servicebus SDK on 127.0.0.1.

These pin the broker to what Service Bus does, so the driver tests built on it mean something:
refusals (lost locks, unknown entities, bad keys) must fail the way the service fails.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
)

from tests.support.azure_servicebus import ServiceBusBroker

pytestmark = pytest.mark.azure_servicebus


@pytest.fixture
def broker(azure_servicebus_broker: ServiceBusBroker) -> ServiceBusBroker:
    return azure_servicebus_broker


@pytest.fixture
async def client(broker: ServiceBusBroker) -> AsyncIterator[ServiceBusClient]:
    async with ServiceBusClient.from_connection_string(
        broker.connection_string, retry_total=0
    ) as sb:
        yield sb


def fresh_queue(broker: ServiceBusBroker, lock_s: float = 1.0, max_delivery: int = 10) -> str:
    name = f"q{uuid.uuid4().hex[:8]}"
    broker.create_queue(name, lock_duration_s=lock_s, max_delivery_count=max_delivery)
    return name


async def test_peek_lock_delivery_carries_lock_token_and_annotations(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    queue = fresh_queue(broker, lock_s=5)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage(b"a", application_properties={"k": "v"}))
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        [message] = await receiver.receive_messages(max_message_count=5, max_wait_time=2)
        assert message.lock_token is not None
        assert message.sequence_number is not None
        assert message.enqueued_time_utc is not None
        assert message.locked_until_utc is not None
        assert message.locked_until_utc > dt.datetime.now(dt.UTC)
        assert not message.delivery_count  # first delivery: no earlier failed ones
        assert broker.counts(queue).locked == 1
        await receiver.complete_message(message)
    assert broker.counts(queue) == type(broker.counts(queue))(0, 0, 0, 0)


async def test_settle_after_the_broker_dropped_the_lock_is_message_lock_lost(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    queue = fresh_queue(broker, lock_s=30)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage(b"a"))
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        [message] = await receiver.receive_messages(max_wait_time=2)
        with broker._lock:  # expire at the broker only: the SDK still thinks it holds it
            token = message.lock_token
            assert isinstance(token, uuid.UUID)
            broker.entity(queue).locks[token].locked_until_ms = 0
        with pytest.raises(MessageLockLostError):
            await receiver.complete_message(message)
        with pytest.raises(MessageLockLostError):
            await receiver.renew_message_lock(message)


async def test_lock_expiry_and_abandon_raise_the_delivery_count_then_dead_letter(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    queue = fresh_queue(broker, lock_s=0.5, max_delivery=3)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage(b"a"))
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        [first] = await receiver.receive_messages(max_wait_time=2)
        await asyncio.sleep(0.8)  # lock lapses
        [second] = await receiver.receive_messages(max_wait_time=2)
        assert second.delivery_count == 1
        await receiver.abandon_message(second)
        [third] = await receiver.receive_messages(max_wait_time=2)
        assert third.delivery_count == 2
        await receiver.abandon_message(third)
        assert await receiver.receive_messages(max_wait_time=0.5) == []
    async with client.get_queue_receiver(
        queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
    ) as dead:
        [letter] = await dead.receive_messages(max_wait_time=2)
        assert letter.dead_letter_reason == "MaxDeliveryCountExceeded"
        await dead.complete_message(letter)
    del first


async def test_dead_letter_records_reason_and_description(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    queue = fresh_queue(broker, lock_s=5)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage(b"bad"))
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        [message] = await receiver.receive_messages(max_wait_time=2)
        await receiver.dead_letter_message(message, reason="why", error_description="details")
    assert broker.counts(queue).dead_lettered == 1
    async with client.get_queue_receiver(
        queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
    ) as dead:
        [letter] = await dead.receive_messages(max_wait_time=2)
        assert (letter.dead_letter_reason, letter.dead_letter_error_description) == (
            "why",
            "details",
        )
        assert b"".join(letter.body) == b"bad"
        await dead.complete_message(letter)


async def test_peek_does_not_lock_and_schedule_waits_until_due(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    queue = fresh_queue(broker, lock_s=5)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage(b"now"))
        due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)
        [number] = await sender.schedule_messages(ServiceBusMessage(b"later"), due)
        [cancelled] = await sender.schedule_messages(ServiceBusMessage(b"never"), due)
        await sender.cancel_scheduled_messages(cancelled)
    assert number > 0
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        peeked = await receiver.peek_messages(max_message_count=10)
        assert [b"".join(m.body) for m in peeked] == [b"now", b"later"]
        assert broker.counts(queue).locked == 0
        [now] = await receiver.receive_messages(max_message_count=5, max_wait_time=0.5)
        assert b"".join(now.body) == b"now"
        [later] = await receiver.receive_messages(max_message_count=5, max_wait_time=6)
        assert b"".join(later.body) == b"later"
        for message in (now, later):
            await receiver.complete_message(message)
    assert broker.counts(queue).scheduled == 0


async def test_topic_copies_to_every_subscription(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic)
    for name in ("a", "b"):
        broker.create_subscription(topic, name)
    async with client.get_topic_sender(topic) as sender:
        await sender.send_messages(ServiceBusMessage(b"fan"))
    for name in ("a", "b"):
        async with client.get_subscription_receiver(topic, name, prefetch_count=0) as receiver:
            [message] = await receiver.receive_messages(max_wait_time=2)
            await receiver.complete_message(message)


async def test_unknown_entity_and_bad_key_are_refused(broker: ServiceBusBroker) -> None:
    async with ServiceBusClient.from_connection_string(
        broker.connection_string, retry_total=0
    ) as sb:
        with pytest.raises(MessagingEntityNotFoundError):
            async with sb.get_queue_receiver("no-such-queue") as receiver:
                await receiver.receive_messages(max_wait_time=1)
    queue = fresh_queue(broker)
    bad = broker.connection_string.replace(broker.key, "d3Jvbmcta2V5")
    async with ServiceBusClient.from_connection_string(bad, retry_total=0) as sb:
        with pytest.raises(ServiceBusAuthenticationError):
            async with sb.get_queue_sender(queue) as sender:
                await sender.send_messages(ServiceBusMessage(b"x"))
    assert broker.counts(queue).active == 0
