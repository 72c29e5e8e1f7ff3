"""The gRPC app channel end to end: the real sidecar calls a gRPC app's ``AppCallback``
(``app.url: grpc://``), as daprd does with ``--app-protocol grpc``.

- python-sdk's ``examples/pubsub-simple`` (``tests/thirdparty/python-sdk``, unchanged): its
  publisher publishes through the sidecar's publish API (gRPC, bulk too), its dapr-ext-grpc
  subscriber receives every event; RETRY is honoured (event 1 twice, as in the example's
  README), the always-RETRY topic ends in the dead-letter queue.
- A gRPC app of the tests' own shows DROP, UNIMPLEMENTED (acked, never dead-lettered: dapr
  ``pkg/runtime/subscription/postman/grpc/grpc.go`` returns success for it), a gRPC error
  (retried), the ``TopicEventRequest`` fields and the ``dapr-api-token`` metadata.
- The app health gate with a gRPC app: nothing is received before the app answers
  ``AppCallbackHealthCheck``; an app gone away (UNAVAILABLE, no connection) costs no attempt.
- Dapr mode with daprd's command line and ``--app-protocol grpc``: subscriptions from
  ``ListTopicSubscriptions``, events published through the component (SNS on moto).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import grpc
import pytest
from dapr.proto.runtime.v1 import appcallback_pb2, dapr_pb2_grpc
from dapr.proto.runtime.v1.pubsub_pb2 import PublishEventRequest

from tests.e2e.helpers import journal_records, publish, queue_rows, total, wait_until
from tests.support.app_venv import running_app
from tests.support.dapr_resources import Sns, dapr_config, snssqs_component, write_resources
from tests.support.grpc_app import DROP, RETRY, SUCCESS, GrpcApp
from tests.support.moto_server import MotoServer
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, local_config, start_sidecar, write_config

PUBSUB_SIMPLE = Path(__file__).resolve().parents[1] / "thirdparty" / "python-sdk" / "pubsub-simple"
SUBSCRIBER_PORT = 13551  # fixed in the pinned subscriber: app.run(13551)
EXAMPLE_TOPICS = ["TOPIC_A", "TOPIC_CE", "TOPIC_D", "topic/4", "topic/5", "topic/6"]


def publish_api(**overrides: object) -> dict[str, object]:
    return {"host": "127.0.0.1", "http_port": free_port(), "grpc_port": free_port(),
            **overrides}


@pytest.mark.local
@pytest.mark.app_deps(PUBSUB_SIMPLE)
def test_python_sdk_pubsub_example_through_the_sidecar(tmp_path: Path) -> None:
    api = publish_api(app_id="python-publisher")
    config = local_config(
        tmp_path, f"grpc://127.0.0.1:{SUBSCRIBER_PORT}",
        queues=[{"name": name} for name in EXAMPLE_TOPICS], publish_api=api,
        retry={"max_attempts": 3, "initial_delay_s": 0.5, "max_delay_s": 1})
    with running_app(PUBSUB_SIMPLE, ["{python}", "subscriber.py"], tmp_path / "sub.log",
                     port=SUBSCRIBER_PORT, wait="tcp") as subscriber:
        sidecar = start_sidecar(tmp_path, config)
        try:
            env = {"DAPR_HTTP_PORT": str(api["http_port"]),
                   "DAPR_GRPC_PORT": str(api["grpc_port"])}
            with running_app(PUBSUB_SIMPLE, ["{python}", "publisher.py"],
                             tmp_path / "pub.log", env=env, wait="none") as publisher:
                assert publisher.wait_exit(90) == 0, publisher.output()
            assert "Bulk published 3 events. Failed entries: 0" in publisher.output()
            wait_until(lambda: "plain text cloud event" in subscriber.output(), 30)
            wait_until(lambda: len(queue_rows(tmp_path / "queues.db", "dead")) == 1, 30)
        finally:
            assert sidecar.stop() == 0
        output = subscriber.output()
    json_type = 'content_type="application/json"'
    for line in [  # the example README's expected lines (daprd's dead-letter topic aside)
        f'Subscriber received: id=2, message="hello world", {json_type}',
        f'Subscriber received: id=3, message="hello world", {json_type}',
        f'Wildcard-Subscriber received: id=4, message="hello world", {json_type}',
        f'Wildcard-Subscriber received: id=6, message="hello world", {json_type}',
        "Subscriber received: TOPIC_CE",
        'Subscriber received a json cloud event: id=8, message="hello world", '
        'content_type="application/json"',
        'Subscriber received: id=22, message="bulk event 3", content_type="application/json"',
        'Subscriber received plain text cloud event: hello world, content_type="text/plain"',
    ]:
        assert line in output, output
    first = 'Subscriber received: id=1, message="hello world", content_type="application/json"'
    assert output.count(first) == 2, output  # RETRY honoured: delivered again
    records = journal_records(tmp_path / "journal")
    retried = [r for r in records if r["queue"] == "TOPIC_A" and r["outcome"] == "retry"]
    assert [r["reason"] for r in retried] == ["app answered RETRY"]
    dead = queue_rows(tmp_path / "queues.db", "dead")
    assert json.loads(dead[0]["body"])["topic"] == "TOPIC_D"  # always RETRY: dead-lettered
    assert {r["queue"] for r in records if r["outcome"] == "dead"} == {"TOPIC_D"}


@pytest.mark.local
def test_drop_unimplemented_and_errors_as_daprd(tmp_path: Path) -> None:
    answers = {"ok": SUCCESS, "drop": DROP, "unimpl": grpc.StatusCode.UNIMPLEMENTED,
               "boom": grpc.StatusCode.INTERNAL, "retry": RETRY}
    with GrpcApp(answer=lambda request: answers[request.topic]) as app:
        config = local_config(
            tmp_path, app.url,
            queues=[{"name": "ok", "route": "/ok-route"}, *({"name": n} for n in answers
                                                          if n != "ok")],
            app={"url": app.url, "timeout_s": 10, "api_token": "app-s3cret",
                 "pubsub_name": "tasks"})
        config_path = write_config(tmp_path, config, "publish.yaml")
        sidecar = start_sidecar(tmp_path, config)
        try:
            ids = {name: publish(config_path, name, json.dumps({"n": name}),
                                 attributes={"origin": "test"})[0] for name in answers}
            wait_until(lambda: len(queue_rows(tmp_path / "queues.db", "dead")) == 3, 30)
        finally:
            assert sidecar.stop() == 0
    records = journal_records(tmp_path / "journal")
    by_queue = {name: [r for r in records if r["queue"] == name] for name in answers}
    assert [r["outcome"] for r in by_queue["ok"]] == ["ack"]
    assert [r["outcome"] for r in by_queue["drop"]] == ["drop"]
    assert [r["outcome"] for r in by_queue["unimpl"]] == ["ack"]  # done, as daprd does
    assert "UNIMPLEMENTED" in by_queue["unimpl"][0]["reason"]
    for name in ("boom", "retry"):  # retried, then dead-lettered after max_attempts
        outcomes = [r["outcome"] for r in by_queue[name]]
        assert outcomes[-1] == "dead", outcomes
        assert set(outcomes[:-1]) == {"retry"}, outcomes
    assert "INTERNAL" in by_queue["boom"][0]["reason"]
    assert by_queue["retry"][0]["reason"] == "app answered RETRY"
    dead = {json.loads(row["body"])["n"] for row in
            queue_rows(tmp_path / "queues.db", "dead")}
    assert dead == {"drop", "boom", "retry"}  # UNIMPLEMENTED is never dead-lettered
    ok = next(call for call in app.calls if call.request.topic == "ok")
    request = ok.request
    assert (request.pubsub_name, request.topic, request.path) == ("tasks", "ok", "/ok-route")
    assert (request.id, request.source, request.spec_version) == (
        ids["ok"], "priority-pubsub/ok", "1.0")
    assert (request.data_content_type, json.loads(request.data)) == (
        "application/json", {"n": "ok"})
    assert dict(request.extensions)["queue"] == "ok"
    assert ok.metadata["dapr-api-token"] == "app-s3cret"
    assert ok.metadata["metadata.origin"] == "test"


@pytest.mark.local
def test_grpc_app_started_late_and_gone_away_costs_no_attempt(tmp_path: Path) -> None:
    port = free_port()
    retry = {"max_attempts": 3, "initial_delay_s": 0.5, "max_delay_s": 1}
    config = local_config(tmp_path, f"grpc://127.0.0.1:{port}", queues=[{"name": "high"}],
                          retry=retry, concurrency=2)
    config_path = write_config(tmp_path, config, "publish.yaml")
    publish(config_path, "high", '{"n": "early"}', count=5)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        # its ops server up first (on a loaded machine that took more than the 5 s below, and
        # the metrics read failed; stop then met a sidecar with no signal handler yet: -15)
        wait_until(lambda: sidecar.ready_status() != 0, 30)
        time.sleep(5)  # longer than the whole retry schedule
        assert all(row["attempts"] == 0 for row in queue_rows(tmp_path / "queues.db", "high"))
        assert total(sidecar.metrics(), "priority_pubsub_app_up") == 0
        with GrpcApp(port=port) as app:  # started 5 s after the sidecar
            wait_until(lambda: len(app.calls) == 5, 30)
            sidecar.wait_ready(10)
        # gone: the next delivery cannot connect (UNAVAILABLE), receiving pauses
        publish(config_path, "high", '{"n": "late"}', count=5)
        wait_until(lambda: total(sidecar.metrics(), "priority_pubsub_app_up") == 0, 20)
        time.sleep(5)
        assert queue_rows(tmp_path / "queues.db", "dead") == []
        with GrpcApp(port=port) as back:
            wait_until(lambda: len(back.calls) == 5, 30)
            wait_until(lambda: queue_rows(tmp_path / "queues.db", "high") == [], 10)
            metrics = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    records = journal_records(tmp_path / "journal", releases=True)
    acks = [r for r in records if r["outcome"] == "ack"]
    assert len(acks) == 10
    assert {r["attempt"] for r in acks} == {1}  # returns while unreachable were not attempts
    released = [r for r in records if r["outcome"] == "release"]
    assert released, "the outage was never noticed"
    assert all(r["reason"].startswith("app not reachable: gRPC UNAVAILABLE") for r in released)
    assert {r["outcome"] for r in records} == {"ack", "release"}
    assert total(metrics, "priority_pubsub_app_pauses_total", cause="unreachable") >= 1
    assert total(metrics, "priority_pubsub_app_up") == 1


@pytest.mark.sqs
def test_dapr_mode_with_app_protocol_grpc_lists_subscriptions(
    tmp_path: Path, sns: Sns, moto_server: MotoServer
) -> None:
    app_id = f"grpc-app-{uuid.uuid4().hex[:8]}"
    high, low = f"urgent-{app_id}", f"bulk-{app_id}"
    subscriptions = [
        appcallback_pb2.TopicSubscription(pubsub_name="orderpubsub", topic=low,
                                          metadata={"priority": "1"}),
        appcallback_pb2.TopicSubscription(
            pubsub_name="orderpubsub", topic=high, metadata={"priority": "0"},
            routes=appcallback_pb2.TopicRoutes(default="urgent-handler")),
    ]
    resources = write_resources(tmp_path / "resources",
                                snssqs_component("orderpubsub", moto_server))
    api = publish_api()
    with GrpcApp(subscriptions=subscriptions) as app:
        config = dapr_config(tmp_path, resources, app_id, app.url, publish_api=api,
                             retry={"max_attempts": 3, "initial_delay_s": 0.5,
                                    "max_delay_s": 1})
        del config["dapr"], config["app"]  # from daprd's command line instead
        sidecar = start_sidecar(tmp_path, config, ready_timeout_s=60, args=(
            "--app-id", app_id, "--resources-path", str(resources), "--app-protocol", "grpc",
            "--app-port", str(app.port)))
        try:
            with grpc.insecure_channel(f"127.0.0.1:{api['grpc_port']}") as channel:
                stub = dapr_pb2_grpc.DaprStub(channel)
                for topic in (low, high):
                    stub.PublishEvent(PublishEventRequest(
                        pubsub_name="orderpubsub", topic=topic, data=b'{"t": 1}',
                        data_content_type="application/json"), timeout=30)
            wait_until(lambda: len(app.calls) == 2, 40)
        finally:
            assert sidecar.stop() == 0
    by_topic = {call.request.topic: call.request for call in app.calls}
    assert by_topic[high].path == "urgent-handler"
    assert by_topic[low].path == ""  # daprd's default rule for a gRPC subscription
    assert by_topic[low].pubsub_name == "orderpubsub"
    assert by_topic[low].source == app_id  # the publish API's source: the app id
    assert json.loads(by_topic[low].data) == {"t": 1}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", dict(by_topic[low].extensions)["time"])
    assert sns.visible(f"{app_id}-{low}") == 0
    assert {r["outcome"] for r in journal_records(tmp_path / "journal")} == {"ack"}
