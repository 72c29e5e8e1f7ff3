"""The SQS driver against moto in server mode (real HTTP): conformance plus SQS specifics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from priority_pubsub.core.errors import (
    DriverError,
    DriverUnavailable,
    LeaseLost,
    MessageTooLarge,
    TransformError,
)
from priority_pubsub.core.message import Message
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.sqs.driver import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    SqsDriver,
    dapr_cloudevent,
    publish_via_sns,
)
from priority_pubsub.drivers.sqs.options import SqsOptions
from priority_pubsub.transforms.base import Payload
from priority_pubsub.transforms.sns_envelope import SnsEnvelope
from tests.drivers.conformance import (
    DeadLetter,
    DriverConformance,
    DriverHarness,
    LateBroker,
    receive_all,
)
from tests.support.moto_server import MotoServer, free_port, running_moto_server

if TYPE_CHECKING:
    from types_boto3_sqs import SQSClient
from tests.support.topologies.sqs import SqsTopology

pytestmark = pytest.mark.sqs

LEASE_S = 2.0


class Aws(SqsTopology):
    """The shared SQS topology plus the drivers a test made (closed by the fixture)."""

    def __init__(self, server: MotoServer) -> None:
        super().__init__(server)
        self.made: list[SqsDriver] = []

    async def driver(
        self, queues: tuple[str, ...], dead: str | None, lease_s: float = LEASE_S, **options: Any
    ) -> SqsDriver:
        settings = SqsOptions(endpoint_url=self.server.endpoint_url, **options)
        context = DriverContext(queues=queues, dead_letter_queue=dead, lease_duration_s=lease_s)
        driver = SqsDriver(settings, context)
        await driver.start()
        self.made.append(driver)
        return driver

    async def send(self, queue: str, body: str, attributes: dict[str, str] | None = None) -> None:
        await asyncio.to_thread(self.publish, queue, body.encode(), attributes)


@pytest.fixture
async def aws(moto_server: MotoServer) -> AsyncIterator[Aws]:
    found = Aws(moto_server)
    yield found
    for driver in found.made:
        await driver.close()
    found.close()


@pytest.fixture
async def harness(aws: Aws) -> DriverHarness:
    queues = (aws.queue("high"), aws.queue("normal"), aws.queue("low"))

    async def make_driver(lease_s: float) -> SqsDriver:
        return await aws.driver(queues, aws.dead, lease_s)

    async def publish(queue: str, body: bytes, attributes: dict[str, str]) -> None:
        await aws.send(queue, body.decode(), attributes)

    async def dead_letters() -> list[DeadLetter]:
        return await asyncio.to_thread(aws.dead_letters)

    return DriverHarness(
        queues=queues, dead_letter_queue=aws.dead, make_driver=make_driver, publish=publish,
        dead_letters=dead_letters, lease_s=LEASE_S, settle_s=0.5,
    )


class TestSqsConformance(DriverConformance):
    pass


# -- SNS topology (Dapr's pubsub.aws.snssqs) --------------------------------------------------

SAMPLE_EVENT = dapr_cloudevent({"job": "render-report", "customer": 42}, topic="tasks-high")


async def test_sns_envelope_yields_the_published_cloudevent(aws: Aws) -> None:
    queue = aws.queue("high")
    topic_arn = aws.subscribe(queue, raw=False)
    driver = await aws.driver((queue,), None)
    await asyncio.to_thread(
        publish_via_sns, topic_arn, SAMPLE_EVENT, {"customer-tier": "gold"},
        endpoint_url=aws.server.endpoint_url,
    )
    [message] = await receive_all(driver, queue, 1)
    envelope = json.loads(message.body)
    assert envelope["Type"] == "Notification"
    assert envelope["TopicArn"] == topic_arn
    payload = SnsEnvelope()(Payload(message.body, message.attributes, message.content_type))
    assert payload.body == SAMPLE_EVENT  # byte for byte what the frontend published
    assert payload.attributes["customer-tier"] == "gold"
    assert payload.content_type == "application/json"
    await driver.ack(message)


async def test_raw_message_delivery_passes_through(aws: Aws) -> None:
    queue = aws.queue("high")
    topic_arn = aws.subscribe(queue, raw=True)
    driver = await aws.driver((queue,), None)
    await asyncio.to_thread(
        publish_via_sns, topic_arn, SAMPLE_EVENT, {"customer-tier": "gold"},
        endpoint_url=aws.server.endpoint_url,
    )
    [message] = await receive_all(driver, queue, 1)
    assert message.body == SAMPLE_EVENT
    assert message.attributes == {"customer-tier": "gold"}  # SNS attributes become SQS ones
    payload = SnsEnvelope()(Payload(message.body, message.attributes))
    assert payload.body == SAMPLE_EVENT
    await driver.ack(message)


@pytest.mark.parametrize(
    ("body", "reason"),
    [("plain text", "not JSON"), ('{"hello": "world"}', "neither an SNS Notification")],
)
async def test_non_sns_body_is_a_transform_error_and_dead_letters_with_reason(
    aws: Aws, body: str, reason: str
) -> None:
    queue, dead = aws.queue("high"), aws.queue("dead")
    driver = await aws.driver((queue,), dead)
    await aws.send(queue, body, {"origin": "legacy"})
    [message] = await receive_all(driver, queue, 1)
    with pytest.raises(TransformError) as caught:
        SnsEnvelope()(Payload(message.body, message.attributes))
    await driver.dead_letter(message, f"transform: {caught.value}")
    answer = aws.sqs.receive_message(
        QueueUrl=aws.url(dead), WaitTimeSeconds=1, MessageAttributeNames=["All"]
    )
    [letter] = answer["Messages"]
    assert letter["Body"] == body
    attributes = {k: v["StringValue"] for k, v in letter["MessageAttributes"].items()}
    assert attributes["origin"] == "legacy"
    assert attributes[DEAD_LETTER_SOURCE] == queue
    assert reason in attributes[DEAD_LETTER_REASON]
    assert await driver.receive(queue, 1, 0) == []


# -- leases, limits, errors ---------------------------------------------------------------------


async def test_extension_is_clamped_to_twelve_hours_then_refused(aws: Aws) -> None:
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=LEASE_S)
    await aws.send(queue, "marathon")
    [message] = await receive_all(driver, queue, 1)
    twelve_h_ms = 43_200_000
    message.received_ms -= twelve_h_ms - 10_000  # pretend it was received 11 h 59 m 50 s ago
    before_ms = int(time.time() * 1000)
    await driver.extend(message, 3600)
    assert message.lease.deadline_ms - before_ms <= 10_000  # clamped to what SQS allows
    message.received_ms -= 10_000
    with pytest.raises(LeaseLost, match="12 h"):
        await driver.extend(message, 60)
    await driver.ack(message)


async def test_settle_after_lapse_is_refused_without_calling_sqs(aws: Aws) -> None:
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=1)
    await aws.send(queue, "late")
    [message] = await receive_all(driver, queue, 1)
    await asyncio.sleep(2.1)  # past the lease and the 1 s that extend still tries
    calls = sum(driver.calls.values())
    for settle in (driver.ack(message), driver.retry(message, 0), driver.extend(message, 5)):
        with pytest.raises(LeaseLost, match="lapsed"):
            await settle
    assert sum(driver.calls.values()) == calls


async def test_depth_publish_and_content_type(aws: Aws) -> None:
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=30)
    for n in range(3):
        await driver.publish(queue, f'{{"n": {n}}}'.encode(), {"n": str(n)}, "application/json")
    [first] = await receive_all(driver, queue, 1)
    assert first.content_type == "application/json"
    assert "content-type" not in first.attributes
    depth = await driver.depth(queue)
    assert (depth.visible, depth.in_flight, depth.delayed) == (2, 1, 0)
    with pytest.raises(MessageTooLarge):
        await driver.publish(queue, b"x" * 300_000)
    with pytest.raises(DriverError, match="text"):
        await driver.publish(queue, b"\xff\xfe")
    await driver.ping()


async def test_depth_of_an_idle_queue_comes_from_the_long_polls_not_a_call(aws: Aws) -> None:
    """While the sidecar's own long poll waits on an empty queue, depth needs no
    GetQueueAttributes (an idle queue costs its long polls only); once a poll returns
    messages, depth asks SQS again and sees the backlog."""
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=30, wait_time_s=5)
    assert await driver.receive(queue, 1, 1) == []  # a 1 s long poll, empty
    waiting = asyncio.create_task(driver.receive(queue, 1, 5))  # the next one, in flight
    await asyncio.sleep(0.2)
    before = Counter(driver.calls)
    assert (await driver.depth(queue)).visible == 0
    assert Counter(driver.calls) == before  # answered without a call
    assert driver.depths_from_polls == 1
    await aws.send(queue, "one")
    await aws.send(queue, "two")
    [taken] = await asyncio.wait_for(waiting, 10)
    depth = await driver.depth(queue)
    assert (depth.visible, depth.in_flight) == (1, 1)
    assert driver.calls["GetQueueAttributes"] - before["GetQueueAttributes"] == 1
    await driver.ack(taken)


async def test_depth_right_after_start_comes_from_a_long_poll_waiting_a_second(aws: Aws) -> None:
    """Before any long poll has answered (the first 20 s of an idle sidecar), one that has
    waited a second unanswered already says the queue is empty: the depth refresh makes no
    call. A poll younger than that proves nothing yet."""
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=30, wait_time_s=5)
    waiting = asyncio.create_task(driver.receive(queue, 1, 5))
    await asyncio.sleep(0.1)
    before = Counter(driver.calls)
    await driver.depth(queue)  # too young: asks SQS
    assert driver.calls["GetQueueAttributes"] - before["GetQueueAttributes"] == 1
    await asyncio.sleep(1.2)
    before = Counter(driver.calls)
    assert (await driver.depth(queue)).visible == 0
    assert Counter(driver.calls) == before
    assert driver.depths_from_polls == 1
    await aws.send(queue, "one")
    [taken] = await asyncio.wait_for(waiting, 10)
    await driver.ack(taken)


async def test_missing_queue_is_a_terminal_error(aws: Aws) -> None:
    with pytest.raises(DriverError, match="does not exist") as caught:
        await aws.driver((f"{aws.prefix}-never-created",), None)
    assert not caught.value.retriable


async def test_unreachable_endpoint_is_unavailable() -> None:
    options = SqsOptions(endpoint_url=f"http://127.0.0.1:{free_port()}", region="us-east-1")
    driver = SqsDriver(options, DriverContext(queues=("q",)))
    try:
        with pytest.raises(DriverUnavailable):
            await driver.start()
    finally:
        await driver.close()


# -- long polls under the dispatcher's pattern -----------------------------------------------


async def test_adopted_poll_returns_surplus_and_sqs_counts_the_release(aws: Aws) -> None:
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=30)
    cancelled = asyncio.create_task(driver.receive(queue, 10, 5))
    await asyncio.sleep(0.3)
    cancelled.cancel()
    adopting = asyncio.create_task(driver.receive(queue, 1, 5))  # the parked poll asked for 10
    await asyncio.sleep(0.3)
    # delayed alike, the three become visible together and the running poll gets them all
    entries: Any = [{"Id": str(n), "MessageBody": f"m{n}", "DelaySeconds": 1} for n in range(3)]
    aws.sqs.send_message_batch(QueueUrl=aws.url(queue), Entries=entries)
    got = await adopting
    assert driver.calls["adopted"] == 1
    assert driver.calls["ReceiveMessage"] == 1
    assert len(got) == 1
    assert driver.calls["released"] == 2
    rest = await receive_all(driver, queue, 2, timeout_s=5)
    # what a poll catches beyond what is asked goes back at once; SQS counted that receive
    assert sorted(m.attempt for m in rest) == [2, 2]
    for message in got + rest:
        await driver.ack(message)


async def race(
    driver: SqsDriver, queues: tuple[str, ...], free: int, wait_s: float
) -> list[Message]:
    """The lead's dispatcher in miniature: sweep, then long-poll every queue at once."""
    for queue in queues:
        if got := await driver.receive(queue, free, 0):
            return got
    polls = [asyncio.create_task(driver.receive(q, free, wait_s)) for q in queues]
    try:
        for next_done in asyncio.as_completed(polls):
            if got := await next_done:
                return got
        return []
    finally:
        for poll in polls:
            poll.cancel()


