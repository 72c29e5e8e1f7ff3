# Equivalent of dapr/quickstarts pub_sub/python/sdk/order-processor/app.py (see README).
import json
import os

from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from flask import Flask, jsonify, request

app = Flask(__name__)
app_port = os.getenv('APP_PORT', '6002')


@app.route('/dapr/subscribe', methods=['GET'])
def subscribe():
    subscriptions = [{'pubsubname': 'orderpubsub', 'topic': 'orders', 'route': 'orders'}]
    print('Dapr pub/sub is subscribed to: ' + json.dumps(subscriptions))
    return jsonify(subscriptions)


@app.route('/orders', methods=['POST'])
def orders_subscriber():
    # the structured CloudEvent parsed by the CloudEvents SDK from headers + body
    event = from_http_event(HTTPMessage(dict(request.headers), request.get_data()))
    print('Subscriber received : %s' % event.get_data()['orderId'], flush=True)
    return json.dumps({'success': True}), 200, {'ContentType': 'application/json'}


app.run(port=app_port)
