"""A Dapr Python SDK publisher (``DaprClient`` over gRPC): orders 1..5 to "orders"."""

import json

from dapr.clients import DaprClient

with DaprClient() as client:
    for order_id in range(1, 6):
        client.publish_event("orderpubsub", "orders", json.dumps({"orderId": order_id}),
                             data_content_type="application/json")
        print(f"published order {order_id}", flush=True)
