"""Find drivers and transforms by name through entry points.

Built-ins are registered in this distribution's own entry points, so third-party packages
plug in the same way. A driver module (and its SDK) is imported only when configured.

This is the lookup and the options check configuration needs, typed with what ``settings``
knows (a driver's ``options_model``); ``drivers.registry`` gives the driver class its
``Driver`` type and builds it, ``transforms.base.build_transform`` types a transform.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from pydantic import BaseModel

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.driver import DriverOptions

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


def load_driver(name: str) -> Any:
    """The class registered as driver ``name`` (``drivers.registry.driver_class`` types it)."""
    try:
        return _load(DRIVER_GROUP, "driver", name)
    except ConfigError as exc:
        raise ConfigError(f"driver.type: {exc}") from None


def driver_options_model(name: str) -> type[DriverOptions]:
    """The options model of driver ``name``: what ``driver:`` is validated against."""
    return cast("type[DriverOptions]", load_driver(name).options_model)


def transform_class(name: str) -> Any:
    return _load(TRANSFORM_GROUP, "transform", name)


def instantiate_transform(name: str, options: dict[str, Any]) -> Any:
    """An instance of transform ``name`` with its validated options (``ConfigError`` for
    options given to a transform that takes none, ``ValidationError`` for bad ones)."""
    cls: Any = transform_class(name)
    model: type[BaseModel] | None = getattr(cls, "options_model", None)
    if model is None:
        if options:
            raise ConfigError(f"transform {name!r} takes no options")
        return cls()
    return cls(model.model_validate(options))


def available_drivers() -> list[str]:
    return sorted(_entry_points(DRIVER_GROUP))


def available_transforms() -> list[str]:
    return sorted(_entry_points(TRANSFORM_GROUP))
