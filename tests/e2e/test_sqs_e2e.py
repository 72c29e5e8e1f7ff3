"""The Dapr ``pubsub.aws.snssqs`` topology end to end: SNS topic -> SQS queue (moto server,
real HTTP) -> the real ``priority-pubsub run`` subprocess -> a real HTTP app."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from priority_pubsub.config import load_config
from priority_pubsub.drivers.sqs import dapr_cloudevent
from priority_pubsub.message import Message
from priority_pubsub.ops import open_driver
from tests.e2e.helpers import assert_strict_with_a_late_high, journal_records, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.moto_server import MotoServer
from tests.support.sidecar import cli, sidecar_config, start_sidecar, write_config

if TYPE_CHECKING:
    from types_boto3_sqs import SQSClient

pytestmark = pytest.mark.sqs


class Topology:
    """Fresh queues (and SNS topics subscribed to them) named for one test."""

    def __init__(self, server: MotoServer) -> None:
        self.server = server
        session = boto3.session.Session()
        self.sqs: SQSClient = session.client("sqs", endpoint_url=server.endpoint_url)
        self.sns = session.client("sns", endpoint_url=server.endpoint_url)
        self.prefix = f"e{uuid.uuid4().hex[:10]}"

    def queue(self, suffix: str) -> str:
        name = f"{self.prefix}-{suffix}"
        self.sqs.create_queue(QueueName=name)
        return name

    def url(self, name: str) -> str:
        return self.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def topic_for(self, queue: str) -> str:
        """An SNS topic with ``queue`` subscribed, raw delivery off: what Dapr sets up."""
        arn = self.sns.create_topic(Name=f"{queue}-topic")["TopicArn"]
        queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=self.url(queue), AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)
        return arn

    def drain(self, queue: str, wait_s: int = 1) -> list[Any]:
        """Every message now in ``queue`` (received and deleted), with all attributes."""
        found: list[Any] = []
        while True:
            answer = self.sqs.receive_message(
                QueueUrl=self.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=wait_s,
                MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
            )
            if not answer.get("Messages"):
                return found
            for item in answer["Messages"]:
                found.append(item)
                self.sqs.delete_message(QueueUrl=self.url(queue),
                                        ReceiptHandle=item["ReceiptHandle"])

    def config(self, directory: Path, app_url: str, queues: list[str], dead: str,
               **overrides: Any) -> dict[str, Any]:
        # short long polls keep shutdown quick: close() waits for running polls
        driver = {"type": "sqs", "endpoint_url": self.server.endpoint_url,
                  "region": self.server.region, "wait_time_s": 2}
        defaults = {"transforms": ["sns_envelope"], "dead_letter": {"queue": dead}}
        return sidecar_config(directory, app_url, driver, queues, **{**defaults, **overrides})

    def close(self) -> None:
        self.sqs.close()
        self.sns.close()


@pytest.fixture
def aws(moto_server: MotoServer) -> Iterator[Topology]:
    topology = Topology(moto_server)
    yield topology
    topology.close()



def test_dapr_topology_delivers_the_original_cloudevent(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    high, dead = aws.queue("high"), aws.queue("dead")
    topic_arn = aws.topic_for(high)
    config = aws.config(tmp_path, app.url, [high], dead)
    config_path = write_config(tmp_path, config)
    published = dapr_cloudevent({"job": "render-report", "customer": 42}, topic=high)
    result = cli("publish", high, "--via-sns", topic_arn, "--data", published.decode(),
                 "--attr", "customer-tier=gold", config=config_path)
    assert result.returncode == 0, result.stderr
    sidecar = start_sidecar(tmp_path, config)
    try:
        [request] = app.wait_for(1)
    finally:
        assert sidecar.stop() == 0
    original = json.loads(published)
    event = request.event
    assert {k: event[k] for k in original} == original  # same id, data, traceparent, topic...
    assert (event["queue"], event["priority"], event["attempt"]) == (high, 0, 1)
    assert request.headers["Content-Type"].startswith("application/cloudevents+json")
    assert request.headers["traceparent"] == original["traceparent"]
    assert request.headers["metadata.customer-tier"] == "gold"
    assert aws.drain(high) == []  # acked: deleted


def test_strict_priority_across_two_queues(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    high, low, dead = aws.queue("high"), aws.queue("low"), aws.queue("dead")
    app.behaviour = lambda _: Reply(delay_s=0.3)
    for n in range(6):  # the low backlog is there first
        aws.sqs.send_message(QueueUrl=aws.url(low), MessageBody=dapr_cloudevent(n, topic=low)
                             .decode())
    for n in range(4):
        aws.sqs.send_message(QueueUrl=aws.url(high), MessageBody=dapr_cloudevent(n, topic=high)
                             .decode())
    config = aws.config(tmp_path, app.url, [high, low], dead, transforms=[],
                        lease={"duration_s": 10})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(6)  # four high, then low ones: now a high one arrives mid-backlog
        aws.sqs.send_message(QueueUrl=aws.url(high), MessageBody=dapr_cloudevent("late",
                             topic=high).decode())
        received = app.wait_for(11, timeout_s=30)
    finally:
        assert sidecar.stop() == 0
    assert_strict_with_a_late_high(received, high, low)


def test_task_three_times_the_visibility_is_delivered_once(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    high, dead = aws.queue("high"), aws.queue("dead")
    app.behaviour = lambda _: Reply(delay_s=3.5)  # lease 1 s: extended every 1/3 s
    aws.sqs.send_message(QueueUrl=aws.url(high), MessageBody=dapr_cloudevent("long", topic=high)
                         .decode())
    config = aws.config(tmp_path, app.url, [high], dead, transforms=[], concurrency=2,
                        lease={"duration_s": 1})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
        time.sleep(1.5)  # a lapsed lease would show up as a second delivery by now
        metrics = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    assert len(app.received) == 1
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["attempt"]) == ("ack", 1)
    [extensions] = [line for line in metrics.splitlines()
                    if line.startswith("priority_pubsub_lease_extensions_total{")]
    assert float(extensions.split()[-1]) >= 6
    assert aws.drain(high) == []


def _flaky_or_doomed(request: Received) -> Reply:
    event = request.event
    if event["data"] == "flaky" and event["attempt"] >= 3:
        return Reply(200)
    return Reply(503)


def test_retry_backoff_max_attempts_and_bad_bodies_on_sqs(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    """Retry = growing visibility; max attempts -> DLQ; a non-SNS body -> DLQ with reason."""
    high, dead = aws.queue("high"), aws.queue("dead")
    topic_arn = aws.topic_for(high)
    app.behaviour = _flaky_or_doomed
    for data in ("flaky", "doomed"):
        aws.sns.publish(TopicArn=topic_arn, Message=dapr_cloudevent(data, topic=high).decode(),
                        MessageAttributes={"origin": {"DataType": "String", "StringValue": "sns"}})
    aws.sqs.send_message(
        QueueUrl=aws.url(high), MessageBody="not an SNS envelope",
        MessageAttributes={"origin": {"DataType": "String", "StringValue": "legacy"}},
    )
    config = aws.config(tmp_path, app.url, [high], dead, concurrency=3,
                        retry={"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 8})
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 7, timeout_s=30)
    finally:
        assert sidecar.stop() == 0

    by_data: dict[str, list[Received]] = {"flaky": [], "doomed": []}
    for request in app.received:
        by_data[request.event["data"]].append(request)
    for data, requests in by_data.items():  # attempt = SQS's ApproximateReceiveCount
        assert [r.event["attempt"] for r in requests] == [1, 2, 3], data
        assert requests[0].headers["metadata.origin"] == "sns"
        gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
        for gap, delay in zip(gaps, (1, 2), strict=True):  # visibility 1 s, then 2 s
            assert delay - 0.1 <= gap <= delay + 2.5, (data, gaps)

    letters = {"legacy" if item["Body"] == "not an SNS envelope" else "sns": item
               for item in aws.drain(dead)}
    assert set(letters) == {"sns", "legacy"}
    doomed = letters["sns"]
    assert json.loads(json.loads(doomed["Body"])["Message"])["data"] == "doomed"  # body kept
    reason = doomed["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert "max attempts (3) reached" in reason
    legacy = letters["legacy"]
    assert legacy["MessageAttributes"]["origin"]["StringValue"] == "legacy"  # attributes kept
    reason = legacy["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert "sns_envelope" in reason
    assert legacy["MessageAttributes"]["dead_letter_source"]["StringValue"] == high
    outcomes = sorted(r["outcome"] for r in journal_records(tmp_path / "journal"))
    assert outcomes == ["ack", "dead", "dead", "retry", "retry", "retry", "retry"]
    assert aws.drain(high) == []


def test_sigterm_returns_unfinished_messages_at_once(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    high, dead = aws.queue("high"), aws.queue("dead")
    app.behaviour = lambda _: Reply(delay_s=30)
    aws.sqs.send_message(QueueUrl=aws.url(high), MessageBody=dapr_cloudevent("busy", topic=high)
                         .decode())
    config = aws.config(tmp_path, app.url, [high], dead, transforms=[],
                        lease={"duration_s": 60}, shutdown={"grace_s": 1})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        sidecar.terminate()
        stopped = time.monotonic()
        assert sidecar.wait(timeout_s=20) == 0
    finally:
        sidecar.stop()
    answer = aws.sqs.receive_message(QueueUrl=aws.url(high), WaitTimeSeconds=5,
                                     MessageSystemAttributeNames=["ApproximateReceiveCount"])
    [item] = answer["Messages"]  # visible again now, not after the 60 s lease
    assert time.monotonic() - stopped < 15
    assert item["Attributes"]["ApproximateReceiveCount"] == "2"
    [record] = journal_records(tmp_path / "journal")
    assert record["outcome"] == "retry"


async def release_once(config: Path, queue: str, count: int) -> None:
    """Receive and hand back unseen through the driver, as the dispatcher does with surplus:
    SQS has counted a receive that no app ever saw."""
    async with open_driver(load_config(config)) as driver:
        got: list[Message] = []
        while len(got) < count:
            got += await driver.receive(queue, count - len(got), 1)
        for message in got:
            assert message.attempt == 1
            await driver.release(message)


def test_a_released_message_is_delivered_before_any_dead_letter_decision(
    tmp_path: Path, app: RecordingApp, aws: Topology
) -> None:
    """Issue #14 item 1 on SQS: the receive count a release left behind (it cannot be undone)
    must not dead-letter the message "before delivery"; the app's answer decides."""
    low, dead = aws.queue("low"), aws.queue("dead")
    app.behaviour = lambda r: Reply(500 if r.event["data"] == "fails" else 200)
    for data in ("ok", "fails"):
        aws.sqs.send_message(QueueUrl=aws.url(low), MessageBody=dapr_cloudevent(data, topic=low)
                             .decode())
    config = aws.config(tmp_path, app.url, [low], dead, transforms=[],
                        retry={"max_attempts": 1, "initial_delay_s": 1, "max_delay_s": 1})
    asyncio.run(release_once(write_config(tmp_path, config), low, 2))
    sidecar = start_sidecar(tmp_path, config)
    try:
        received = app.wait_for(2, timeout_s=30)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) >= 2, timeout_s=15)
    finally:
        assert sidecar.stop() == 0
    assert sorted((r.event["data"], r.event["attempt"]) for r in received) == [
        ("fails", 2), ("ok", 2)]
    settled = sorted((r["outcome"], r["attempt"], r["reason"] or "")
                     for r in journal_records(tmp_path / "journal"))
    last = "max attempts (1) reached; last: app returned 500"
    assert settled == [("ack", 2, ""), ("dead", 2, last)]
    [letter] = aws.drain(dead)
    assert json.loads(letter["Body"])["data"] == "fails"
