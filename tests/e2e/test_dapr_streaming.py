"""Streaming subscriptions (``SubscribeTopicEventsAlpha1``) against the real sidecar, an app
with no push endpoint (no ``app.url``: publisher-only plus streams), on the local driver.

- python-sdk's ``examples/pubsub-streaming`` and ``pubsub-streaming-async``
  (``tests/thirdparty/python-sdk``, unchanged): the subscriber (``client.subscribe``) and the
  handler subscriber (``subscribe_with_handler``), sync and async, with the example's
  publisher: every message once, acked.
- A stream on a topic unknown at start: its queue made (the local driver's: any name), taken
  from below the known topics while the stream is open (a known topic's message goes first);
  the publish API publishes to it. A stream's own ``deadLetterTopic`` gets what it drops and
  what runs out of retries (dapr ``subscription.go`` ``sendToDeadLetter``), published there.
- A stream's answers as daprd reads them (dapr ``postman/streaming/streaming.go``): RETRY
  redelivers the event, DROP drops it; a stream closed with an event unanswered hands it back
  at once to another stream; two streams on one topic share its messages; unanswered events
  hold workers (``concurrency``); the journal records each attempt; the metadata API lists
  open streams as STREAMING.
- SIGTERM while a stream holds events past the grace period, one at its last attempt:
  each counts one attempt but never past the limit, comes back at once
  after a restart, and is acked; nothing is dead-lettered.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventResponse
from dapr.proto.runtime.v1.pubsub_pb2 import (
    SubscribeTopicEventsRequestAlpha1,
    SubscribeTopicEventsRequestInitialAlpha1,
    SubscribeTopicEventsRequestProcessedAlpha1,
)

from priority_pubsub.delivery.settlement import LAST_ATTEMPT_KEPT
from priority_pubsub.delivery.worker import SHUTDOWN_REASON
from tests.e2e.helpers import (
    assert_attempts_follow_the_stop_rule,
    journal_records,
    publish,
    queue_rows,
)
from tests.support.app_venv import running_app
from tests.support.dapr_resources import (
    Sns,
    dapr_config,
    snssqs_component,
    subscription_v2,
    write_resources,
)
from tests.support.daprd import Daprd, redis_resources
from tests.support.moto_server import MotoServer
from tests.support.quickstarts import publish_api
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import SidecarProcess, local_config, start_sidecar
from tests.support.waiting import wait_until

pytestmark = pytest.mark.local
PYTHON_SDK = Path(__file__).resolve().parents[1] / "thirdparty" / "python-sdk"
TOPIC = "TOPIC_A"


def _streaming_sidecar(tmp_path: Path, concurrency: int = 4) -> tuple[SidecarProcess,
                                                                       dict[str, Any]]:
    api = publish_api()
    config = local_config(tmp_path, "http://127.0.0.1:1", concurrency=concurrency,
                          queues=[{"name": TOPIC}], publish_api=api,
                          retry={"max_attempts": 3, "initial_delay_s": 0.2, "max_delay_s": 1})
    config["app"] = {"push": False}
    return start_sidecar(tmp_path, config), api


def _streams_open(api: dict[str, Any]) -> int:
    answer = httpx.get(f"http://127.0.0.1:{api['http_port']}/v1.0/metadata", timeout=5).json()
    return sum(s["type"] == "STREAMING" for s in answer.get("subscriptions", []))


@pytest.mark.parametrize(("example", "subscriber"), [
    ("pubsub-streaming", "subscriber.py"),
    ("pubsub-streaming", "subscriber-handler.py"),
    ("pubsub-streaming-async", "subscriber.py"),
    ("pubsub-streaming-async", "subscriber-handler.py"),
])
def test_python_sdk_streaming_examples_get_every_message_once(
    tmp_path: Path, example: str, subscriber: str
) -> None:
    sidecar, api = _streaming_sidecar(tmp_path)
    env = {"DAPR_HTTP_PORT": str(api["http_port"]), "DAPR_GRPC_PORT": str(api["grpc_port"])}
    directory = PYTHON_SDK / example
    try:
        with running_app(directory, ["{python}", subscriber, f"--topic={TOPIC}"],
                         tmp_path / "subscriber.log", env=env, wait="none") as app:
            wait_until(lambda: _streams_open(api) == 1, 60)
            with running_app(directory, ["{python}", "publisher.py", f"--topic={TOPIC}"],
                             tmp_path / "publisher.log", env=env, wait="none") as publisher:
                assert publisher.wait_exit(60) == 0, publisher.output()
            assert app.wait_exit(60) == 0, app.output()
            output = app.output()
        wait_until(lambda: _streams_open(api) == 0, 20)  # the closed stream is gone
    finally:
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    ids = [int(n) for n in re.findall(r"Processing message: .*?'id': (\d+)", output)]
    assert sorted(ids) == [1, 2, 3, 4, 5], output
    # each message acked once; the example closes its stream right after its last answer,
    # so that answer may not reach the sidecar: then the message is handed back unseen (as
    # daprd redelivers it), never lost or counted as a failed attempt
    final: dict[str, str] = {}
    for record in journal_records(tmp_path / "journal", releases=True):
        assert final.get(record["message_id"]) != "ack", record
        final[record["message_id"]] = record["outcome"]
    assert len(final) == 5
    assert list(final.values()).count("ack") >= 4
    assert set(final.values()) <= {"ack", "release"}


class StreamClient:
    """A raw ``SubscribeTopicEventsAlpha1`` client: the events it gets, answers on demand."""

    def __init__(self, grpc_port: int, topic: str = TOPIC, pubsub: str = "pubsub",
                 dead_letter_topic: str = "") -> None:
        self._channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self._requests: queue.Queue[SubscribeTopicEventsRequestAlpha1 | None] = queue.Queue()
        initial = SubscribeTopicEventsRequestInitialAlpha1(pubsub_name=pubsub, topic=topic)
        if dead_letter_topic:
            initial.dead_letter_topic = dead_letter_topic
        self._requests.put(SubscribeTopicEventsRequestAlpha1(initial_request=initial))
        self._call = dapr_pb2_grpc.DaprStub(self._channel).SubscribeTopicEventsAlpha1(
            self._outgoing())
        self.events: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _outgoing(self) -> Iterator[SubscribeTopicEventsRequestAlpha1]:
        while (request := self._requests.get()) is not None:
            yield request

    def _read(self) -> None:
        try:
            for response in self._call:
                if response.HasField("event_message"):
                    self.events.put(response.event_message)
        except grpc.RpcError:
            pass

    def next_event(self, timeout_s: float = 10) -> Any:
        return self.events.get(timeout=timeout_s)

    def answer(self, event: Any, status: int) -> None:
        self._requests.put(SubscribeTopicEventsRequestAlpha1(
            event_processed=SubscribeTopicEventsRequestProcessedAlpha1(
                id=event.id, status=TopicEventResponse(status=status))))

    def close(self) -> None:
        """Half-close, as an SDK closes a subscription: answers already given are sent
        first; the sidecar then ends the stream."""
        self._requests.put(None)
        self._reader.join(10)
        self._call.cancel()
        self._channel.close()


def _publish(api: dict[str, Any], *orders: int, topic: str = TOPIC) -> None:
    for order in orders:
        answer = httpx.post(f"http://127.0.0.1:{api['http_port']}/v1.0/publish/pubsub/{topic}",
                            json={"order": order}, timeout=5)
        assert answer.status_code == 204, answer.text


def _order(event: Any) -> int:
    return int(json.loads(event.data)["order"])


def test_retry_drop_closed_stream_and_competing_streams(tmp_path: Path) -> None:
    sidecar, api = _streaming_sidecar(tmp_path, concurrency=2)
    first = StreamClient(api["grpc_port"])
    try:
        wait_until(lambda: _streams_open(api) == 1, 20)
        _publish(api, 1)
        event = first.next_event()
        first.answer(event, TopicEventResponse.RETRY)  # RETRY: delivered again
        again = first.next_event()
        assert (_order(again), again.id) == (1, event.id)
        first.answer(again, TopicEventResponse.SUCCESS)

        _publish(api, 2)
        first.answer(first.next_event(), TopicEventResponse.DROP)  # DROP: gone

        _publish(api, 3, 4, 5)  # two workers: only two events unanswered at once
        held = [first.next_event(), first.next_event()]
        with pytest.raises(queue.Empty):
            first.next_event(timeout_s=1.5)
        second = StreamClient(api["grpc_port"])
        wait_until(lambda: _streams_open(api) == 2, 20)
        first.close()  # its two unanswered events go back at once, to the other stream
        started = time.monotonic()
        got = []
        for _ in range(3):  # answered as they come: two workers, so two unanswered at most
            event = second.next_event()
            got.append(_order(event))
            second.answer(event, TopicEventResponse.SUCCESS)
        assert sorted(got) == [3, 4, 5]
        assert time.monotonic() - started < 10  # not after a lease ran out (30 s)
        assert {_order(e) for e in held} <= set(got)

        third = StreamClient(api["grpc_port"])  # two streams compete for one topic
        wait_until(lambda: _streams_open(api) == 2, 20)
        _publish(api, *range(10, 20))
        seen: dict[str, list[int]] = {"second": [], "third": []}
        for _ in range(10):
            for name, client in (("second", second), ("third", third)):
                try:
                    event = client.next_event(timeout_s=0.5)
                except queue.Empty:
                    continue
                seen[name].append(_order(event))
                client.answer(event, TopicEventResponse.SUCCESS)
            if len(seen["second"]) + len(seen["third"]) == 10:
                break
        assert sorted(seen["second"] + seen["third"]) == list(range(10, 20))
        assert seen["second"], seen
        assert seen["third"], seen
        second.close()
        third.close()
        wait_until(lambda: _streams_open(api) == 0, 20)
    finally:
        first.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    by_outcome: dict[str, int] = {}
    for record in journal_records(tmp_path / "journal", releases=True):
        by_outcome[record["outcome"]] = by_outcome.get(record["outcome"], 0) + 1
    assert by_outcome == {"retry": 1, "ack": 14, "drop": 1, "release": 2}


def test_the_published_baggage_rides_on_the_streamed_event(tmp_path: Path) -> None:
    """Beyond daprd up to 1.18 (dapr #10302): a streamed event is a ``TopicEventRequest`` on
    the response stream, which has no metadata of its own per message, so the publisher's
    baggage comes as the event's ``baggage`` extension (the CloudEvent field), as sent."""
    baggage = "tenant=acme;ttl=60,user=J%C3%B6rg"
    sidecar, api = _streaming_sidecar(tmp_path)
    client = StreamClient(api["grpc_port"])
    try:
        wait_until(lambda: _streams_open(api) == 1, 20)
        answer = httpx.post(f"http://127.0.0.1:{api['http_port']}/v1.0/publish/pubsub/{TOPIC}",
                            json={"order": 1}, headers={"baggage": baggage}, timeout=5)
        assert answer.status_code == 204, answer.text
        carried = client.next_event()
        client.answer(carried, TopicEventResponse.SUCCESS)
        _publish(api, 2)
        plain = client.next_event()
        client.answer(plain, TopicEventResponse.SUCCESS)
    finally:
        client.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    assert (_order(carried), carried.extensions["baggage"]) == (1, baggage)
    assert _order(plain) == 2
    assert "baggage" not in plain.extensions


@pytest.mark.redis
def test_dapr_mode_publisher_only_sidecar_streams_its_subscribed_topic(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """Dapr mode: a daprd line without --app-port on Redis; a Subscription's topic is
    streamed with daprd's event (the published CloudEvent's fields) and settled by the
    stream's answer; the publish API publishes into the component's stream."""
    subscription = {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
                    "metadata": {"name": "orders"},
                    "spec": {"pubsubname": "orderpubsub", "topic": "orders",
                             "routes": {"default": "/orders"}}}
    resources = redis_resources(tmp_path / "resources", own_redis.port, [subscription])
    daprd = Daprd(tmp_path, "streamer", resources, None)
    try:
        daprd.wait_api()
        client = StreamClient(daprd.grpc_port, "orders", "orderpubsub")
        wait_until(lambda: _streams_open({"http_port": daprd.http_port}) == 1, 20)
        answer = httpx.post(f"{daprd.api}/v1.0/publish/orderpubsub/orders",
                            json={"order": 7}, timeout=5)
        assert answer.status_code == 204, answer.text
        event = client.next_event(20)
        client.answer(event, TopicEventResponse.SUCCESS)
        streams = redis.Redis(port=own_redis.port)
        # acked: nothing pending in the app's consumer group (daprd's consumerID = app id)
        wait_until(lambda: streams.xpending("orders", "streamer")["pending"] == 0, 10)
        streams.close()
        client.close()
    finally:
        code = daprd.stop()
    assert code == 0, daprd.logs()[-3000:]
    assert (event.topic, event.pubsub_name, event.source, event.type) == (
        "orders", "orderpubsub", "streamer", "com.dapr.event.sent")
    assert json.loads(event.data) == {"order": 7}


def test_a_topic_unknown_at_start_is_streamed_below_the_known_ones(tmp_path: Path) -> None:
    sidecar, api = _streaming_sidecar(tmp_path, concurrency=1)
    high = StreamClient(api["grpc_port"])  # TOPIC: configured
    late = StreamClient(api["grpc_port"], "late-topic")  # unknown at start
    try:
        wait_until(lambda: _streams_open(api) == 2, 20)
        _publish(api, 1, topic="late-topic")  # the publish API takes the stream's topic now
        first = late.next_event()
        assert (first.topic, first.pubsub_name, _order(first)) == ("late-topic", "pubsub", 1)
        # the only worker holds the unanswered late event: a late and then a high one wait
        _publish(api, 2, topic="late-topic")
        _publish(api, 3)
        late.answer(first, TopicEventResponse.SUCCESS)
        event = high.next_event()
        assert _order(event) == 3  # the known topic first, though published after
        with pytest.raises(queue.Empty):  # one worker, held by the high event
            late.next_event(timeout_s=1)
        high.answer(event, TopicEventResponse.SUCCESS)
        event = late.next_event()
        assert _order(event) == 2
        late.answer(event, TopicEventResponse.SUCCESS)
        metadata = httpx.get(f"http://127.0.0.1:{api['http_port']}/v1.0/metadata",
                             timeout=5).json()
        assert sorted(s["topic"] for s in metadata["subscriptions"]) == ["TOPIC_A", "late-topic"]
        late.close()
        wait_until(lambda: _streams_open(api) == 1, 20)
        _publish(api, 4, topic="late-topic")  # no stream: it waits in its queue, untaken
        again = StreamClient(api["grpc_port"], "late-topic")  # the topic is known now
        event = again.next_event(20)
        assert _order(event) == 4
        again.answer(event, TopicEventResponse.SUCCESS)
        again.close()
    finally:
        high.close()
        late.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    records = [(r["queue"], r["outcome"], r["priority"])
               for r in journal_records(tmp_path / "journal", releases=True)]
    assert sorted(records) == [("TOPIC_A", "ack", 0)] + [("late-topic", "ack", 1)] * 3


def test_a_streams_dead_letter_topic_gets_what_it_drops_and_what_runs_out_of_retries(
    tmp_path: Path
) -> None:
    sidecar, api = _streaming_sidecar(tmp_path)  # max_attempts 3
    client = StreamClient(api["grpc_port"], dead_letter_topic="poison")
    dead = StreamClient(api["grpc_port"], "poison")  # the dead-letter topic, streamed too
    try:
        wait_until(lambda: _streams_open(api) == 2, 20)
        _publish(api, 1, 2)
        answered: dict[int, int] = {}
        while sum(answered.values()) < 4:  # 1: dropped at once; 2: RETRY three times
            event = client.next_event()
            order = _order(event)
            answered[order] = answered.get(order, 0) + 1
            client.answer(event, TopicEventResponse.DROP if order == 1
                          else TopicEventResponse.RETRY)
        got = []
        for _ in range(2):
            event = dead.next_event(20)
            got.append(_order(event))
            dead.answer(event, TopicEventResponse.SUCCESS)
        assert sorted(got) == [1, 2]
        assert answered == {1: 1, 2: 3}
        with pytest.raises(queue.Empty):  # settled: nothing comes back to the stream
            client.next_event(timeout_s=1.5)
    finally:
        client.close()
        dead.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    outcomes = sorted((r["queue"], r["outcome"])
                      for r in journal_records(tmp_path / "journal", releases=True))
    assert outcomes == [("TOPIC_A", "dead"), ("TOPIC_A", "drop"), ("TOPIC_A", "retry"),
                        ("TOPIC_A", "retry"), ("poison", "ack"), ("poison", "ack")]


def _ready(ops_port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{ops_port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _refused(grpc_port: int, topic: str, pubsub: str) -> grpc.RpcError:
    """The error a stream on ``topic`` ends with at once."""
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        initial = SubscribeTopicEventsRequestInitialAlpha1(pubsub_name=pubsub, topic=topic)
        call = dapr_pb2_grpc.DaprStub(channel).SubscribeTopicEventsAlpha1(
            iter([SubscribeTopicEventsRequestAlpha1(initial_request=initial)]), timeout=20)
        with pytest.raises(grpc.RpcError) as refused:
            list(call)
    return refused.value


PROVISIONED_S = 60.0  # a sidecar's readiness, provisioning on moto
EVENT_S = 30.0  # a stream's next event, or the streams opening
MOTO_S = 10.0  # a queue's count on moto turning


# The test's own waits bound it, each failing with what it waited for: their sum (two
# sidecars, a dead-letter notification's 20 s), not the suite's 120 s, which the whole run
# neared with no wait late (93 s at load 27 on two cores).
@pytest.mark.sqs
@pytest.mark.timeout(2 * PROVISIONED_S + 8 * EVENT_S + 20 + 2 * MOTO_S)
def test_snssqs_stream_on_a_topic_unknown_at_start_gets_its_queue_made_as_daprd_makes_it(
    tmp_path: Path, sns: Sns, moto_server: MotoServer
) -> None:
    """Dapr mode, snssqs on moto: the unknown topic's queue ``{consumerID}-{topic}`` and
    SNS topic made as the component makes them, subscribed; published through the component,
    taken below the Subscription's topic; the stream's deadLetterTopic gets its DROP (an SNS
    publish, as daprd's). With ``disableEntityManagement`` nothing is made and the stream is
    refused, naming its topic."""
    app_id = f"streamer-{uuid.uuid4().hex[:8]}"
    resources = write_resources(tmp_path / "resources",
                                snssqs_component("orderpubsub", moto_server),
                                subscription_v2("orders", "orderpubsub", "orders",
                                                default="/orders"))
    api = publish_api()
    config = dapr_config(tmp_path, resources, app_id, "http://127.0.0.1:1", concurrency=1,
                         app={"push": False}, publish_api=api)
    # provisioning on moto (queue, SNS topic, subscription) is slow on a loaded machine
    sidecar = start_sidecar(tmp_path, config, ready_timeout_s=PROVISIONED_S)
    dead_letters = sns.tap("poison")
    high = StreamClient(api["grpc_port"], "orders", "orderpubsub")
    late = StreamClient(api["grpc_port"], "late", "orderpubsub", dead_letter_topic="poison")
    base = f"http://127.0.0.1:{api['http_port']}/v1.0/publish/orderpubsub"

    def publish(topic: str, order: int) -> None:
        answer = httpx.post(f"{base}/{topic}", json={"order": order}, timeout=10)
        assert answer.status_code == 204, answer.text

    try:
        wait_until(lambda: _streams_open(api) == 2, EVENT_S)
        assert sns.visible(f"{app_id}-late") == 0  # made, empty
        # quiet for longer than the driver's long poll (``wait_time_s``, 1 s in dapr_config):
        # the waits came back empty, and the next ones must still take what comes (a take
        # used to wait on for a stream to come or go, and the message sat in its queue)
        time.sleep(2.5)
        publish("late", 1)
        event = late.next_event(EVENT_S)
        assert (event.topic, event.pubsub_name, _order(event)) == ("late", "orderpubsub", 1)
        late.answer(event, TopicEventResponse.DROP)  # to the stream's dead-letter topic
        [notification] = sns.messages(dead_letters, 1)
        assert json.loads(notification["Message"])["data"] == {"order": 1}

        publish("late", 2)
        held = late.next_event(EVENT_S)  # the only worker
        publish("late", 3)
        publish("orders", 4)
        wait_until(lambda: sns.visible(f"{app_id}-orders") == 1, MOTO_S)
        late.answer(held, TopicEventResponse.SUCCESS)
        event = high.next_event(EVENT_S)
        assert _order(event) == 4  # the Subscription's topic first
        high.answer(event, TopicEventResponse.SUCCESS)
        event = late.next_event(EVENT_S)
        assert _order(event) == 3
        late.answer(event, TopicEventResponse.SUCCESS)
        wait_until(lambda: sns.visible(f"{app_id}-late") == 0, MOTO_S)
    finally:
        high.close()
        late.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]

    (tmp_path / "unmanaged").mkdir()
    unmanaged = write_resources(tmp_path / "unmanaged-resources", snssqs_component(
        "orderpubsub", moto_server, disableEntityManagement="true"))
    api = publish_api()
    config = dapr_config(tmp_path / "unmanaged", unmanaged, app_id, "http://127.0.0.1:1",
                         app={"push": False}, publish_api=api)
    sidecar = start_sidecar(tmp_path / "unmanaged", config, ready_timeout_s=PROVISIONED_S)
    try:
        refused = _refused(api["grpc_port"], "absent", "orderpubsub")
        assert refused.code() == grpc.StatusCode.NOT_FOUND, refused
        assert "topic absent" in (refused.details() or ""), refused.details()
        assert "disableEntityManagement" in (refused.details() or "")
        with pytest.raises(Exception, match=r"NonExistentQueue|QueueDoesNotExist"):
            sns.visible(f"{app_id}-absent")  # nothing made
        # a queue that exists is taken, entity management off or not
        late = StreamClient(api["grpc_port"], "late", "orderpubsub")
        wait_until(lambda: _streams_open(api) == 1, EVENT_S)
        publish_late = httpx.post(
            f"http://127.0.0.1:{api['http_port']}/v1.0/publish/orderpubsub/late",
            json={"order": 5}, timeout=10)
        assert publish_late.status_code == 204, publish_late.text
        event = late.next_event(EVENT_S)
        assert _order(event) == 5
        late.answer(event, TopicEventResponse.SUCCESS)
        late.close()
    finally:
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]


@pytest.mark.redis
def test_publisher_only_sidecar_without_subscriptions_streams_a_topic_it_never_heard_of(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """A daprd line without --app-port and no Subscription for the app: no queue at start,
    no app to probe (nothing pauses delivery), ready at once; a stream's topic gets its
    Redis stream and consumer group as daprd's component makes them on subscribe; a closed
    stream's unanswered event goes back at once to the next stream."""
    resources = redis_resources(tmp_path / "resources", own_redis.port, [])
    daprd = Daprd(tmp_path, "lonely", resources, None)
    topic = f"news-{uuid.uuid4().hex[:6]}"
    try:
        daprd.wait_api()
        wait_until(lambda: _ready(daprd.metrics_port), 20)
        client = StreamClient(daprd.grpc_port, topic, "orderpubsub")
        wait_until(lambda: _streams_open({"http_port": daprd.http_port}) == 1, 20)
        streams = redis.Redis(port=own_redis.port)
        assert [g["name"] for g in streams.xinfo_groups(topic)] == [b"lonely"]
        answer = httpx.post(f"{daprd.api}/v1.0/publish/orderpubsub/{topic}",
                            json={"order": 1}, timeout=5)
        assert answer.status_code == 204, answer.text
        first = client.next_event(20)
        assert (first.topic, _order(first)) == (topic, 1)
        client.close()  # unanswered: back at once, not after a lease
        started = time.monotonic()
        again = StreamClient(daprd.grpc_port, topic, "orderpubsub")
        event = again.next_event(20)
        assert (event.id, _order(event)) == (first.id, 1)
        assert time.monotonic() - started < 10
        again.answer(event, TopicEventResponse.SUCCESS)
        wait_until(lambda: streams.xpending(topic, "lonely")["pending"] == 0, 10)
        streams.close()
        again.close()
    finally:
        code = daprd.stop()
    assert code == 0, daprd.logs()[-3000:]


class Answering:
    """Answers a stream's events on a thread as ``decide`` says (None: never answers)."""

    def __init__(self, client: StreamClient, decide: Any) -> None:
        self.orders: list[int] = []
        self._client, self._decide = client, decide
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._answer, daemon=True)
        self._thread.start()

    def _answer(self) -> None:
        while not self._done.is_set():
            try:
                event = self._client.next_event(timeout_s=0.1)
            except queue.Empty:
                continue
            self.orders.append(_order(event))
            status = self._decide(_order(event), self.orders.count(_order(event)))
            if status is not None:
                self._client.answer(event, status)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def test_sigterm_never_punishes_a_streamed_message(tmp_path: Path) -> None:
    """On a streaming subscription (``retry.max_attempts`` 2, grace 1 s):
    SIGTERM while the stream holds one event at its last attempt and one at its first,
    unanswered, and while new messages arrive. Both count one attempt (the one at the
    limit none) and come back at once; after a restart every message is acked once, none is
    dead-lettered."""
    api = publish_api()
    config = local_config(tmp_path, "http://127.0.0.1:1", concurrency=3,
                          queues=[{"name": TOPIC}], publish_api=api,
                          retry={"max_attempts": 2, "initial_delay_s": 0.2, "max_delay_s": 0.5},
                          shutdown={"grace_s": 1})
    config["app"] = {"push": False}
    journal = tmp_path / "journal"

    def hold_1_and_2(order: int, delivery: int) -> int | None:
        if order == 1 and delivery == 1:
            return TopicEventResponse.RETRY  # back at once as attempt 2, the last
        return None if order in (1, 2) else TopicEventResponse.SUCCESS

    sidecar = start_sidecar(tmp_path, config)
    client = StreamClient(api["grpc_port"])
    answering = Answering(client, hold_1_and_2)
    try:
        wait_until(lambda: _streams_open(api) == 1, 20)
        _publish(api, 1, 2)
        wait_until(lambda: sorted(answering.orders) == [1, 1, 2], 20)
        _publish(api, 3)
        wait_until(lambda: "ack" in {r["outcome"] for r in journal_records(journal)}, 20)
        sidecar.terminate()
        publish(sidecar.config_path, TOPIC, json.dumps({"order": 4}))  # while it stops
        assert sidecar.wait(30) == 0
    finally:
        answering.stop()
        client.close()
        sidecar.stop()
    waiting = {row["id"]: row for row in queue_rows(tmp_path / "queues.db", TOPIC)}
    order_of = {message_id: _order_of(row["body"]) for message_id, row in waiting.items()}
    assert sorted(order_of.values()) == [1, 2, 4]
    sidecar = start_sidecar(tmp_path, config, name="restarted")
    client = StreamClient(api["grpc_port"])
    answering = Answering(client, lambda *_: TopicEventResponse.SUCCESS)
    try:  # back at once: the lease is 30 s
        wait_until(lambda: sorted(answering.orders) == [1, 2, 4], 20)
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", TOPIC), 20)
    finally:
        answering.stop()
        client.close()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    records: dict[int, list[dict[str, Any]]] = {}
    for record in journal_records(journal, releases=True):
        records.setdefault(order_of.get(record["message_id"], 3), []).append(record)
    histories = {order: [(r["outcome"], r["attempt"], r["reason"]) for r in history]
                 for order, history in records.items()}
    assert [record[:2] for record in histories[1]] == [("retry", 1), ("retry", 2), ("ack", 2)]
    assert histories[1][1][2] == f"{SHUTDOWN_REASON}; {LAST_ATTEMPT_KEPT}"
    assert histories[2] == [("retry", 1, SHUTDOWN_REASON), ("ack", 2, None)]
    assert histories[3] == [("ack", 1, None)]
    assert histories[4][-1][0] == "ack"  # taken as it stopped at worst: back, or cut short
    assert_attempts_follow_the_stop_rule(records[4], releases_counted=False)
    assert queue_rows(tmp_path / "queues.db", "dead") == []


def _order_of(body: bytes) -> int:
    """The order of a published body: the publish API's CloudEvent, or the raw JSON."""
    value = json.loads(body)
    return int(value["data"]["order"] if "data" in value else value["order"])
