"""The ``driver:`` keys of ``type: sqs`` (docs/brokers/sqs.md)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from priority_pubsub.core.redaction import CredentialUrl
from priority_pubsub.drivers.base import DriverOptions, deployment
from priority_pubsub.drivers.sqs.api import MAX_WAIT_TIME_S

__all__ = ["SqsOptions"]


class SqsOptions(DriverOptions):
    """The ``driver:`` keys for ``type: sqs``."""

    region: str | None = None
    endpoint_url: CredentialUrl | None = None
    """May carry ``user:password@`` (a proxy): printed with the password masked."""
    queue_urls: dict[str, str] = Field(default_factory=dict)
    """Queue name -> URL; names not listed are resolved with GetQueueUrl at start."""
    wait_time_s: int = Field(default=MAX_WAIT_TIME_S, ge=1, le=MAX_WAIT_TIME_S)
    """The longest single long poll (SQS allows 20 s)."""
    empty_poll_wait_s: int = Field(default=0, ge=0, le=MAX_WAIT_TIME_S)
    """WaitTimeSeconds for ``wait_s=0`` receives: 1 ends short polls' false empties
    (docs/brokers/sqs.md)."""
    max_message_bytes: int = Field(default=262_144, ge=1, le=1_048_576)
    max_connections: int = Field(default=32, ge=4, le=512)
    """Worker threads and HTTP connections: long polls hold one each."""
    connect_timeout_s: float = Field(default=5, gt=0)
    close_wait_s: float = Field(default=MAX_WAIT_TIME_S + 1, ge=0)
    """How long ``close`` waits for running long polls so it can release what they catch."""
    sns_topics: dict[str, str] = Field(default_factory=dict)
    """Queue name -> SNS topic name: ``provision`` creates the topic, the queue's subscription
    (raw delivery off) and the queue policy. Not used when consuming."""

    @model_validator(mode="after")
    def _urls_name_configured_queues(self, info: ValidationInfo) -> SqsOptions:
        context = deployment(info)
        if context is None:
            return self
        known = set(context.queues) | {context.dead_letter_queue} - {None}
        unknown = sorted(set(self.queue_urls) - known)
        if unknown:
            raise ValueError(f"queue_urls: not configured queues: {unknown}")
        return self

    @property
    def endpoint(self) -> str | None:
        """``endpoint_url`` in clear, for the SDK."""
        return self.endpoint_url.get_secret_value() if self.endpoint_url else None
