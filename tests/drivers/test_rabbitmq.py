"""The rabbitmq driver against the machine's RabbitMQ (unique names) and, where the broker
must be configured or killed, a private ``rabbitmq-server``: conformance plus specifics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from priority_pubsub.core.errors import ConfigError, DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DepthReporter,
    DriverContext,
    Pinger,
    Publisher,
)
from priority_pubsub.drivers.rabbitmq.driver import RabbitMQDriver
from priority_pubsub.drivers.rabbitmq.options import RabbitOptions
from priority_pubsub.drivers.rabbitmq.wire import ATTEMPT_HEADER
from tests.drivers.conformance import (
    DeadLetter,
    DeadLetterBrowsing,
    DriverConformance,
    DriverHarness,
    LateBroker,
    receive_all,
)
from tests.support.rabbitmq_admin import RabbitAdmin
from tests.support.rabbitmq_server import PrivateRabbit
from tests.support.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.rabbitmq


@dataclass
class Topology:
    """Fresh queue names for one test (queues[0] is the highest priority) and a dead-letter
    queue; every driver made here is closed and every queue deleted afterwards."""

    admin: RabbitAdmin
    queues: tuple[str, ...]
    dead: str
    made: list[RabbitMQDriver] = field(default_factory=list)

    async def driver(self, lease_s: float = 30, queues: tuple[str, ...] | None = None,
                     **options: Any) -> RabbitMQDriver:
        context = DriverContext(queues=queues or self.queues, dead_letter_queue=self.dead,
                                lease_duration_s=lease_s)
        driver = RabbitMQDriver(RabbitOptions(url=self.admin.url, **options), context)
        await driver.start()
        self.made.append(driver)
        return driver

    async def publish(self, queue: str, body: bytes, attributes: dict[str, str]) -> None:
        await self.admin.publish(queue, body, dict(attributes))


async def make_topology(url: str, count: int = 3) -> Topology:
    admin = RabbitAdmin(url)
    queues = tuple(admin.name(f"q{i}") for i in range(count))
    return Topology(admin, queues, admin.name("dead"))


@pytest.fixture
async def topology(rabbitmq_url: str) -> AsyncIterator[Topology]:
    topo = await make_topology(rabbitmq_url)
    yield topo
    for driver in topo.made:
        await driver.close()
    await topo.admin.close()


@pytest.fixture
async def late_broker(rabbitmq_url: str) -> AsyncIterator[LateBroker]:
    """The shared server behind a TCP proxy that refuses every connection until ``bring_up``
    (the machine's RabbitMQ is never stopped)."""
    admin = RabbitAdmin(rabbitmq_url)
    queue = admin.name("late")
    with tcp_proxy("127.0.0.1", 5672) as proxy:
        proxy.cut()
        url = rabbitmq_url.replace("127.0.0.1:5672", f"127.0.0.1:{proxy.port}")

        def make_driver() -> RabbitMQDriver:
            context = DriverContext(queues=(queue,), lease_duration_s=30)
            return RabbitMQDriver(RabbitOptions(url=url, connect_timeout_s=1), context)

        async def bring_up() -> None:
            proxy.restore()

        async def publish(body: bytes) -> None:
            await admin.publish(queue, body)

        yield LateBroker(queue, make_driver, bring_up, publish)
    await admin.close()


@pytest.fixture
async def harness(topology: Topology) -> DriverHarness:
    await topology.driver()  # declares the queues before the suite publishes to them

    async def dead_letters() -> list[DeadLetter]:
        got = await topology.admin.drain(topology.dead, wait_s=2)
        return [DeadLetter(g.body, {k: str(v) for k, v in g.headers.items()},
                           _text(g.headers.get(DEAD_LETTER_REASON))) for g in got]

    return DriverHarness(
        queues=topology.queues, dead_letter_queue=topology.dead,
        make_driver=topology.driver, publish=topology.publish, dead_letters=dead_letters,
        lease_s=1.5, settle_s=0.3,
    )


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode()
    return None if value is None else str(value)


class TestRabbitConformance(DriverConformance, DeadLetterBrowsing):
    pass


# -- driver specifics ----------------------------------------------------------------------


async def test_headers_properties_and_enqueue_time(topology: Topology) -> None:
    driver = await topology.driver()
    event = json.dumps({"specversion": "1.0", "id": "e-1", "source": "dapr", "type": "t",
                        "data": {"n": 1}}).encode()
    await topology.admin.publish(topology.queues[0], event, {"tier": "gold", "n": 7},
                                 content_type="text/plain", correlation_id="c-9")
    [message] = await receive_all(driver, topology.queues[0], 1)
    assert message.body == event
    # aiormq gives every publish a message id; it is the message's id and, as Dapr hands
    # AMQP properties to the app, an attribute too
    assert message.attributes == {"tier": "gold", "n": "7", "correlationid": "c-9",
                                  "contenttype": "text/plain", "messageid": message.id}
    assert message.content_type == "text/plain"
    assert message.defect is None
    await driver.ack(message)


async def test_publish_then_receive_keeps_id_and_attempt_header_hidden(
    topology: Topology,
) -> None:
    driver = await topology.driver()
    assert isinstance(driver, Publisher)
    sent = await driver.publish(topology.queues[2], b"{}", {"a": "1"}, "application/json")
    [message] = await receive_all(driver, topology.queues[2], 1)
    assert (message.id, message.priority, message.content_type) == (sent, 2, "application/json")
    await driver.retry(message, 0)
    [again] = await receive_all(driver, topology.queues[2], 1)
    assert again.id == sent
    assert again.attempt == 2
    assert again.attributes == {"a": "1", "messageid": sent, "contenttype": "application/json"}
    assert again.enqueued_ms == message.enqueued_ms  # the original publish time survives
    await driver.ack(again)


async def test_release_does_not_count_an_attempt(topology: Topology) -> None:
    driver = await topology.driver()
    await topology.publish(topology.queues[0], b"surplus", {})
    [message] = await receive_all(driver, topology.queues[0], 1)
    await driver.release(message)
    [again] = await receive_all(driver, topology.queues[0], 1)
    assert again.attempt == 1
    await driver.ack(again)


async def test_malformed_headers_become_a_defect_not_an_error(topology: Topology) -> None:
    driver = await topology.driver()
    queue = topology.queues[0]
    await topology.admin.publish(queue, b"a", {ATTEMPT_HEADER: "banana"})
    await topology.admin.publish(queue, b"b", {"blob": bytearray(b"\xff\xfe")})
    await topology.admin.publish(queue, b"c", {"nested": {"x": 1}})
    got = await receive_all(driver, queue, 3)
    defects = {m.body: m.defect for m in got}
    assert "not an integer" in (defects[b"a"] or "")
    assert "'blob' is not UTF-8" in (defects[b"b"] or "")
    assert "'nested'" in (defects[b"c"] or "")
    assert all(m.attempt == 1 for m in got)
    for message in got:
        await driver.dead_letter(message, f"malformed message: {message.defect}")
    letters = await topology.admin.drain(topology.dead, wait_s=2)
    assert sorted(g.body for g in letters) == [b"a", b"b", b"c"]


async def test_dead_letter_headers_and_requeue_path(topology: Topology) -> None:
    driver = await topology.driver()
    await topology.publish(topology.queues[1], b"bad", {"origin": "t"})
    [message] = await receive_all(driver, topology.queues[1], 1)
    await driver.dead_letter(message, "app said 422")
    # the dead-letter queue is readable through the driver (``requeue --from``)
    [letter] = await receive_all(driver, topology.dead, 1)
    assert letter.body == b"bad"
    assert letter.attributes["origin"] == "t"
    assert letter.attributes[DEAD_LETTER_REASON] == "app said 422"
    assert letter.attributes[DEAD_LETTER_SOURCE] == topology.queues[1]
    await driver.ack(letter)


async def test_quorum_queue_counts_returns_with_delivery_count(topology: Topology) -> None:
    driver = await topology.driver(lease_s=1, queue_type="quorum")
    queue = topology.queues[0]
    await topology.publish(queue, b"q", {})
    attempts = []
    for n in range(3):
        [message] = await receive_all(driver, queue, 1)
        attempts.append(message.attempt)
        if n == 0:
            await driver.retry(message, 0)  # a copy with the attempt header
        # else: let the 1 s lease lapse (nack: quorum counts it in x-delivery-count)
    assert attempts == [1, 2, 3]
    await driver.ack(message)


async def test_native_priority_mode_serves_highest_first(topology: Topology) -> None:
    driver = await topology.driver(native_priority=True)
    high, normal, low = topology.queues
    for name in (low, normal, low, high, normal, high):
        await driver.publish(name, name.encode())
    got = await receive_all(driver, high, 6)
    assert [m.queue for m in got] == [high, high, normal, normal, low, low]
    assert [m.priority for m in got] == [0, 0, 1, 1, 2, 2]
    assert await driver.receive(low, 5, 0) == []  # read through the first name only
    for message in got:
        await driver.ack(message)


async def test_dapr_layout_reads_what_a_dapr_publisher_sends(topology: Topology) -> None:
    topic = topology.queues[0]
    driver = await topology.driver(layout="dapr", consumer_id="app1", queues=(topic,))
    queue = f"app1-{topic}"
    topology.admin.made.append(queue)
    topology.admin.exchanges.append(topic)
    # as daprd publishes: to the topic's fanout exchange, text/plain, no message id
    await topology.admin.publish("", b'{"specversion":"1.0"}', {"k": "v"}, exchange=topic,
                                 content_type="text/plain")
    [message] = await receive_all(driver, topic, 1)
    assert (message.queue, message.attributes["k"]) == (topic, "v")
    await driver.retry(message, 0)  # back to app1-<topic> only, not through the exchange
    [again] = await receive_all(driver, topic, 1)
    assert again.attempt == 2
    await driver.ack(again)
    assert await topology.admin.count(queue) == 0


async def test_auto_delete_queue_is_refused_with_a_clear_error(topology: Topology) -> None:
    queue = topology.queues[0]
    connection = await topology.admin.connection()
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True, auto_delete=True)
    await channel.close()
    context = DriverContext(queues=(queue,), lease_duration_s=30)
    driver = RabbitMQDriver(RabbitOptions(url=topology.admin.url), context)
    with pytest.raises(DriverError, match="deletedWhenUnused") as caught:
        await driver.start()
    assert not caught.value.retriable
    await driver.close()


