"""``pubsub.rabbitmq``: Dapr's RabbitMQ component mapped onto the ``rabbitmq`` driver.

components-contrib ``pubsub/rabbitmq/`` (``rabbitmq.go``, ``metadata.go``,
``metadata.yaml``): each topic is a fanout exchange named after it; a subscriber's queue is
``{consumerID}-{topic}`` bound to it; the body is the message and the AMQP headers (plus
message id, correlation id, type, content type) its metadata. The driver's ``layout: dapr``
declares exactly that, so the sidecar's queue names are the topics.

Decisions where daprd's defaults would lose messages here:

* ``deletedWhenUnused`` (Dapr's default ``true``) is refused: an auto-delete queue vanishes,
  with its messages, whenever its last consumer goes (a sidecar restart, a reconnect, the
  moment between two waits). The queue is declared without auto-delete and a warning says
  so; set ``deletedWhenUnused: "false"`` to silence it. A queue daprd already created with
  auto-delete is refused by the driver at start with that advice (delete it once).
* ``requeueInFailure`` (default ``false``): daprd nacks a failed message without requeue, so
  it is gone (or, with a subscription ``deadLetterTopic``, dead-lettered). Mapped as
  ``retry.max_attempts: 1``. With ``true`` failures are retried, with this project's backoff
  and ``retry.max_attempts`` (daprd requeues at once, without end).
* ``prefetchCount`` and ``autoAck: true`` are read and not honoured (warned): at most the
  free slots are in hand, and a message is acked only after the app's answer.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.components import ComponentContext, ComponentKind, Mapped, Unwrapped
from priority_pubsub.transforms.base import Payload

PERSISTENT_DELIVERY_MODE = "2"
_HONOURED = frozenset({
    "connectionString", "host", "hostname", "username", "password", "protocol", "consumerID",
    "durable", "deletedWhenUnused", "deliveryMode", "requeueInFailure", "prefetchCount",
    "autoAck", "queueType", "exchangeKind",
})


class RabbitMQ(ComponentKind):
    type = "pubsub.rabbitmq"
    driver = "rabbitmq"

    def map(self, component: ComponentContext) -> Mapped:
        md = component.metadata
        driver: dict[str, Any] = {
            "type": self.driver, "url": _url(component), "layout": "dapr",
            "consumer_id": component.consumer_id,
            "durable": component.flag("durable"),  # Dapr's default: not durable
            "delivery_mode": _delivery_mode(component),
        }
        if md.get("queueType"):
            driver["queue_type"] = md["queueType"].strip().lower()
        settings: dict[str, Any] = {}
        if not component.flag("requeueInFailure"):
            settings["retry"] = {"max_attempts": 1}  # daprd's nack without requeue
        return Mapped(driver, settings, _HONOURED, warnings=tuple(_warnings(component)))

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return topic  # the driver's dapr layout reads it from {consumerID}-{topic}

    def unwrap(self, component: ComponentContext, payload: Payload) -> Unwrapped:
        metadata = {f"metadata.{name}": value for name, value in payload.attributes.items()}
        return Unwrapped(payload.body, None, metadata, payload.content_type)


def _url(component: ComponentContext) -> str:
    md = component.metadata
    for key in ("connectionString", "host"):  # host: the key before connectionString
        if md.get(key):
            return md[key]
    if not md.get("hostname"):
        raise ConfigError(f"{component.source}: Component {component.name}: metadata "
                          "connectionString (or hostname) is required for pubsub.rabbitmq")
    credentials = ""
    if md.get("username"):
        credentials = quote(md["username"], safe="")
        if md.get("password"):
            credentials += ":" + quote(md["password"], safe="")
        credentials += "@"
    return f"{md.get('protocol') or 'amqp'}://{credentials}{md['hostname']}"


def _delivery_mode(component: ComponentContext) -> str:
    text = (component.metadata.get("deliveryMode") or "0").strip()
    if text not in ("0", "1", "2"):
        raise ConfigError(f"{component.source}: Component {component.name}: metadata "
                          f"deliveryMode: 0, 1 or 2 (2 = persistent), not {text!r}")
    return "persistent" if text == PERSISTENT_DELIVERY_MODE else "transient"


def _warnings(component: ComponentContext) -> list[str]:
    md = component.metadata
    where = f"{component.source}: Component {component.name}: metadata"
    warnings = []
    if md.get("deletedWhenUnused", "true").strip().lower() not in ("false", "0", "no", "off"):
        warnings.append(
            f"{where} deletedWhenUnused is true (Dapr's default) and not honoured: an "
            "auto-delete queue loses its messages when its consumer goes; the queues are "
            "declared without auto-delete (set deletedWhenUnused: \"false\" to say so)")
    if md.get("prefetchCount"):
        warnings.append(f"{where} prefetchCount is read but not honoured: at most the free "
                        "slots are in hand (the prefetch follows them)")
    if component.flag("autoAck"):
        warnings.append(f"{where} autoAck is read but not honoured: a message is acked only "
                        "after the app's answer")
    kind = md.get("exchangeKind", "fanout").strip().lower()
    if kind != "fanout":
        warnings.append(f"{where} exchangeKind {kind!r} is not honoured: fanout exchanges "
                        "(Dapr's default) are declared")
    return warnings
