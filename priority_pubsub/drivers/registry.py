"""The configured driver: its class found by entry-point name, built the one way every
driver is (validated options of its own model plus the deployment context)."""

from __future__ import annotations

from typing import cast

from priority_pubsub.drivers.base import Driver, DriverContext, QueueAdder
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.plugins import load_driver


def driver_class(name: str) -> type[Driver]:
    return cast("type[Driver]", load_driver(name))


def adds_queues(name: str) -> bool:
    """Whether driver ``name`` can take a queue not configured at start (``QueueAdder``):
    what a live reload that adds a queue needs."""
    return issubclass(driver_class(name), QueueAdder)


def build_driver(settings: Settings) -> Driver:
    """The configured driver (used by the sidecar and every CLI command)."""
    cls = driver_class(settings.driver.type)
    options = cls.options_model.model_validate(settings.driver.options())
    context = DriverContext(
        queues=settings.queue_names,
        dead_letter_queue=settings.dead_letter.queue if settings.dead_letter else None,
        lease_duration_s=settings.lease.duration_s,
    )
    return cls(options, context)
