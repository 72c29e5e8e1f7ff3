"""The request one delivery sends the app: body, headers and the CloudEvent it carries.

Plain data, built by ``app.cloudevent`` / ``dapr.request_builder`` and read by the app
channels and by ``telemetry.tracing`` (which adds the traceparent), so it sits below all of
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AppRequest:
    body: bytes
    headers: dict[str, str]
    event: dict[str, Any] | None
    """The CloudEvent sent (None for raw delivery); used for expiration and tracing."""
    adjusted_headers: tuple[str, ...] = ()
    """Headers whose value was made safe or that were left out (see ``metadata_headers``);
    the worker logs them once per attempt."""
