"""What configuration tells a driver: the base of every driver's options model (the keys
under ``driver:``) and the deployment context its options are validated against.

Data only, so ``settings.config`` validates driver options without importing ``drivers``;
``drivers.base`` re-exports both names for drivers.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


class DriverOptions(BaseModel):
    """Base of every driver's own options model (the keys under ``driver:`` besides ``type``).

    ``extra="forbid"``: a misspelt driver key is an error naming ``driver.<key>``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


@dataclass(frozen=True, slots=True)
class DriverContext:
    """What the core tells a driver about the deployment, beyond the driver's own options."""

    queues: tuple[str, ...]
    """Queue names, highest priority first: a queue's index is its priority (0 = highest)."""
    dead_letter_queue: str | None = None
    """``dead_letter.queue`` from the config, when set."""
    lease_duration_s: float = 60.0
    """The lease a receive should take; the lease keeper extends it by this much."""

    def priority_of(self, queue: str) -> int:
        """0 for the first configured queue; queues outside the list (a DLQ) rank last."""
        try:
            return self.queues.index(queue)
        except ValueError:
            return len(self.queues)
