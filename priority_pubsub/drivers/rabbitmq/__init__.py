"""The RabbitMQ driver: consume and settle (``driver``), its ``driver:`` keys (``options``),
what only the monitor asks of it (``monitoring``), its message wire format (``wire``) and
queue declarations (``topology``).

The package re-exports the driver class, so ``priority_pubsub.drivers.rabbitmq:RabbitMQDriver``
(the entry point) names it. May import ``drivers.base``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.rabbitmq.driver import RabbitMQDriver

__all__ = ["RabbitMQDriver"]