async def test_depth_ping_and_unknown_queue(topology: Topology) -> None:
    driver = await topology.driver()
    assert isinstance(driver, Pinger)
    assert isinstance(driver, DepthReporter)
    await driver.ping()
    for n in range(3):
        await topology.publish(topology.queues[0], f"{n}".encode(), {})
    depth = await driver.depth(topology.queues[0])
    assert (depth.visible, depth.in_flight) == (3, None)
    assert (await driver.depth(topology.dead)).visible == 0
    with pytest.raises(DriverError, match="not a configured queue"):
        await driver.receive("nope", 1, 0)


async def test_unreachable_broker_is_unavailable() -> None:
    context = DriverContext(queues=("q",))
    driver = RabbitMQDriver(
        RabbitOptions(url="amqp://guest:guest@127.0.0.1:9/", connect_timeout_s=2), context)
    with pytest.raises(DriverUnavailable):
        await driver.start()
    await driver.close()


def test_options_validation() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="consumer_id"):
        RabbitOptions.model_validate({"layout": "dapr"})
    with pytest.raises(ValidationError):
        RabbitOptions.model_validate({"uri": "amqp://x"})
    with pytest.raises(ConfigError, match=r"lease\.duration_s"):
        RabbitMQDriver(RabbitOptions(consumer_timeout_s=60),
                       DriverContext(queues=("q",), lease_duration_s=120))
    shown = RabbitOptions(url="amqp://u:s3cret@h:5672/").model_dump(mode="json")
    assert "s3cret" not in json.dumps(shown)