async def test_high_message_does_not_wait_behind_a_low_long_poll(aws: Aws) -> None:
    high, low = aws.queue("high"), aws.queue("low")
    driver = await aws.driver((high, low), None, lease_s=30)
    latencies = []
    for _ in range(3):
        waiting = asyncio.create_task(race(driver, (high, low), 1, 10))
        await asyncio.sleep(0.5)
        sent = time.monotonic()
        await aws.send(high, "urgent")
        [message] = await asyncio.wait_for(waiting, 10)
        latencies.append(time.monotonic() - sent)
        assert message.queue == high
        assert message.attempt == 1
        await driver.ack(message)
    assert max(latencies) < 1.5, latencies
    # every race after the first adopts the low poll left parked by the previous one
    assert driver.calls["adopted"] >= 2
    assert driver.calls["released"] == 0


async def test_idle_cost_and_cost_of_a_wake_up(aws: Aws) -> None:
    """Measures the API calls of the dispatcher's pattern (numbers printed with -s)."""
    queues = (aws.queue("high"), aws.queue("normal"), aws.queue("low"))
    driver = await aws.driver(queues, None, lease_s=30, wait_time_s=2)
    driver.calls.clear()
    started = time.monotonic()
    assert await race(driver, queues, 1, 2) == []  # one idle cycle: 3 sweeps + 3 long polls
    idle = dict(driver.calls)
    assert idle == {"ReceiveMessage": 6}
    assert time.monotonic() - started >= 1.9
    driver.calls.clear()
    waiting = asyncio.create_task(race(driver, queues, 1, 2))
    await asyncio.sleep(0.5)
    await aws.send(queues[2], "low work")
    [message] = await asyncio.wait_for(waiting, 5)
    await driver.ack(message)
    await asyncio.sleep(2)  # the parked high/normal polls run out
    wake = dict(driver.calls)
    print(f"\nSQS calls, idle cycle with 3 queues: {idle}; wake-up on the lowest: {wake}")
    assert wake["ReceiveMessage"] == 6
    assert wake.get("released", 0) == 0


