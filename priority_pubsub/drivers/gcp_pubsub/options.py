"""The ``driver:`` keys of ``type: gcp_pubsub`` (docs/brokers/gcp_pubsub.md)."""

from __future__ import annotations

import os

from pydantic import Field, ValidationInfo, model_validator

from priority_pubsub.drivers.base import DriverOptions, deployment
from priority_pubsub.drivers.gcp_pubsub.names import is_path

__all__ = ["MAX_ACK_DEADLINE_S", "PubSubOptions"]

MAX_ACK_DEADLINE_S = 600
"""Pub/Sub's longest ack deadline, seconds: a longer lease is kept by extending it."""


class PubSubOptions(DriverOptions):
    """Keys under ``driver:`` for ``type: gcp_pubsub``. Credentials: the standard Google chain
    (ADC, workload identity); with ``PUBSUB_EMULATOR_HOST`` set, the emulator, no credentials."""

    project: str | None = Field(default=None, min_length=1)
    """Project of bare queue / topic ids; default ``GOOGLE_CLOUD_PROJECT``."""
    endpoint: str | None = Field(default=None, min_length=1)
    """gRPC ``host:port`` instead of pubsub.googleapis.com (e.g. a regional endpoint)."""
    call_timeout_s: float = Field(default=30, gt=0, le=600)
    """Deadline of every call except waiting pulls (ack, modify_ack_deadline, publish...)."""
    topics: dict[str, str] = Field(default_factory=dict)
    """Queue (subscription) -> topic for ``provision``; default the topic of the same name.
    Not used when consuming (a subscription knows its topic)."""

    @model_validator(mode="after")
    def _fits_the_deployment(self, info: ValidationInfo) -> PubSubOptions:
        context = deployment(info)
        if context is None:
            return self
        if context.lease_duration_s > MAX_ACK_DEADLINE_S:
            raise ValueError(
                f"lease.duration_s: gcp_pubsub ack deadlines are at most {MAX_ACK_DEADLINE_S} s "
                f"(got {context.lease_duration_s:g}); the lease keeper extends long tasks"
            )
        bare = [name for name in context.queues if not is_path(name, "subscriptions")]
        if context.dead_letter_queue and not is_path(context.dead_letter_queue, "topics"):
            bare.append(context.dead_letter_queue)
        if bare and not (self.project or os.environ.get("GOOGLE_CLOUD_PROJECT")):
            raise ValueError(
                f"project: {bare[0]!r} is a bare id: set driver.project (or "
                "GOOGLE_CLOUD_PROJECT) or give full paths projects/<p>/subscriptions/<id>"
            )
        return self
