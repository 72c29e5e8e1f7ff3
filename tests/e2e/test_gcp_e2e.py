"""Pub/Sub end to end: topics and subscriptions on Google's emulator -> the real
``priority-pubsub run`` subprocess (driver ``gcp_pubsub``) -> a real HTTP app."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import DeadLetterPolicy, PubsubMessage, ReceivedMessage, Subscription

from tests.e2e.app_down import AppDownScenario
from tests.e2e.helpers import assert_strict_with_a_late_high, journal_records, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.pubsub_emulator import PROJECT, Emulator
from tests.support.sidecar import sidecar_config, start_sidecar

pytestmark = pytest.mark.gcp

DAPR_EVENT = {
    "id": "5929aaac-a5e2-4ca1-859c-edfe73f11565", "specversion": "1.0",
    "datacontenttype": "application/json", "source": "frontend", "type": "com.dapr.event.sent",
    "topic": "tasks-high", "pubsubname": "tasks",
    "traceid": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "", "data": {"job": "render-report", "customer": 42},
}


def event(data: object, topic: str) -> bytes:
    """A CloudEvent as Dapr's ``pubsub.gcp.pubsub`` publishes it (the body of the message)."""
    return json.dumps({**DAPR_EVENT, "id": str(uuid.uuid4()), "topic": topic,
                       "data": data}).encode()


class Topology:
    """Fresh topics, subscriptions (each with a dead-letter policy) and a dead-letter topic
    with a reader subscription, named for one test. Sync gapic clients: tests here are sync."""

    def __init__(self) -> None:
        self.publisher = PublisherClient()
        self.subscriber = SubscriberClient()
        self.uid = uuid.uuid4().hex[:10]
        self.dead = self._topic("dead")
        self._subscribe("dead-read", self.dead)

    def path(self, kind: str, name: str) -> str:
        return f"projects/{PROJECT}/{kind}/{name}"

    def _topic(self, suffix: str) -> str:
        name = f"{suffix}-{self.uid}"
        self.publisher.create_topic(name=self.path("topics", name))
        return name

    def _subscribe(self, name: str, topic: str, policy: DeadLetterPolicy | None = None) -> str:
        self.subscriber.create_subscription(request=Subscription(
            name=self.path("subscriptions", f"{name}-{self.uid}"),
            topic=self.path("topics", topic), ack_deadline_seconds=10,
            dead_letter_policy=policy,
        ))
        return f"{name}-{self.uid}"

    def queue(self, suffix: str) -> str:
        """A topic and its subscription; the subscription id is the queue name."""
        topic = self._topic(f"t-{suffix}")
        policy = DeadLetterPolicy(dead_letter_topic=self.path("topics", self.dead),
                                  max_delivery_attempts=100)
        return self._subscribe(suffix, topic, policy)

    def publish(self, queue: str, body: bytes, attributes: dict[str, str] | None = None) -> None:
        topic = self.subscriber.get_subscription(
            subscription=self.path("subscriptions", queue)).topic
        self.publisher.publish(topic=topic,
                               messages=[PubsubMessage(data=body, attributes=attributes or {})])

    def pull(self, queue: str, wait_s: float = 2) -> list[ReceivedMessage]:
        """Whatever ``queue`` delivers within ``wait_s`` (acked)."""
        path = self.path("subscriptions", queue)
        answer = self.subscriber.pull(subscription=path, max_messages=50, timeout=wait_s + 1)
        if answer.received_messages:
            self.subscriber.acknowledge(
                subscription=path, ack_ids=[r.ack_id for r in answer.received_messages])
        return list(answer.received_messages)

    def dead_letters(self) -> list[ReceivedMessage]:
        return self.pull(f"dead-read-{self.uid}")

    def config(self, directory: Path, app_url: str, queues: list[str],
               **overrides: Any) -> dict[str, Any]:
        defaults = {"dead_letter": {"queue": self.dead}, "lease": {"duration_s": 10}}
        return sidecar_config(directory, app_url, {"type": "gcp_pubsub", "project": PROJECT},
                              queues, **{**defaults, **overrides})

    def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            close: Callable[[], None] = client.transport.close  # untyped in the SDK
            close()


@pytest.fixture
def gcp(pubsub_emulator: Emulator) -> Iterator[Topology]:
    topology = Topology()
    yield topology
    topology.close()



def test_dapr_event_and_attributes_reach_the_app_unchanged(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    published = event({"job": "render-report"}, topic=high)
    gcp.publish(high, published, {"customer-tier": "gold"})
    sidecar = start_sidecar(tmp_path, gcp.config(tmp_path, app.url, [high]))
    try:
        [request] = app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    original = json.loads(published)
    assert {k: request.event[k] for k in original} == original
    assert (request.event["queue"], request.event["attempt"]) == (high, 1)
    assert request.headers["metadata.customer-tier"] == "gold"
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["driver"]) == ("ack", "gcp_pubsub")
    assert gcp.pull(high, wait_s=1) == []  # acked


