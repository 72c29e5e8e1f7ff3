"""W3C baggage from a publish to the app, through the real publish API and sidecar on the
local driver. daprd up to 1.18 drops it at the queue (dapr #10302); here
it rides in the CloudEvent's ``baggage`` field (dapr #10385's design) and comes back on
delivery byte for byte: the ``baggage`` header of an HTTP app's request, the ``baggage``
metadata of a gRPC app's ``OnTopicEvent`` — whether it was published over HTTP (the
``baggage`` header) or gRPC (``PublishEvent`` metadata). A publish without baggage delivers
none; the largest valid one (8192 bytes) passes both APIs; one daprd would refuse is refused
as daprd refuses it, nothing enqueued. Streams: ``test_dapr_streaming.py``; spans:
``test_tracing.py``; Dapr mode: ``test_dapr_sidecar_api.py``, ``test_dapr_bulk.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto.runtime.v1.pubsub_pb2 import PublishEventRequest

from tests.e2e.helpers import queue_rows
from tests.support.app import RecordingApp
from tests.support.grpc_app import GrpcApp
from tests.support.quickstarts import publish_api
from tests.support.sidecar import local_config, start_sidecar
from tests.support.waiting import wait_until

pytestmark = pytest.mark.local
OVER_HTTP = "tenant=acme,req=42"
OVER_GRPC = "tenant=acme;ttl=60, user=J%C3%B6rg,req=43"
"""Properties, spaces and an escape: anything re-encoding it on the way would show."""
LARGEST = "k=" + "x" * 8190
"""W3C's limit, 8192 bytes: over aiohttp's own header limit (8190) and gRPC's 8 KiB of
metadata, which the publish API raises."""


def _publish_http(api: dict[str, Any], via: str, baggage: str | None) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{api['http_port']}/v1.0/publish/pubsub/high",
                      json={"via": via}, headers={"baggage": baggage} if baggage else {},
                      timeout=10)


def _publish_grpc(api: dict[str, Any], via: str, baggage: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{api['grpc_port']}") as channel:
        dapr_pb2_grpc.DaprStub(channel).PublishEvent(
            PublishEventRequest(pubsub_name="pubsub", topic="high",
                                data=json.dumps({"via": via}).encode(),
                                data_content_type="application/json"),
            metadata=(("baggage", baggage),), timeout=10)


def _publish_three(api: dict[str, Any]) -> None:
    """``via`` says how each was published: baggage over HTTP, over gRPC, and none."""
    for via, baggage in (("http", OVER_HTTP), ("none", None)):
        answer = _publish_http(api, via, baggage)
        assert answer.status_code == 204, answer.text
    _publish_grpc(api, "grpc", OVER_GRPC)


def test_an_http_app_gets_the_published_baggage_header(tmp_path: Path) -> None:
    api = publish_api()
    with RecordingApp() as app:
        sidecar = start_sidecar(tmp_path, local_config(tmp_path, app.url, publish_api=api))
        try:
            _publish_three(api)
            assert _publish_http(api, "http-largest", LARGEST).status_code == 204
            _publish_grpc(api, "grpc-largest", LARGEST)
            received = app.wait_for(5)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    by_via = {r.event["data"]["via"]: r for r in received}
    assert {via: r.headers.get("baggage") for via, r in by_via.items()} == {
        "http": OVER_HTTP, "grpc": OVER_GRPC, "none": None, "http-largest": LARGEST,
        "grpc-largest": LARGEST}
    assert by_via["grpc"].event["baggage"] == OVER_GRPC  # the CloudEvent's field
    assert "baggage" not in by_via["none"].event


def test_a_grpc_app_gets_the_published_baggage_as_metadata(tmp_path: Path) -> None:
    api = publish_api()
    with GrpcApp() as app:
        sidecar = start_sidecar(tmp_path, local_config(tmp_path, app.url, publish_api=api))
        try:
            _publish_three(api)
            wait_until(lambda: len(app.calls) == 3, 20)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    by_via = {json.loads(call.request.data)["via"]: call for call in app.calls}
    assert {via: c.metadata.get("baggage") for via, c in by_via.items()} == {
        "http": OVER_HTTP, "grpc": OVER_GRPC, "none": None}
    # and in the event's extensions, as every CloudEvent field daprd does not send as its own
    assert by_via["grpc"].request.extensions["baggage"] == OVER_GRPC
    assert "baggage" not in by_via["none"].request.extensions


TOO_MANY = ",".join(f"k{n}=v" for n in range(181))
REFUSED = {  # as OpenTelemetry Go's baggage.Parse words it, after daprd's prefix
    "invalid-baggage": 'invalid baggage list-member: "invalid-baggage"',
    "tenant=acme,": 'invalid baggage list-member: ""',
    "tenant=a c": 'invalid value: "a c"',
    LARGEST + "x": "baggage-string too large: 8193",
    TOO_MANY: "too many list-members in baggage-string: 181 > 180",
}


def test_baggage_daprd_would_refuse_is_refused_and_nothing_is_enqueued(tmp_path: Path) -> None:
    """daprd's tracing middleware and interceptor: HTTP 400 with the reason as text, gRPC
    INVALID_ARGUMENT with it; health is exempt."""
    api = publish_api()
    with RecordingApp() as app:
        sidecar = start_sidecar(tmp_path, local_config(tmp_path, app.url, publish_api=api))
        try:
            over_http = {bad: _publish_http(api, "refused", bad) for bad in REFUSED}
            over_grpc = {}
            for bad in REFUSED:
                with pytest.raises(grpc.RpcError) as caught:
                    _publish_grpc(api, "refused", bad)
                error: Any = caught.value
                over_grpc[bad] = (error.code(), error.details())
            health = httpx.get(f"http://127.0.0.1:{api['http_port']}/v1.0/healthz",
                               headers={"baggage": "invalid-baggage"}, timeout=5)
            metadata = httpx.get(f"http://127.0.0.1:{api['http_port']}/v1.0/metadata",
                                 headers={"baggage": "invalid-baggage"}, timeout=5)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    for bad, reason in REFUSED.items():
        answer = over_http[bad]
        assert (answer.status_code, answer.text) == (400, f"invalid baggage header: {reason}\n")
        assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert over_grpc[bad] == (grpc.StatusCode.INVALID_ARGUMENT,
                                  f"invalid baggage header: {reason}")
    assert health.status_code == 204
    assert metadata.status_code == 400  # daprd's middleware covers every API but health
    assert app.received == []
    assert queue_rows(tmp_path / "queues.db", "high") == []
