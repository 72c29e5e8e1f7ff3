"""Entity names as Dapr's components derive them, so the sidecar finds the same queues.

Sources: components-contrib ``pubsub/aws/snssqs/snssqs.go`` (``nameToAWSSanitizedName``:
keep ``[a-zA-Z0-9_-]``, at most 80 characters, ``.fifo`` re-attached for FIFO) and
``pubsub/gcp/pubsub/pubsub.go`` (``BuildSubscriptionID``: ``{consumerID}-{topic}``).
"""

from __future__ import annotations

import re

AWS_MAX_NAME = 80
FIFO_SUFFIX = ".fifo"
_NOT_AWS = re.compile(r"[^a-zA-Z0-9_-]")


def aws_sanitized(name: str, fifo: bool = False) -> str:
    """An SNS topic / SQS queue name as the snssqs component sanitises it."""
    has_suffix = fifo and name.endswith(FIFO_SUFFIX)
    if has_suffix:
        name = name[: -len(FIFO_SUFFIX)]
    kept = _NOT_AWS.sub("", name)[:AWS_MAX_NAME]
    if fifo:
        return kept[: AWS_MAX_NAME - len(FIFO_SUFFIX)] + FIFO_SUFFIX
    return kept


def per_topic_queue(consumer_id: str, topic: str) -> str:
    """``{consumerID}-{topic}``: GCP's subscription id, and this project's snssqs per-topic
    queue (daprd shares one queue per consumer id; priorities need one per topic)."""
    return f"{consumer_id}-{topic}"
