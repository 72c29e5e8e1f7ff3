"""Find drivers and transforms by name through entry points.

Built-ins are registered in this distribution's own entry points, so third-party packages
plug in the same way. A driver module (and its SDK) is imported only when configured.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, cast

from priority_pubsub.core.errors import ConfigError

if TYPE_CHECKING:
    from priority_pubsub.drivers.base import Driver
    from priority_pubsub.settings.config import Settings
    from priority_pubsub.transforms.base import Transform

DRIVER_GROUP = "priority_pubsub.drivers"
TRANSFORM_GROUP = "priority_pubsub.transforms"
_EXTRAS = {"sqs": "sqs", "gcp_pubsub": "gcp", "azure_servicebus": "azure", "rabbitmq": "rabbitmq"}


@cache
def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def _load(group: str, kind: str, name: str) -> Any:
    found = _entry_points(group)
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise ConfigError(f"unknown {kind} {name!r} (known: {known})")
    try:
        return found[name].load()
    except ImportError as exc:
        extra = _EXTRAS.get(name, name)
        raise ConfigError(
            f"{kind} {name!r} cannot be imported ({exc.name or exc}); "
            f"install it with: pip install 'priority-pubsub[{extra}]'"
        ) from None


def driver_class(name: str) -> type[Driver]:
    try:
        return cast("type[Driver]", _load(DRIVER_GROUP, "driver", name))
    except ConfigError as exc:
        raise ConfigError(f"driver.type: {exc}") from None


def build_driver(settings: Settings) -> Driver:
    """The configured driver, constructed the one way every driver is: validated options of
    its own model plus the deployment context (used by the sidecar and every CLI command)."""
    from priority_pubsub.drivers.base import DriverContext

    cls = driver_class(settings.driver.type)
    options = cls.options_model.model_validate(settings.driver.options())
    context = DriverContext(
        queues=settings.queue_names,
        dead_letter_queue=settings.dead_letter.queue if settings.dead_letter else None,
        lease_duration_s=settings.lease.duration_s,
    )
    return cls(options, context)


def transform_class(name: str) -> type[Transform]:
    return cast("type[Transform]", _load(TRANSFORM_GROUP, "transform", name))


def available_drivers() -> list[str]:
    return sorted(_entry_points(DRIVER_GROUP))
