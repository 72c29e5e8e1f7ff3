"""A Dapr Python SDK app on dapr-ext-fastapi (``DaprApp``): subscribes to "orders" and, for
each order, publishes a shipment with ``DaprClient``, which it receives on "shipments" too.
Run: uvicorn fastapi_app:app --port $APP_PORT (DAPR_HTTP_PORT, DAPR_GRPC_PORT from the env)."""

import json

from dapr.clients import DaprClient
from dapr.ext.fastapi import DaprApp
from fastapi import Body, FastAPI

app = FastAPI()
dapr_app = DaprApp(app)


@dapr_app.subscribe(pubsub="orderpubsub", topic="orders")
def order(event=Body()):  # noqa: B008 - FastAPI's way of taking the body
    order_id = event["data"]["orderId"]
    print(f"received order {order_id}", flush=True)
    with DaprClient() as client:
        client.publish_event("orderpubsub", "shipments", json.dumps({"orderId": order_id}),
                             data_content_type="application/json")
    return {"status": "SUCCESS"}


@dapr_app.subscribe(pubsub="orderpubsub", topic="shipments")
def shipment(event=Body()):  # noqa: B008
    print(f"received shipment {event['data']['orderId']}", flush=True)
    return {"status": "SUCCESS"}
