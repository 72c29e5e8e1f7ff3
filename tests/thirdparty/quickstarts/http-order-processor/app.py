# Equivalent of dapr/quickstarts pub_sub/python/http/order-processor/app.py (see README).
import json
import os

from flask import Flask, jsonify, request

app = Flask(__name__)
app_port = os.getenv('APP_PORT', '6001')


@app.route('/dapr/subscribe', methods=['GET'])
def subscribe():
    # programmatic subscription, v1 shape: one route per topic
    subscriptions = [{'pubsubname': 'orderpubsub', 'topic': 'orders', 'route': 'orders'}]
    print('Dapr pub/sub is subscribed to: ' + json.dumps(subscriptions))
    return jsonify(subscriptions)


@app.route('/orders', methods=['POST'])
def orders_subscriber():
    order_id = request.json['data']['orderId']
    print('Subscriber received : ' + json.dumps(order_id), flush=True)
    return json.dumps({'success': True}), 200, {'ContentType': 'application/json'}


app.run(port=app_port)
