"""The GCP Pub/Sub driver (``driver``) with its resource names and error mapping (``names``).

The package re-exports the driver class, so ``priority_pubsub.drivers.gcp_pubsub:PubSubDriver``
(the entry point) names it. May import ``drivers.base``/``batching``, ``settings``,
``telemetry``, ``core``.
"""

from priority_pubsub.drivers.gcp_pubsub.driver import PubSubDriver

__all__ = ["PubSubDriver"]
