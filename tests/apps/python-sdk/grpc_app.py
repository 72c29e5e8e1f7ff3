"""A Dapr Python SDK app on dapr-ext-grpc (``App``): subscribes to "orders" and, for each
order, publishes a shipment with ``DaprClient``, which it receives on "shipments" too.
Run: python grpc_app.py (APP_PORT, DAPR_HTTP_PORT, DAPR_GRPC_PORT from the env)."""

import json
import os

from cloudevents.sdk.event import v1
from dapr.clients import DaprClient
from dapr.ext.grpc import App

app = App()


@app.subscribe(pubsub_name="orderpubsub", topic="orders")
def order(event: v1.Event) -> None:
    order_id = json.loads(event.Data())["orderId"]
    print(f"received order {order_id}", flush=True)
    with DaprClient() as client:
        client.publish_event("orderpubsub", "shipments", json.dumps({"orderId": order_id}),
                             data_content_type="application/json")


@app.subscribe(pubsub_name="orderpubsub", topic="shipments")
def shipment(event: v1.Event) -> None:
    print(f"received shipment {json.loads(event.Data())['orderId']}", flush=True)


app.run(int(os.environ["APP_PORT"]))
