"""The sidecar started with daprd's command lines, as ``dapr run`` writes them (dapr/cli
``pkg/standalone/run.go``: ``--app-max-concurrency -1``, ``--metrics-port``,
``--placement-host-address``, ``--config ~/.dapr/config.yaml``, ``--components-path``), the
binary name changed only; on Redis (the quickstart's ``pubsub.redis`` component).

- The metadata API answers field by field as daprd's: the JSON of dapr
  ``pkg/api/http/metadata.go`` (``metadataResponse``) filled as ``pkg/api/universal/
  metadata.go`` fills it; gRPC ``GetMetadata`` the same ``GetMetadataResponse``; the API
  token as for publishing; ``POST /v1.0/shutdown`` stops the sidecar as SIGTERM does.
- Two sidecars on one host, each on its own ``--metrics-port``, both run and deliver; a
  publisher-only one (no ``--app-port``) serves the publish API and metadata at once. What
  it publishes with a ``baggage`` header reaches both apps with that header (tracing on, as
  ``dapr init`` sets it), which daprd up to 1.18 drops at the queue.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto.runtime.v1.metadata_pb2 import GetMetadataRequest, PubsubSubscriptionType

from priority_pubsub import __version__
from tests.support.app import Received, RecordingApp, Reply
from tests.support.daprd import Daprd, redis_resources
from tests.support.redis_server import OwnRedis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis
def _subscribe_programmatically(received: Received) -> Reply:
    if received.path == "/dapr/subscribe":
        return Reply(body=json.dumps([{"pubsubname": "orderpubsub", "topic": "payments",
                                       "route": "/payments"}]),
                     headers={"Content-Type": "application/json"})
    return Reply()


ORDERS_SUBSCRIPTION = {
    "apiVersion": "dapr.io/v2alpha1", "kind": "Subscription", "metadata": {"name": "orders"},
    "spec": {"pubsubname": "orderpubsub", "topic": "orders", "deadLetterTopic": "poisoned",
             "routes": {"rules": [{"match": 'event.type == "urgent"', "path": "/urgent"}],
                        "default": "/orders"}},
}


def test_metadata_answers_field_by_field_as_daprd(tmp_path: Path, own_redis: OwnRedis) -> None:
    app_id = f"shop-{uuid.uuid4().hex[:6]}"
    resources = redis_resources(tmp_path / "resources", own_redis.port, [ORDERS_SUBSCRIPTION])
    token_config = tmp_path / "token.yaml"
    token_config.write_text(yaml.safe_dump({"publish_api": {"api_token": "meta-s3cret"}}))
    with RecordingApp(_subscribe_programmatically) as app:
        daprd = Daprd(tmp_path, app_id, resources, app.port, "--enable-app-health-check",
                      "--app-health-probe-interval", "2", "--app-health-probe-timeout", "500",
                      "--app-health-threshold", "4", "--app-max-concurrency", "3",
                      env={"PRIORITY_PUBSUB_CONFIG": str(token_config)})
        try:
            daprd.wait_api()
            token = {"dapr-api-token": "meta-s3cret"}
            with httpx.Client(base_url=daprd.api, timeout=5) as client:
                refused = client.get("/v1.0/metadata")
                assert client.put("/v1.0/metadata/appPID", content="4242",
                                  headers=token).status_code == 204
                answer = client.get("/v1.0/metadata", headers=token)
            over_grpc = _grpc_metadata(daprd.grpc_port, "meta-s3cret")
            with pytest.raises(grpc.RpcError) as no_token:
                _grpc_metadata(daprd.grpc_port, "")
            stopped = httpx.post(f"{daprd.api}/v1.0/shutdown", headers=token, timeout=5)
            code = daprd.process.wait(30)
        finally:
            daprd.stop()
    assert refused.status_code == 401
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "id": app_id,
        "runtimeVersion": __version__,
        "components": [{"name": "orderpubsub", "type": "pubsub.redis", "version": "v1"},
                       {"name": "statestore", "type": "state.redis", "version": "v1"}],
        "extended": {"appPID": "4242", "daprRuntimeVersion": __version__},
        "subscriptions": [
            {"pubsubname": "orderpubsub", "topic": "orders",
             "rules": [{"match": 'event.type == "urgent"', "path": "/urgent"},
                       {"path": "/orders"}],
             "deadLetterTopic": "poisoned", "type": "DECLARATIVE"},
            {"pubsubname": "orderpubsub", "topic": "payments", "rules": [{"path": "/payments"}],
             "deadLetterTopic": "", "type": "PROGRAMMATIC"},
        ],
        "appConnectionProperties": {
            "port": app.port, "protocol": "http", "channelAddress": "127.0.0.1",
            "maxConcurrency": 3,
            "health": {"healthCheckPath": "/healthz", "healthProbeInterval": "2s",
                       "healthProbeTimeout": "500ms", "healthThreshold": 4}},
        "actorRuntime": {"runtimeStatus": "DISABLED", "hostReady": False},
    }
    assert over_grpc.id == app_id
    assert over_grpc.runtime_version == __version__
    assert [(c.name, c.type, c.version) for c in over_grpc.registered_components] == [
        ("orderpubsub", "pubsub.redis", "v1"), ("statestore", "state.redis", "v1")]
    orders, payments = over_grpc.subscriptions
    assert [(r.match, r.path) for r in orders.rules.rules] == [
        ('event.type == "urgent"', "/urgent"), ("", "/orders")]
    assert (orders.dead_letter_topic, orders.type) == (
        "poisoned", PubsubSubscriptionType.DECLARATIVE)
    assert (payments.topic, payments.type) == ("payments", PubsubSubscriptionType.PROGRAMMATIC)
    connection = over_grpc.app_connection_properties
    assert (connection.port, connection.protocol, connection.max_concurrency) == (
        app.port, "http", 3)
    assert (connection.health.health_probe_timeout, connection.health.health_threshold) == (
        "500ms", 4)
    assert no_token.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stopped.status_code == 204
    assert code == 0
    assert "stopped" in daprd.logs()  # the ordered stop of SIGTERM, not a kill


def _grpc_metadata(port: int, token: str) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = dapr_pb2_grpc.DaprStub(channel)
        metadata = [("dapr-api-token", token)] if token else []
        return stub.GetMetadata(GetMetadataRequest(), metadata=metadata, timeout=5)


def test_two_dapr_run_sidecars_and_a_publisher_only_one_run_on_one_host(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    subscription = {**ORDERS_SUBSCRIPTION, "spec": {
        "pubsubname": "orderpubsub", "topic": "orders", "routes": {"default": "/orders"}},
        "scopes": ["orders-a", "orders-b"]}
    resources = redis_resources(tmp_path / "resources", own_redis.port, [subscription])
    with RecordingApp() as app_a, RecordingApp() as app_b:
        first = Daprd(tmp_path, "orders-a", resources, app_a.port)
        second = Daprd(tmp_path, "orders-b", resources, app_b.port)
        publisher = Daprd(tmp_path, "checkout", resources, None)
        started = time.monotonic()
        try:
            for sidecar in (first, second, publisher):
                sidecar.wait_api()
            publisher_ready_s = time.monotonic() - started
            for sidecar in (first, second):
                wait_until(lambda s=sidecar: _ready(s.metrics_port), 30)
            for order in range(3):
                answer = httpx.post(f"{publisher.api}/v1.0/publish/orderpubsub/orders",
                                    json={"orderId": order},
                                    headers={"baggage": f"order={order}"}, timeout=5)
                assert answer.status_code == 204, answer.text
            for app in (app_a, app_b):
                wait_until(lambda a=app: len(_orders(a)) >= 3, 30)
            publisher_metadata = httpx.get(f"{publisher.api}/v1.0/metadata", timeout=5).json()
            metrics = [httpx.get(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=5)
                       for s in (first, second)]
        finally:
            codes = [sidecar.stop() for sidecar in (first, second, publisher)]
    assert codes == [0, 0, 0], "\n".join(s.logs()[-2000:] for s in (first, second, publisher))
    assert all(m.status_code == 200 for m in metrics)
    for app in (app_a, app_b):  # one consumer group per app id: each app gets every order
        assert sorted(r.event["data"]["orderId"] for r in _orders(app)) == [0, 1, 2]
        assert {r.event["data"]["orderId"]: r.headers.get("baggage") for r in _orders(app)} == {
            order: f"order={order}" for order in range(3)}
    assert publisher_ready_s < 30  # no wait for an app that does not exist
    assert publisher_metadata["appConnectionProperties"] == {
        "protocol": "http", "channelAddress": "127.0.0.1", "maxConcurrency": 4}
    assert "subscriptions" not in publisher_metadata  # the Subscription is scoped to others
    assert [c["name"] for c in publisher_metadata["components"]] == ["orderpubsub",
                                                                     "statestore"]
    logs = first.logs()
    for flag in ("--placement-host-address", "--scheduler-host-address"):
        assert logs.count(f"daprd flag {flag} is ignored") == 1, logs[-3000:]


def _orders(app: RecordingApp) -> list[Received]:
    """What reached the route (``GET /dapr/subscribe`` at start is not an order)."""
    return [r for r in list(app.received) if r.path == "/orders"]


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.local
def test_block_shutdown_keeps_delivering_after_sigterm_then_stops(tmp_path: Path) -> None:
    """``--dapr-block-shutdown-duration 3s``: after SIGTERM the sidecar keeps serving its API
    and delivering for the duration (an app finishing its work may still publish), then
    stops as usual."""
    from tests.support.quickstarts import publish_api
    from tests.support.sidecar import local_config, start_sidecar

    api = publish_api(grpc_port=None)
    with RecordingApp() as app:
        config = local_config(tmp_path, app.url, publish_api=api)
        sidecar = start_sidecar(tmp_path, config, args=(
            "--dapr-block-shutdown-duration", "3s"))
        stopped_at = time.monotonic()
        sidecar.terminate()
        time.sleep(1)
        answer = httpx.post(f"http://127.0.0.1:{api['http_port']}/v1.0/publish/pubsub/high",
                            json={"late": True}, timeout=5)
        wait_until(lambda: len(app.received) == 1, 10)
        code = sidecar.wait(30)
    assert answer.status_code == 204
    assert app.events()[0]["data"] == {"late": True}
    assert code == 0
    assert time.monotonic() - stopped_at >= 3