async def test_close_releases_what_a_running_poll_catches(aws: Aws) -> None:
    queue = aws.queue("high")
    driver = await aws.driver((queue,), None, lease_s=60, close_wait_s=5)
    waiting = asyncio.create_task(driver.receive(queue, 1, 3))
    await asyncio.sleep(0.3)
    waiting.cancel()
    closing = asyncio.create_task(driver.close())
    await asyncio.sleep(0.3)
    await aws.send(queue, "caught while closing")
    await closing
    other = await aws.driver((queue,), None, lease_s=60)
    [message] = await receive_all(other, queue, 1, timeout_s=5)  # not hidden for 60 s
    assert message.attempt == 2
    await other.ack(message)



@pytest.fixture
def late_broker(moto_server: MotoServer) -> Iterator[LateBroker]:
    """A second moto server on a port chosen now, started only by ``bring_up`` (the session
    server supplies the fake credentials in the environment)."""
    port = free_port()
    endpoint_url = f"http://127.0.0.1:{port}"
    queue = f"late-{uuid.uuid4().hex[:8]}"
    stack = contextlib.ExitStack()

    def make_driver() -> SqsDriver:
        context = DriverContext(queues=(queue,), dead_letter_queue=None, lease_duration_s=LEASE_S)
        return SqsDriver(SqsOptions(endpoint_url=endpoint_url, connect_timeout_s=1), context)

    def sqs_client() -> SQSClient:
        return boto3.session.Session().client("sqs", endpoint_url=endpoint_url)

    async def bring_up() -> None:
        await asyncio.to_thread(stack.enter_context, running_moto_server(port=port))
        sqs_client().create_queue(QueueName=queue)

    async def publish(body: bytes) -> None:
        client = sqs_client()
        url = client.get_queue_url(QueueName=queue)["QueueUrl"]
        await asyncio.to_thread(client.send_message, QueueUrl=url, MessageBody=body.decode())

    with stack:
        yield LateBroker(queue, make_driver, bring_up, publish)