# -- consumer_timeout and a dropped broker: a private server --------------------------------


async def test_a_task_longer_than_consumer_timeout_keeps_its_delivery(
    short_timeout_rabbit: PrivateRabbit,
) -> None:
    """The private server closes channels whose deliveries are unacked for 3 s. A delivery
    held 8 s while the lease keeper's extends come every 0.5 s is renewed (re-published to
    this instance's hold queue, acked, taken back) before that, and acks once."""
    topo = await make_topology(short_timeout_rabbit.url, count=1)
    try:
        holder = await topo.driver(lease_s=1.5, consumer_timeout_s=3)
        other = await topo.driver(lease_s=1.5, consumer_timeout_s=3)
        await topo.publish(topo.queues[0], b"long", {"k": "v"})
        [message] = await receive_all(holder, topo.queues[0], 1)
        for _ in range(16):
            await asyncio.sleep(0.5)
            await holder.extend(message, 1.5)
            assert await other.receive(topo.queues[0], 1, 0) == []
        await holder.ack(message)
        await asyncio.sleep(2)
        assert await other.receive(topo.queues[0], 1, 0.5) == []
        assert await topo.admin.count(topo.queues[0]) == 0
    finally:
        for driver in topo.made:
            await driver.close()
        await topo.admin.close()


async def test_without_renewal_consumer_timeout_returns_the_delivery(
    short_timeout_rabbit: PrivateRabbit,
) -> None:
    """The control: a driver told the timeout is an hour never renews, and the server closes
    its channel after 3 s; the settle is refused and the message is delivered again (after
    one lease: RabbitMQ marks it redelivered, and its holder may still be working on it)."""
    topo = await make_topology(short_timeout_rabbit.url, count=1)
    try:
        naive = await topo.driver(lease_s=30, consumer_timeout_s=3600)
        other = await topo.driver(lease_s=3)
        await topo.publish(topo.queues[0], b"long", {})
        [message] = await receive_all(naive, topo.queues[0], 1)
        [again] = await receive_all(other, topo.queues[0], 1, timeout_s=15)
        assert again.attempt == 2
        with pytest.raises(LeaseLost, match="lease lost"):
            await naive.ack(message)
        await other.ack(again)
    finally:
        for driver in topo.made:
            await driver.close()
        await topo.admin.close()


async def test_a_browsed_dead_letter_is_received_at_once_by_requeue(topology: Topology) -> None:
    """``browse`` (the monitor) leaves dead letters flagged redelivered; ``requeue``'s receive
    from the dead-letter queue takes them at once: no app runs a dead letter, so none is held
    back one lease as a redelivered message of a consumed queue is."""
    driver = await topology.driver(lease_s=30)
    await topology.publish(topology.queues[0], b"poison", {})
    [message] = await receive_all(driver, topology.queues[0], 1)
    await driver.dead_letter(message, "bad input")
    [letter] = await driver.browse(topology.dead, 10)
    started = time.monotonic()
    [taken] = await driver.receive(topology.dead, 10, 0)
    assert time.monotonic() - started < 5
    assert (taken.id, taken.body) == (letter.id, b"poison")
    await driver.ack(taken)
    assert await driver.browse(topology.dead, 10) == []
