"""The ``driver:`` keys of ``type: local`` (docs/brokers/local.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from priority_pubsub.drivers.base import DriverOptions

__all__ = ["LocalOptions"]


class LocalOptions(DriverOptions):
    path: Path = Path("./data/queues.db")
    max_message_bytes: int = Field(default=1_048_576, ge=1)
    poll_interval_s: float = Field(default=0.1, gt=0, le=5)
    busy_timeout_s: float = Field(default=10, gt=0)
    synchronous: Literal["normal", "full"] = "normal"
