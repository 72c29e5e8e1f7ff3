# Equivalent of dapr/quickstarts pub_sub/python/sdk/order-processor-fastapi/app.py (see README).
from dapr.ext.fastapi import DaprApp
from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()
dapr_app = DaprApp(app)


class CloudEvent(BaseModel):
    # every field is required: a request lacking one is answered 422 by FastAPI
    datacontenttype: str
    source: str
    topic: str
    pubsubname: str
    data: dict
    id: str
    specversion: str
    tracestate: str
    type: str
    traceid: str


# DaprApp registers POST /events/orderpubsub/orders and lists it in GET /dapr/subscribe
@dapr_app.subscribe(pubsub='orderpubsub', topic='orders')
def orders_subscriber(event: CloudEvent):
    print('Subscriber received : %s' % event.data['orderId'], flush=True)
    return {'success': True}
