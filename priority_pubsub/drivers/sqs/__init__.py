"""The SQS driver (``driver``) with its boto3 API client (``api``) and SNS helpers (``sns``).

The package re-exports the driver class, so ``priority_pubsub.drivers.sqs:SqsDriver`` (the entry
point) names it. May import ``drivers.base``/``batching``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.sqs.driver import SqsDriver

__all__ = ["SqsDriver"]
