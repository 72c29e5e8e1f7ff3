"""The SQS driver: consume and settle (``driver``), its ``driver:`` keys (``options``), its
boto3 API client (``api``) and SNS helpers (``sns``). SQS cannot list a queue nor take a
message by id, so it has no monitor-only abilities.

The package re-exports the driver class, so ``priority_pubsub.drivers.sqs:SqsDriver`` (the entry
point) names it. May import ``drivers.base``/``batching``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.sqs.driver import SqsDriver

__all__ = ["SqsDriver"]
