"""The Service Bus driver through the real azure-servicebus SDK against the test broker.

The broker (``tests/support/azure_servicebus``) speaks AMQP 1.0 on 127.0.0.1 the way
Service Bus does for the SDK; see its docstring for what it does and does not implement.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from pydantic import ValidationError

from priority_pubsub.core.errors import DriverError, LeaseLost
from priority_pubsub.delivery.requeue import requeue_one
from priority_pubsub.drivers.azure_servicebus import ServiceBusDriver
from priority_pubsub.drivers.azure_servicebus.options import ServiceBusOptions
from priority_pubsub.drivers.azure_servicebus.wire import ATTEMPTS_PROPERTY
from priority_pubsub.drivers.base import (
    REQUEUED_FROM,
    DeadLetterBrowser,
    DriverContext,
    Pinger,
    Publisher,
)
from tests.drivers.conformance import (
    DeadLetter,
    DriverConformance,
    DriverHarness,
    LateBroker,
    receive_all,
)
from tests.support.azure_servicebus import ServiceBusBroker
from tests.support.topologies.azure_servicebus import ServiceBusTopology
from tests.support.waiting import wait_until

pytestmark = pytest.mark.azure_servicebus

LEASE_S = 2.0


class Bus(ServiceBusTopology):
    """The shared Service Bus topology plus an async client, its senders and the drivers a
    test made (closed by the fixture)."""

    def __init__(self, broker: ServiceBusBroker, client: ServiceBusClient) -> None:
        super().__init__(broker)
        self.async_client = client
        self.made: list[ServiceBusDriver] = []
        self.senders: dict[str, Any] = {}

    def queue(self, suffix: str, lease_s: float = LEASE_S, max_delivery_count: int = 10,
              *, lock_s: float | None = None) -> str:
        return super().queue(suffix, lock_s or lease_s, max_delivery_count)

    async def driver(
        self, queues: tuple[str, ...], lease_s: float = LEASE_S, **options: Any
    ) -> ServiceBusDriver:
        settings = ServiceBusOptions(connection_string=self.broker.connection_string, **options)
        context = DriverContext(queues=queues, dead_letter_queue=None, lease_duration_s=lease_s)
        driver = ServiceBusDriver(settings, context)
        await driver.start()
        self.made.append(driver)
        return driver

    async def send(self, queue: str, body: bytes, attributes: dict[str, str] | None = None) -> None:
        sender = self.senders.get(queue)
        if sender is None:  # opening a link costs a CBS round trip: keep one per queue
            sender = self.senders[queue] = self.async_client.get_queue_sender(queue)
        props: dict[str | bytes, Any] = {}
        props.update((attributes or {}).items())
        await sender.send_messages(ServiceBusMessage(body, application_properties=props))

    async def dead_letters(self, queue: str) -> list[DeadLetter]:
        found: list[DeadLetter] = []
        async with self.async_client.get_queue_receiver(
            queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
        ) as receiver:
            while True:
                batch = await receiver.receive_messages(max_message_count=10, max_wait_time=0.5)
                if not batch:
                    return found
                for message in batch:
                    props = {
                        (k.decode() if isinstance(k, bytes) else k): (
                            v.decode() if isinstance(v, bytes) else str(v)
                        )
                        for k, v in (message.application_properties or {}).items()
                    }
                    found.append(
                        DeadLetter(b"".join(message.body), props, message.dead_letter_reason)
                    )
                    await receiver.complete_message(message)


@pytest.fixture
async def bus(azure_servicebus_broker: ServiceBusBroker) -> AsyncIterator[Bus]:
    async with ServiceBusClient.from_connection_string(
        azure_servicebus_broker.connection_string
    ) as client:
        found = Bus(azure_servicebus_broker, client)
        yield found
        await asyncio.gather(*(driver.close() for driver in found.made))
        await asyncio.gather(*(sender.close() for sender in found.senders.values()))
        found.close()


@pytest.fixture
async def harness(bus: Bus) -> DriverHarness:
    queues = (bus.queue("high"), bus.queue("normal"), bus.queue("low"))

    async def make_driver(lease_s: float) -> ServiceBusDriver:
        return await bus.driver(queues, lease_s)

    async def publish(queue: str, body: bytes, attributes: dict[str, str]) -> None:
        await bus.send(queue, body, attributes)

    async def dead_letters() -> list[DeadLetter]:
        return await bus.dead_letters(queues[0])

    return DriverHarness(
        queues=queues,
        dead_letter_queue=f"{queues[0]}/$DeadLetterQueue",
        make_driver=make_driver,
        publish=publish,
        dead_letters=dead_letters,
        lease_s=LEASE_S,
        settle_s=0.5,
    )


class TestServiceBusConformance(DriverConformance):
    """The shared suite, unchanged."""


# -- Service Bus specifics ------------------------------------------------------------------


async def test_retry_with_delay_schedules_a_copy_then_completes(bus: Bus) -> None:
    queue = bus.queue("delay")
    driver = await bus.driver((queue,), lease_s=10)
    await bus.send(queue, b"job", {"k": "v"})
    [first] = await receive_all(driver, queue, 1)
    await driver.retry(first, 1.5)
    counts = bus.broker.counts(queue)
    assert (counts.active, counts.locked, counts.scheduled) == (0, 0, 1)
    [second] = await receive_all(driver, queue, 1, timeout_s=8)
    assert second.id == first.id  # same message id: the app sees one CloudEvent id
    assert second.attempt == 2
    assert second.enqueued_ms == first.enqueued_ms
    assert second.attributes == {"k": "v"}  # carried count stays internal
    await driver.retry(second, 0.2)
    [third] = await receive_all(driver, queue, 1, timeout_s=8)
    assert third.attempt == 3
    await driver.ack(third)
    assert bus.broker.counts(queue).active == 0


async def test_retry_copy_goes_first_so_a_lost_lock_duplicates_not_loses(bus: Bus) -> None:
    queue = bus.queue("lost", lock_s=1.0)
    driver = await bus.driver((queue,), lease_s=1.0)
    await bus.send(queue, b"job")
    [message] = await receive_all(driver, queue, 1)
    # Simulate the broker dropping the lock between the copy and the complete.
    token = message.lease.token.message.lock_token
    entity = bus.broker.entity(queue)
    with bus.broker._lock:
        entity.locks[token].locked_until_ms = 0
    # the driver's own view still says the lock is valid, so it sends the copy first
    message.lease.token.message._expiry = None
    with pytest.raises(LeaseLost):
        await driver.retry(message, 0.3)
    await asyncio.sleep(0.5)
    got = await receive_all(driver, queue, 2, timeout_s=6)
    assert sorted(m.body for m in got) == [b"job", b"job"]  # duplicated, never lost
    for m in got:
        await driver.ack(m)


async def test_lock_renewal_keeps_a_task_three_lock_durations(bus: Bus) -> None:
    queue = bus.queue("long", lock_s=1.0)
    holder = await bus.driver((queue,), lease_s=1.0)
    other = await bus.driver((queue,), lease_s=1.0)
    await bus.send(queue, b"long")
    [message] = await receive_all(holder, queue, 1)
    started = time.monotonic()
    while time.monotonic() - started < 3.2:
        await asyncio.sleep(0.3)
        await holder.extend(message, 1.0)
        assert message.lease.deadline_ms > time.time_ns() // 1_000_000
        assert await other.receive(queue, 1, 0) == []
    await holder.ack(message)
    assert bus.broker.counts(queue).active == 0


async def test_lease_longer_than_lock_is_renewed_in_background(bus: Bus) -> None:
    queue = bus.queue("bg", lock_s=1.0)
    holder = await bus.driver((queue,), lease_s=4.0)
    other = await bus.driver((queue,), lease_s=1.0)
    await bus.send(queue, b"bg")
    [message] = await receive_all(holder, queue, 1)
    await asyncio.sleep(3.0)  # three lock durations, no explicit extend
    assert await other.receive(queue, 1, 0) == []
    await holder.ack(message)


async def test_extend_after_lock_lost_raises_lease_lost(bus: Bus) -> None:
    queue = bus.queue("gone", lock_s=0.5)
    driver = await bus.driver((queue,), lease_s=0.5)
    await bus.send(queue, b"gone")
    [message] = await receive_all(driver, queue, 1)
    await asyncio.sleep(1.0)
    with pytest.raises(LeaseLost):
        await driver.extend(message, 1.0)


async def test_abandon_counts_and_max_delivery_count_dead_letters(bus: Bus) -> None:
    queue = bus.queue("max", max_delivery_count=2)
    driver = await bus.driver((queue,), lease_s=5)
    await bus.send(queue, b"poison")
    [first] = await receive_all(driver, queue, 1)
    await driver.retry(first, 0)
    [second] = await receive_all(driver, queue, 1)
    assert second.attempt == 2
    await driver.retry(second, 0)
    assert await driver.receive(queue, 1, 0.3) == []
    [letter] = await bus.dead_letters(queue)
    assert letter.reason == "MaxDeliveryCountExceeded"


async def test_dead_letter_queue_can_be_drained_by_name(bus: Bus) -> None:
    queue = bus.queue("dlqname")
    driver = await bus.driver((queue, f"{queue}/$DeadLetterQueue"), lease_s=5)
    await bus.send(queue, b"x", {"a": "1"})
    [message] = await receive_all(driver, queue, 1)
    await driver.dead_letter(message, "fatal status 400")
    [dead] = await receive_all(driver, f"{queue}/$DeadLetterQueue", 1)
    assert dead.body == b"x"
    assert dead.attributes["DeadLetterReason"] == "fatal status 400"
    assert dead.priority == 1
    await driver.ack(dead)


async def test_publish_ping_and_attributes_roundtrip(bus: Bus) -> None:
    queue = bus.queue("pub")
    driver = await bus.driver((queue,))
    assert isinstance(driver, Publisher)
    assert isinstance(driver, Pinger)
    await driver.ping()
    message_id = await driver.publish(queue, b'{"a":1}', {"tier": "gold"}, "application/json")
    [message] = await receive_all(driver, queue, 1)
    assert message.id == message_id
    assert message.attributes == {"tier": "gold"}
    assert message.content_type == "application/json"
    assert ATTEMPTS_PROPERTY not in message.attributes
    await driver.ack(message)


async def test_topic_subscription_receive_and_held_retry(bus: Bus) -> None:
    topic = f"{bus.prefix}-topic"
    bus.broker.create_topic(topic)
    bus.broker.create_subscription(topic, "a", lock_duration_s=1.0)
    bus.broker.create_subscription(topic, "b", lock_duration_s=1.0)
    queue = f"{topic}/a"
    driver = await bus.driver((queue,), lease_s=1.0)
    await driver.publish(queue, b"fan")
    [message] = await receive_all(driver, queue, 1)
    returned = time.monotonic()
    await driver.retry(message, 2.5)  # held past two lock durations, then abandoned
    assert await driver.receive(queue, 1, 1.0) == []
    [again] = await receive_all(driver, queue, 1, timeout_s=6)
    assert time.monotonic() - returned >= 2.3
    assert again.attempt == 2
    await driver.ack(again)
    assert bus.broker.counts(f"{topic}/subscriptions/b").active == 1  # no copy reached b


async def test_close_abandons_held_retries_at_once(bus: Bus) -> None:
    topic = f"{bus.prefix}-t2"
    bus.broker.create_topic(topic)
    bus.broker.create_subscription(topic, "s", lock_duration_s=30.0)
    queue = f"{topic}/s"
    driver = await bus.driver((queue,), lease_s=30.0)
    await driver.publish(queue, b"held")
    [message] = await receive_all(driver, queue, 1)
    await driver.retry(message, 60)
    await driver.close()
    assert bus.broker.counts(f"{topic}/subscriptions/s").active == 1


async def test_unknown_queue_fails_start_and_bad_key_is_refused(
    bus: Bus, azure_servicebus_broker: ServiceBusBroker
) -> None:
    with pytest.raises(DriverError):
        await bus.driver(("no-such-queue",), retry_total=0)
    queue = bus.queue("auth")
    bad = azure_servicebus_broker.connection_string.replace(azure_servicebus_broker.key, "d3Jvbmc=")
    driver = ServiceBusDriver(
        ServiceBusOptions(connection_string=bad, retry_total=0),
        DriverContext(queues=(queue,)),
    )
    with pytest.raises(DriverError):
        await driver.start()


def test_options_need_exactly_one_credential() -> None:
    with pytest.raises(ValidationError):
        ServiceBusOptions()
    with pytest.raises(ValidationError):
        ServiceBusOptions(connection_string="x", namespace="y.servicebus.windows.net")
    options = ServiceBusOptions(connection_string="Endpoint=sb://secret")
    assert "secret" not in repr(options)


@pytest.fixture
async def late_broker() -> AsyncIterator[LateBroker]:
    """A second test broker on a port chosen now, started only by ``bring_up``."""
    broker = ServiceBusBroker()
    queue = f"late-{uuid.uuid4().hex[:8]}"

    def make_driver() -> ServiceBusDriver:
        settings = ServiceBusOptions(connection_string=broker.connection_string, retry_total=1)
        context = DriverContext(queues=(queue,), dead_letter_queue=None, lease_duration_s=LEASE_S)
        return ServiceBusDriver(settings, context)

    async def bring_up() -> None:
        broker.start()
        broker.create_queue(queue, lock_duration_s=LEASE_S)

    async def publish(body: bytes) -> None:
        async with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage(body))

    yield LateBroker(queue, make_driver, bring_up, publish)
    broker.stop()


LOCK_S = 3.0
RETRY_DELAY_S = 1.0


async def test_concurrent_extends_and_delayed_retries_on_one_handler(bus: Bus) -> None:
    """Concurrency 8 on one receiver and one (not yet opened) sender: two extends of each
    lock at once while the background renewal (lease longer than the lock, margin = the
    whole lock) renews the same locks and a receive polls for the free slots, for two lock
    durations, then eight delayed retries at once. Every lock holds (nothing is delivered
    twice) and every retry copy is scheduled: none comes before its delay. The
    azure-servicebus handlers are not safe for concurrent (re)opening: this failed before
    the driver serialised them (renew-lock errors, ``'NoneType' ... 'create_sender_link'``).

    Each extend asks for the driver's whole lease, as the sidecar's lease keeper does, so the
    background renewal holds the locks through the retries however long the first sends take
    on a loaded machine (extends of less than a lock let the locks lapse mid-retry there). How
    soon the copies come due is the clock's business, not the test's: it counts them wherever
    they are and checks only that none came early."""
    lease_s = 2 * LOCK_S
    queue = bus.queue("conc", lock_s=LOCK_S)
    driver = await bus.driver((queue,), lease_s=lease_s, renew_margin_s=LOCK_S)
    other = await bus.driver((queue,), lease_s=1.0)
    bodies = sorted(f"m{n}".encode() for n in range(8))
    for body in bodies:
        await bus.send(queue, body)
    messages = await receive_all(driver, queue, 8)
    assert sorted(m.body for m in messages) == bodies
    renewing_until = time.monotonic() + 2 * LOCK_S  # two lock durations of renewals
    while time.monotonic() < renewing_until:
        polled = asyncio.ensure_future(driver.receive(queue, 8, 0.5))  # the idle slots' poll
        await asyncio.gather(*(driver.extend(m, lease_s) for m in messages for _ in range(2)))
        assert await polled == []
        assert await other.receive(queue, 8, 0.2) == []  # no lock lapsed: nothing redelivered
    retried = time.monotonic()
    await asyncio.gather(*(driver.retry(m, RETRY_DELAY_S) for m in messages))
    counts = bus.broker.counts(queue)  # every original completed, its copy made
    assert counts.active + counts.locked + counts.scheduled == 8, counts
    if time.monotonic() - retried < RETRY_DELAY_S:  # (on a loaded machine they may be due)
        assert (counts.active, counts.locked, counts.scheduled) == (0, 0, 8)
    again = await receive_all(driver, queue, 1, timeout_s=10 + RETRY_DELAY_S)
    assert time.monotonic() - retried >= RETRY_DELAY_S  # the first came no earlier than due
    again += await receive_all(driver, queue, 7)
    assert sorted(m.body for m in again) == bodies  # each delivered once more, no duplicate
    assert {m.attempt for m in again} == {2}
    await asyncio.gather(*(driver.ack(m) for m in again))
    assert await other.receive(queue, 8, 1.0) == []
    counts = bus.broker.counts(queue)
    assert (counts.active, counts.locked, counts.scheduled) == (0, 0, 0)


async def test_browse_peeks_each_queues_own_dead_letter_queue(bus: Bus) -> None:
    """The monitor lists Service Bus's dead letters by peek: from the front every time,
    nothing locked, every reason (the driver's and Service Bus's own) and the source queue."""
    high, low = bus.queue("bhigh", max_delivery_count=1), bus.queue("blow")
    driver = await bus.driver((high, low), lease_s=5)
    assert isinstance(driver, DeadLetterBrowser)
    assert [driver.dead_letter_queue_of(q) for q in (high, low)] == [
        f"{high}/$DeadLetterQueue", f"{low}/$DeadLetterQueue"]
    for n in range(3):
        await bus.send(low, f"poison-{n}".encode())
    for message in await receive_all(driver, low, 3):
        await driver.dead_letter(message, "app returned fatal status 400")
    await bus.send(high, b"flaky")
    [flaky] = await receive_all(driver, high, 1)
    await driver.retry(flaky, 0)  # max_delivery_count 1: Service Bus dead-letters it itself
    dead_low = driver.dead_letter_queue_of(low)
    listed = await driver.browse(dead_low, 10)
    assert await driver.browse(dead_low, 10) == listed  # from the front again, nothing taken
    assert [(d.source, d.reason) for d in listed] == [
        (low, "app returned fatal status 400")] * 3
    assert len({d.id for d in listed}) == 3
    assert [d.id for d in await driver.browse(dead_low, 2)] == [d.id for d in listed[:2]]
    [native] = await driver.browse(driver.dead_letter_queue_of(high), 10)
    assert (native.source, native.reason) == (high, "MaxDeliveryCountExceeded")
    assert bus.broker.counts(f"{low}/$deadletterqueue").locked == 0
    taken = await receive_all(driver, dead_low, 3)  # still there for `requeue`
    assert sorted(m.id for m in taken) == sorted(d.id for d in listed)
    for message in taken:
        await driver.ack(message)
    assert await driver.browse(dead_low, 10) == []


async def test_chosen_dead_letters_are_taken_by_id_and_the_others_left(bus: Bus) -> None:
    """The monitor's requeue and delete on Service Bus: ``receive_ids`` receives from the
    dead-letter queue's front on a receiver of its own, which hands the unchosen ones back
    (uncounted) when it closes, once the chosen ones are settled."""
    queue = bus.queue("chosen", lease_s=5)
    driver = await bus.driver((queue,), lease_s=5)
    dead = driver.dead_letter_queue_of(queue)
    dead_entity = f"{queue}/$deadletterqueue"
    for n in range(3):
        await bus.send(queue, f"poison-{n}".encode(), {"n": str(n)})
    for message in await receive_all(driver, queue, 3):
        await driver.dead_letter(message, "bad input")
    ids = [letter.id for letter in await driver.browse(dead, 10)]
    taken = await driver.receive_ids(dead, [ids[1], "no-such-id", ids[1]])
    assert [m.body for m in taken] == [b"poison-1"]
    await requeue_one(driver, taken[0], dead, queue)
    # the broker sees the receiver's detach a moment later
    await asyncio.to_thread(wait_until, lambda: bus.broker.counts(dead_entity).locked == 0, 5)
    counts = bus.broker.counts(dead_entity)
    assert (counts.active, counts.locked) == (2, 0)  # the others are back, not held
    [back] = await receive_all(driver, queue, 1)
    assert (back.body, back.attributes[REQUEUED_FROM]) == (b"poison-1", dead)
    await driver.ack(back)
    [doomed] = await driver.receive_ids(dead, [ids[2]])
    await driver.release(doomed)  # handed back: still listed
    assert [letter.id for letter in await driver.browse(dead, 10)] == [ids[0], ids[2]]
    [doomed] = await driver.receive_ids(dead, [ids[2]])
    await driver.ack(doomed)  # delete
    assert [letter.id for letter in await driver.browse(dead, 10)] == [ids[0]]
    assert await driver.receive_ids(dead, [ids[1], ids[2]]) == []
    assert driver._scans == set()  # every receiver of its own closed
