"""Find drivers and transforms by name through entry points.

Built-ins are registered in this distribution's own entry points, so third-party packages
plug in the same way. A driver module (and its SDK) is imported only when configured.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, cast

from priority_pubsub.errors import ConfigError

if TYPE_CHECKING:
    from priority_pubsub.drivers.base import Driver
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


def transform_class(name: str) -> type[Transform]:
    return cast("type[Transform]", _load(TRANSFORM_GROUP, "transform", name))


def available_drivers() -> list[str]:
    return sorted(_entry_points(DRIVER_GROUP))
