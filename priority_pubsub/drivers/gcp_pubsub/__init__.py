"""The GCP Pub/Sub driver: consume and settle (``driver``), its ``driver:`` keys (``options``),
its resource names and error mapping (``names``). Pub/Sub cannot list a subscription nor take
a message by id, so it has no monitor-only abilities.

The package re-exports the driver class, so ``priority_pubsub.drivers.gcp_pubsub:PubSubDriver``
(the entry point) names it. May import ``drivers.base``/``batching``, ``settings``,
``telemetry``, ``core``.
"""

from priority_pubsub.drivers.gcp_pubsub.driver import PubSubDriver

__all__ = ["PubSubDriver"]
