"""The ``driver:`` keys of ``type: rabbitmq`` (docs/brokers/rabbitmq.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from priority_pubsub.core.redaction import CredentialUrl, SecretUrl
from priority_pubsub.drivers.base import DriverOptions, deployment

__all__ = ["RENEW_FRACTION", "RabbitOptions"]

RENEW_FRACTION = 0.5
"""A delivery is renewed once older than this fraction of ``consumer_timeout_s``."""


class RabbitOptions(DriverOptions):
    """Keys under ``driver:`` for ``type: rabbitmq``."""

    url: CredentialUrl = SecretUrl("amqp://guest:guest@127.0.0.1:5672/")
    """``amqp://user:password@host:port/vhost`` (``amqps://`` for TLS; ``?heartbeat=30``...).
    A secret: printed with the password masked; ``PRIORITY_PUBSUB_DRIVER__URL`` overrides it."""
    layout: Literal["queues", "dapr"] = "queues"
    consumer_id: str | None = Field(default=None, min_length=1)
    """Dapr layout: the app id (Dapr's ``consumerID``); queues are ``{consumer_id}-{topic}``."""
    native_priority: bool = False
    """All configured names share one queue with ``x-max-priority`` (docs/brokers/rabbitmq.md)."""
    native_queue: str | None = Field(default=None, min_length=1)
    """Native mode: the queue (or Dapr topic) holding every priority; default the first name."""
    queue_type: Literal["classic", "quorum"] = "classic"
    durable: bool = True
    """Queues and exchanges the driver declares survive a broker restart."""
    delivery_mode: Literal["persistent", "transient"] = "persistent"
    """How ``publish`` sends new messages (Dapr's ``deliveryMode``: 2 persistent, else
    transient); copies (retries, dead letters) keep the mode of the message they copy."""
    hold_redelivered: bool = True
    """A delivery RabbitMQ marks redelivered (its holder's connection died: a crashed or cut
    off replica whose app may still be running it) is parked for one lease before the app
    sees it, as the other brokers keep a crashed holder's lease (docs/brokers/rabbitmq.md)."""
    consumer_timeout_s: float = Field(default=1800, gt=0)
    """The server's ``consumer_timeout``: deliveries older than half of it are renewed."""
    connect_timeout_s: float = Field(default=10, gt=0)
    call_timeout_s: float = Field(default=30, gt=0)

    @model_validator(mode="after")
    def _fits_the_deployment(self, info: ValidationInfo) -> RabbitOptions:
        if self.layout == "dapr" and not self.consumer_id:
            raise ValueError("consumer_id: required with layout: dapr (Dapr's consumerID)")
        if self.native_queue is not None and not self.native_priority:
            raise ValueError("native_queue: only with native_priority: true")
        context = deployment(info)
        renew_after_s = self.consumer_timeout_s * RENEW_FRACTION
        if context is not None and context.lease_duration_s / 3 >= renew_after_s:
            raise ValueError(
                f"lease.duration_s: with driver.consumer_timeout_s {self.consumer_timeout_s:g}"
                f" the lease keeper must extend (every duration/3) within "
                f"{renew_after_s:g} s; use a lease below {3 * renew_after_s:g} s")
        return self