@pytest.mark.parametrize(
    ("settle", "single", "batch"),
    [
        ("ack", "DeleteMessage", "DeleteMessageBatch"),
        ("retry", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch"),
    ],
)
async def test_a_batch_with_one_stale_receipt_fails_that_one_only(
    aws: Aws, settle: str, single: str, batch: str
) -> None:
    """Settles arriving together: the first goes alone at once, the rest in one batch call;
    SQS refuses one entry (a receipt handle it does not know for this queue), and only that
    message gets LeaseLost: the others are settled, none twice."""
    queue, other = aws.queue("high"), aws.queue("other")
    driver = await aws.driver((queue, other), None, lease_s=30)
    for n in range(4):
        await aws.send(queue, f"m{n}")
    await aws.send(other, "elsewhere")
    messages = await receive_all(driver, queue, 4)
    [foreign] = await receive_all(driver, other, 1)
    assert len(messages) == 4
    stale = messages[2]
    stale.lease.token = dataclasses.replace(stale.lease.token, handle=foreign.lease.token.handle)
    before = Counter(driver.calls)

    async def settle_one(message: Message) -> None:
        if settle == "ack":
            await driver.ack(message)
        else:
            await driver.retry(message, 30)  # back after 30 s: not visible during the test

    results = await asyncio.gather(*(settle_one(m) for m in messages), return_exceptions=True)

    assert [type(r).__name__ for r in results] == ["NoneType", "NoneType", "LeaseLost", "NoneType"]
    assert Counter(driver.calls) - before == Counter({single: 1, batch: 1})
    depth = await driver.depth(queue)
    # ack: three deleted, the stale one still in flight; retry: all four in flight, none lost
    assert (depth.visible, depth.in_flight) == ((0, 1) if settle == "ack" else (0, 4))
    assert (await driver.depth(other)).in_flight == 1  # the foreign handle's owner: untouched