def test_strict_priority_across_two_subscriptions(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high, low = gcp.queue("high"), gcp.queue("low")
    app.behaviour = lambda _: Reply(delay_s=0.3)
    for n in range(6):  # the low backlog is there first
        gcp.publish(low, event(n, topic=low))
    for n in range(4):
        gcp.publish(high, event(n, topic=high))
    sidecar = start_sidecar(tmp_path, gcp.config(tmp_path, app.url, [high, low]))
    try:
        app.wait_for(6)  # four high, then low ones: now a high one arrives mid-backlog
        gcp.publish(high, event("late", topic=high))
        received = app.wait_for(11, timeout_s=30)
    finally:
        assert sidecar.stop() == 0
    assert_strict_with_a_late_high(received, high, low)


def test_task_three_times_the_ack_deadline_is_delivered_once(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    # lease 2 s: the driver sets each pulled message's ack deadline to 2 s and the lease
    # keeper extends it every 2/3 s; the app works 6.5 s, more than three deadlines.
    app.behaviour = lambda _: Reply(delay_s=6.5)
    gcp.publish(high, event("long", topic=high))
    config = gcp.config(tmp_path, app.url, [high], lease={"duration_s": 2}, concurrency=2)
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
        time.sleep(2.5)  # a lapsed deadline would show up as a second delivery by now
    finally:
        assert sidecar.stop() == 0
    assert len(app.received) == 1
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["attempt"]) == ("ack", 1)
    assert gcp.pull(high, wait_s=1) == []


def test_retry_waits_the_growing_delay_then_succeeds(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    app.behaviour = lambda r: Reply(500) if r.event["attempt"] < 4 else Reply(200)
    gcp.publish(high, event("flaky", topic=high))
    config = gcp.config(tmp_path, app.url, [high],
                        retry={"max_attempts": 5, "initial_delay_s": 1, "max_delay_s": 8})
    sidecar = start_sidecar(tmp_path, config)
    try:
        received = app.wait_for(4, timeout_s=30)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 4, timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    assert [r.event["attempt"] for r in received] == [1, 2, 3, 4]  # delivery_attempt
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    for gap, delay in zip(gaps, (1, 2, 4), strict=True):  # modify_ack_deadline(delay)
        assert delay - 0.1 <= gap <= delay + 2.5, gaps
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == [
        "retry", "retry", "retry", "ack"]


def test_fatal_code_goes_to_the_dead_letter_topic_at_once(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    app.behaviour = lambda _: Reply(422)
    published = event("invalid", topic=high)
    gcp.publish(high, published, {"origin": "frontend"})
    sidecar = start_sidecar(tmp_path, gcp.config(tmp_path, app.url, [high]))
    try:
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
    finally:
        assert sidecar.stop() == 0
    [letter] = gcp.dead_letters()
    assert letter.message.data == published  # the body as received, kept
    attributes = dict(letter.message.attributes)
    assert attributes["origin"] == "frontend"
    assert attributes["dead_letter_source"] == high
    assert "422" in attributes["dead_letter_reason"]
    assert len(app.received) == 1  # never retried
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == ["dead"]
    assert gcp.pull(high, wait_s=1) == []


def test_max_attempts_dead_letters_with_reason(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    app.behaviour = lambda _: Reply(503)
    gcp.publish(high, event("doomed", topic=high))
    config = gcp.config(tmp_path, app.url, [high],
                        retry={"max_attempts": 3, "initial_delay_s": 0, "max_delay_s": 0})
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 3, timeout_s=20)
    finally:
        assert sidecar.stop() == 0
    [letter] = gcp.dead_letters()
    assert "max attempts (3) reached" in letter.message.attributes["dead_letter_reason"]
    assert [r.event["attempt"] for r in app.received] == [1, 2, 3]
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == [
        "retry", "retry", "dead"]
    assert gcp.pull(high, wait_s=1) == []


def test_sigterm_returns_unfinished_messages_at_once(
    tmp_path: Path, app: RecordingApp, gcp: Topology
) -> None:
    high = gcp.queue("high")
    app.behaviour = lambda _: Reply(delay_s=30)
    gcp.publish(high, event("busy", topic=high))
    config = gcp.config(tmp_path, app.url, [high], lease={"duration_s": 60},
                        shutdown={"grace_s": 1})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        sidecar.terminate()
        stopped = time.monotonic()
        assert sidecar.wait(timeout_s=20) == 0
    finally:
        sidecar.stop()
    [item] = gcp.pull(high, wait_s=5)  # deliverable now, not after the 60 s lease
    assert time.monotonic() - stopped < 15
    assert item.delivery_attempt == 2
    [record] = journal_records(tmp_path / "journal")
    assert record["outcome"] == "retry"


class TestPubSubAppDown(AppDownScenario):
    """Issue 13 on Pub/Sub (shorter): delivery_attempt cannot be undone; see the README."""

    @pytest.fixture(autouse=True)
    def _topology(self, gcp: Topology) -> None:
        self.gcp = gcp
        self.queue = gcp.queue("high")

    def scenario_config(self, directory: Path, app_url: str, **overrides: Any) -> dict[str, Any]:
        return self.gcp.config(directory, app_url, [self.queue], **overrides)

    def scenario_publish(self, bodies: list[str]) -> None:
        for body in bodies:
            self.gcp.publish(self.queue, body.encode())

    def scenario_dead_letters(self) -> int:
        return len(self.gcp.dead_letters())
