"""The publish API end to end, against the real sidecar process.

- Dapr's pub/sub quickstart without daprd: the pinned ``checkout`` publishers (HTTP with
  requests, SDK with ``DaprClient().publish_event`` over gRPC), unchanged, publish through the
  sidecar; the pinned ``order-processor`` receives every order once — on the local driver
  (native mode: the topic is the queue) and on SQS (Dapr mode: through the snssqs component,
  SNS on moto, as daprd publishes).
- Per-priority topics through the API, then a backlog served high first.
- Bad requests answered with daprd's codes (dapr ``pkg/api/http/http.go`` ``onPublish``,
  ``pkg/api/errors/pubsub.go``, ``pkg/api/http/middlewares.go``), nothing enqueued.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto.runtime.v1.pubsub_pb2 import PublishEventRequest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tests.e2e.helpers import assert_each_order_once, journal_records, queue_rows
from tests.support.app import RecordingApp, Reply
from tests.support.app_venv import running_app
from tests.support.dapr_resources import Sns, dapr_config, snssqs_component, write_resources
from tests.support.moto_server import MotoServer
from tests.support.quickstarts import (
    CHECKOUTS,
    ORDERS,
    QUICKSTARTS,
    checkout_to_subscriber,
    publish_api,
)
from tests.support.servers import free_port
from tests.support.sidecar import local_config, start_sidecar


@pytest.mark.local
@pytest.mark.parametrize("checkout", CHECKOUTS)
def test_quickstart_checkout_to_order_processor_on_local(tmp_path: Path, checkout: str) -> None:
    api = publish_api(app_id="checkout")
    with running_app(QUICKSTARTS / "http-order-processor", ["{python}", "app.py"],
                     tmp_path / "app.log") as app:
        config = local_config(tmp_path, app.url, queues=[{"name": "orders", "route": "/orders"}],
                              app={"url": app.url, "pubsub_name": "orderpubsub"},
                              publish_api=api)
        output, received = checkout_to_subscriber(tmp_path, config, checkout, api, app)
    assert output.count("Published data") == ORDERS
    assert_each_order_once(received, app, tmp_path / "journal", ORDERS)


@pytest.mark.sqs
@pytest.mark.parametrize("checkout", CHECKOUTS)
def test_quickstart_checkout_to_order_processor_on_sqs(
    tmp_path: Path, sns: Sns, moto_server: MotoServer, checkout: str
) -> None:
    app_id = f"order-processor-{uuid.uuid4().hex[:8]}"
    resources = write_resources(tmp_path / "resources",
                                snssqs_component("orderpubsub", moto_server))
    api = publish_api()
    with running_app(QUICKSTARTS / "http-order-processor", ["{python}", "app.py"],
                     tmp_path / "app.log") as app:
        config = dapr_config(tmp_path, resources, app_id, app.url, publish_api=api)
        _, received = checkout_to_subscriber(tmp_path, config, checkout, api, app,
                                             ready_timeout_s=60)
    assert_each_order_once(received, app, tmp_path / "journal", ORDERS)
    assert sns.visible(f"{app_id}-orders") == 0


@pytest.mark.local
def test_per_priority_topics_then_backlog_served_high_first(tmp_path: Path) -> None:
    def slow_first(received: Any) -> Reply:
        return Reply(delay_s=2.0 if received.event["data"] == "warm-up" else 0.0)

    api = publish_api(grpc_port=None)
    base = f"http://127.0.0.1:{api['http_port']}/v1.0/publish/pubsub"
    with RecordingApp(behaviour=slow_first) as app:
        config = local_config(tmp_path, app.url, concurrency=1, publish_api=api)
        sidecar = start_sidecar(tmp_path, config)
        try:
            with httpx.Client(timeout=10) as client:
                assert client.post(f"{base}/low", content="warm-up",
                                   headers={"Content-Type": "text/plain"}).status_code == 204
                app.wait_for(1)  # the only worker is busy: what follows waits
                for queue in ("low", "low", "normal", "high", "low", "high", "normal", "high"):
                    answer = client.post(f"{base}/{queue}", json={"queue": queue})
                    assert answer.status_code == 204, answer.text
            app.wait_for(9, timeout_s=30)
        finally:
            assert sidecar.stop() == 0
    served = [event["data"]["queue"] for event in app.events()[1:]]
    assert served == ["high"] * 3 + ["normal"] * 2 + ["low"] * 3
    first = app.events()[1]
    assert (first["topic"], first["pubsubname"], first["type"]) == (
        "high", "pubsub", "com.dapr.event.sent")


@pytest.mark.local
def test_bad_requests_get_daprds_codes_and_nothing_is_enqueued(tmp_path: Path) -> None:
    api = publish_api(api_token="pub-s3cret", max_body_bytes=1024)
    url = f"http://127.0.0.1:{api['http_port']}"
    token = {"dapr-api-token": "pub-s3cret"}
    with RecordingApp() as app:
        config = local_config(tmp_path, app.url, publish_api=api)
        sidecar = start_sidecar(tmp_path, config)
        try:
            with httpx.Client(base_url=url, timeout=10) as client:
                answers = _bad_requests(client, token)
                valid = client.post("/v1.0/publish/pubsub/high", headers=token,
                                    content=b'{"orderId": ', params={"metadata.x": "1"},
                                    )
                health = client.get("/v1.0/healthz/outbound")  # no token needed
            grpc_codes = _bad_grpc_requests(api["grpc_port"])
            app.wait_for(1)
            time.sleep(1)  # anything enqueued by a bad request would arrive now
        finally:
            assert sidecar.stop() == 0
    assert answers["unknown pubsub"][0] == 404
    assert answers["unknown pubsub"][1]["errorCode"] == "ERR_PUBSUB_NOT_FOUND"
    assert answers["unknown pubsub"][1]["message"] == "pubsub nope is not found"
    assert answers["unknown topic"][0] == 404
    assert answers["unknown topic"][1]["errorCode"] == "ERR_PUBSUB_TOPIC_NOT_FOUND"
    assert answers["invalid cloudevent"][0] == 500
    assert answers["invalid cloudevent"][1]["errorCode"] == "ERR_PUBSUB_CLOUD_EVENTS_SER"
    assert answers["too large"][0] == 500
    assert answers["too large"][1]["errorCode"] == "ERR_PUBSUB_PUBLISH_MESSAGE"
    assert answers["too large"][1]["message"].endswith(": stream too large")
    assert answers["bad rawPayload"][0] == 400
    assert answers["bad rawPayload"][1]["errorCode"] == "ERR_PUBSUB_REQUEST_METADATA"
    assert answers["wrong token"] == (401, "invalid api token\n")
    assert answers["no token"] == (401, "invalid api token\n")
    assert grpc_codes == {"unknown pubsub": ("INVALID_ARGUMENT", "DAPR_PUBSUB_NOT_FOUND"),
                          "wrong token": ("UNAUTHENTICATED", "Unauthorized"),
                          "too large": ("RESOURCE_EXHAUSTED", None)}
    # invalid JSON sent as application/json: published as text, 204 (daprd does the same)
    assert valid.status_code == 204
    assert health.status_code == 204
    assert [event["data"] for event in app.events()] == ['{"orderId": ']  # the valid one only
    assert len(journal_records(tmp_path / "journal")) == 1
    assert queue_rows(tmp_path / "queues.db", "nope") == []


@pytest.mark.local
def test_daprd_api_flags_serve_the_publish_api(tmp_path: Path) -> None:
    """``--dapr-http-port``/``--dapr-grpc-port``/``--max-body-size`` as on a daprd command line,
    with no publish_api: section: both ports serve, the size limit holds."""
    http_port, grpc_port = free_port(), free_port()
    with RecordingApp() as app:
        sidecar = start_sidecar(tmp_path, local_config(tmp_path, app.url), args=(
            "--dapr-http-port", str(http_port), "--dapr-grpc-port", str(grpc_port),
            "--max-body-size", "1Ki"))
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=10) as client:
                too_large = client.post("/v1.0/publish/pubsub/high", content=b"x" * 1025)
                fits = client.post("/v1.0/publish/pubsub/high", content=b"x" * 1000)
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                dapr_pb2_grpc.DaprStub(channel).PublishEvent(
                    PublishEventRequest(pubsub_name="pubsub", topic="normal", data=b"{}",
                                        data_content_type="application/json"), timeout=10)
            app.wait_for(2)
        finally:
            assert sidecar.stop() == 0
    assert too_large.status_code == 500, too_large.text
    assert too_large.json()["message"].endswith(": stream too large")
    assert fits.status_code == 204
    assert sorted(event["topic"] for event in app.events()) == ["high", "normal"]


def _bad_requests(client: httpx.Client, token: dict[str, str]) -> dict[str, Any]:
    def call(path: str, body: bytes, headers: dict[str, str],
             params: dict[str, str] | None = None) -> tuple[int, Any]:
        answer = client.post(path, content=body, headers=headers, params=params)
        if answer.headers.get("content-type", "").startswith("application/json"):
            return answer.status_code, answer.json()
        return answer.status_code, answer.text

    ce = {**token, "Content-Type": "application/cloudevents+json"}
    return {
        "unknown pubsub": call("/v1.0/publish/nope/high", b"{}", token),
        "unknown topic": call("/v1.0/publish/pubsub/nope", b"{}", token),
        "invalid cloudevent": call("/v1.0/publish/pubsub/high", b"{nope", ce),
        "too large": call("/v1.0/publish/pubsub/high", b"x" * 1025, token),
        "bad rawPayload": call("/v1.0/publish/pubsub/high", b"{}", token,
                               {"metadata.rawPayload": "maybe"}),
        "wrong token": call("/v1.0/publish/pubsub/high", b"{}", {"dapr-api-token": "no"}),
        "no token": call("/v1.0/publish/pubsub/high", b"{}", {}),
    }


def _bad_grpc_requests(port: int) -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = dapr_pb2_grpc.DaprStub(channel)
        cases = {
            "unknown pubsub": (PublishEventRequest(pubsub_name="nope", topic="high", data=b"{}"),
                               (("dapr-api-token", "pub-s3cret"),)),
            "wrong token": (PublishEventRequest(pubsub_name="pubsub", topic="high", data=b"{}"),
                            (("dapr-api-token", "no"),)),
            "too large": (PublishEventRequest(pubsub_name="pubsub", topic="high",
                                              data=b"x" * 2048),
                          (("dapr-api-token", "pub-s3cret"),)),
        }
        for name, (request, metadata) in cases.items():
            with pytest.raises(grpc.RpcError) as caught:
                stub.PublishEvent(request, metadata=metadata, timeout=10)
            error: Any = caught.value
            status = rpc_status.from_call(error)
            reason = None
            for detail in status.details if status else ():
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    reason = info.reason
            found[name] = (error.code().name, reason)
    return found
