"""Dapr's pub/sub quickstart subscriber apps (``tests/thirdparty/quickstarts``, see the README
there), each in its own venv, behind the real sidecar in Dapr mode: a resources directory
with a ``pubsub.aws.snssqs`` component on moto server, the subscriptions read from the app's
``GET /dapr/subscribe``, orders published as Dapr's publisher does. Every order arrives once
and is acked; the FastAPI app's model requires every CloudEvent field Dapr sends.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.e2e.helpers import assert_each_order_once
from tests.support.app_venv import running_app
from tests.support.dapr_resources import (
    Sns,
    dapr_config,
    dapr_event,
    snssqs_component,
    write_resources,
)
from tests.support.moto_server import MotoServer
from tests.support.quickstarts import FLASK, ORDERS, QUICKSTARTS, UVICORN, orders_received
from tests.support.sidecar import start_sidecar

pytestmark = pytest.mark.sqs


@pytest.mark.parametrize(("app_dir", "command"), [
    ("http-order-processor", FLASK),
    ("sdk-order-processor", FLASK),
    ("sdk-order-processor-fastapi", UVICORN),
])
def test_quickstart_subscriber_gets_every_order_once(
    tmp_path: Path, sns: Sns, moto_server: MotoServer, app_dir: str, command: list[str]
) -> None:
    app_id = f"order-processor-{uuid.uuid4().hex[:8]}"
    resources = write_resources(tmp_path / "resources",
                                snssqs_component("orderpubsub", moto_server))
    with running_app(QUICKSTARTS / app_dir, command, tmp_path / "app.log") as app:
        config = dapr_config(tmp_path, resources, app_id, app.url)
        sidecar = start_sidecar(tmp_path, config, ready_timeout_s=60)
        try:
            for order_id in range(1, ORDERS + 1):
                sns.publish("orders", dapr_event({"orderId": order_id}, topic="orders",
                                                 pubsub="orderpubsub", source="checkout-sdk"))
            received = orders_received(app, ORDERS)
        finally:
            assert sidecar.stop() == 0
    records = assert_each_order_once(received, app, tmp_path / "journal", ORDERS)
    assert {r["http_status"] for r in records} == {200}
    assert sns.visible(f"{app_id}-orders") == 0
