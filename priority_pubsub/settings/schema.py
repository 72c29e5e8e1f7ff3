"""The JSON Schema of ``config.yaml``, generated from the models ``load_config`` validates with.

``priority-pubsub config schema`` prints it; ``docs/config.schema.json`` is a copy editors
find through the ``# yaml-language-server: $schema=...`` line of the repo's configs, and the
config reference (``docs/reference/config.md``) is rendered from it.

What the file may hold, as the sidecar checks it:

- ``driver`` is one object keyed on ``driver.type``: each installed driver's own options
  model (``extra="forbid"``, so an unknown key is refused as ``load_config`` refuses it);
  without ``type`` it is the local driver's.
- ``transforms`` entries with options are keyed on ``name`` the same way.
- ``queues`` is required (one or more), except in Dapr mode (a ``dapr:`` section), where it is
  refused, and for a publisher-only sidecar (``app.push: false``); ``dapr.resources_path`` and
  ``dapr.app_id`` may come from daprd's flags instead.

A driver whose SDK is not installed cannot be imported, so its options model is unknown: it is
left out of the schema and named in ``missing`` (the CLI says so on stderr).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import BaseModel, SecretStr
from pydantic.json_schema import models_json_schema

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.plugins import (
    DRIVER_GROUP,
    TRANSFORM_GROUP,
    available_drivers,
    available_transforms,
    driver_options_model,
    transform_class,
)

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_DRIVER = "local"
_FILLED_BY_FLAGS = frozenset({"resources_path", "app_id"})
"""``dapr:`` keys daprd's ``--resources-path`` / ``--app-id`` give on the command line."""


@dataclass(frozen=True)
class ConfigSchema:
    """The schema, and the drivers/transforms whose models could not be imported."""

    schema: dict[str, Any]
    drivers: tuple[str, ...]
    missing: tuple[str, ...] = field(default=())


def config_schema() -> ConfigSchema:
    """The JSON Schema (draft 2020-12) of ``config.yaml`` for the installed drivers."""
    drivers, missing = _importable(available_drivers(), driver_options_model, DRIVER_GROUP)
    transforms, missing_t = _importable(available_transforms(), _transform_options, TRANSFORM_GROUP)
    with_options = {name: model for name, model in transforms.items() if model is not None}
    models: list[type[BaseModel]] = [Settings, *drivers.values(), *with_options.values()]
    refs, shared = models_json_schema([(model, "validation") for model in models],
                                      ref_template="#/$defs/{model}")
    defs: dict[str, Any] = shared.get("$defs", {})
    root = copy.deepcopy(defs.pop(Settings.__name__))

    def name_of(model: type[BaseModel]) -> str:
        return str(refs[(model, "validation")]["$ref"]).removeprefix("#/$defs/")

    root["properties"]["driver"] = _driver_union(
        {name: _keyed(defs, name_of(model), "type", name) for name, model in drivers.items()})
    root["properties"]["transforms"] = _transforms_schema(
        root["properties"]["transforms"], sorted(transforms),
        {name: _keyed(defs, name_of(model), "name", name) for name, model in with_options.items()})
    for replaced in ("DriverConfig", "TransformEntry"):  # stood for the keyed unions above
        defs.pop(replaced, None)
    _dapr_mode(root, defs)
    _plain_secret_defaults(defs, models)
    body = _untitled({**root, "$defs": dict(sorted(defs.items()))})
    schema = {"$schema": SCHEMA_DIALECT, "title": "priority-pubsub config.yaml", **body}
    return ConfigSchema(schema, tuple(sorted(drivers)), (*missing, *missing_t))


def _plain_secret_defaults(defs: dict[str, Any], models: list[type[BaseModel]]) -> None:
    """A secret's default is written in the code, not a secret: show it (pydantic writes
    ``**********`` for a ``SecretStr`` default, e.g. ``app.url``'s)."""
    for model in _nested_models(models):
        properties = defs.get(model.__name__, {}).get("properties", {})
        for name, info in model.model_fields.items():
            if isinstance(info.default, SecretStr) and name in properties:
                properties[name]["default"] = info.default.get_secret_value()


def _nested_models(models: list[type[BaseModel]]) -> set[type[BaseModel]]:
    found: set[type[BaseModel]] = set()
    todo = list(models)
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.add(model)
        for info in model.model_fields.values():
            todo += [arg for arg in _type_args(info.annotation)
                     if isinstance(arg, type) and issubclass(arg, BaseModel)]
    return found


def _type_args(annotation: Any) -> list[Any]:
    args = [annotation]
    for arg in get_args(annotation):
        args += _type_args(arg)
    return args


def _untitled(node: Any) -> Any:
    """Without pydantic's titles ("Timeout S"): the key names say it, editors show both."""
    if isinstance(node, dict):
        kept = {k: _untitled(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
        if isinstance(node.get("properties"), dict):  # property names are data: keep them all
            kept["properties"] = {k: _untitled(v) for k, v in node["properties"].items()}
        return kept
    if isinstance(node, list):
        return [_untitled(item) for item in node]
    return node


def _importable(names: list[str], model_of: Any, group: str
                ) -> tuple[dict[str, Any], tuple[str, ...]]:
    found: dict[str, Any] = {}
    missing: list[str] = []
    for name in names:
        try:
            found[name] = model_of(name)
        except ConfigError:  # its SDK is not installed (plugins says which extra)
            missing.append(f"{group}:{name}")
    return found, tuple(missing)


def _transform_options(name: str) -> type[BaseModel] | None:
    model: type[BaseModel] | None = getattr(transform_class(name), "options_model", None)
    return model


def _keyed(defs: dict[str, Any], def_name: str, key: str, value: str) -> str:
    """Give an options model's schema its selecting key (``type: sqs``), which the model
    itself does not declare: with ``additionalProperties: false`` it would refuse it."""
    body = defs[def_name]
    body["properties"] = {key: {"const": value}, **body.get("properties", {})}
    return f"#/$defs/{def_name}"


def _driver_union(refs: dict[str, str]) -> dict[str, Any]:
    """``driver``: the options model chosen by ``type`` (absent: the local driver)."""
    branches = []
    for name, target in refs.items():
        chosen: dict[str, Any] = {"properties": {"type": {"const": name}}}
        if name != DEFAULT_DRIVER:
            chosen["required"] = ["type"]
        branches.append({"if": chosen, "then": {"$ref": target}})
    return {
        "type": "object",
        "description": "`type` picks the driver; the other keys are that driver's options "
                       "(its own model: unknown keys are refused).",
        "properties": {"type": {"enum": sorted(refs), "default": DEFAULT_DRIVER}},
        "allOf": branches,
        "default": {"type": DEFAULT_DRIVER},
    }


def _transforms_schema(current: dict[str, Any], names: list[str], refs: dict[str, str]
                       ) -> dict[str, Any]:
    """A name, or ``{name: ..., <options>}`` checked by that transform's options model (a
    transform without one takes no options)."""
    by_name = []
    for name in names:
        plain = {"properties": {"name": {"const": name}}, "additionalProperties": False}
        chosen = {"properties": {"name": {"const": name}}, "required": ["name"]}
        by_name.append({"if": chosen, "then": {"$ref": refs[name]} if name in refs else plain})
    entry = {"type": "object", "properties": {"name": {"enum": names}}, "required": ["name"],
             "allOf": by_name}
    return {**current, "items": {"anyOf": [{"type": "string", "enum": names}, entry]}}


def _dapr_mode(root: dict[str, Any], defs: dict[str, Any]) -> None:
    """Dapr mode takes its queues from the resources: ``queues`` is refused beside ``dapr``.
    Otherwise at least one queue, but for a publisher-only sidecar (``app.push: false``)."""
    root["if"] = {"required": ["dapr"]}
    root["then"] = {"not": {"required": ["queues"]}}
    publisher_only = {"required": ["app"],
                      "properties": {"app": {"required": ["push"],
                                             "properties": {"push": {"const": False}}}}}
    root["else"] = {"anyOf": [{"required": ["queues"], "properties": {"queues": {"minItems": 1}}},
                              publisher_only]}
    dapr = defs["DaprConfig"]
    dapr["required"] = [key for key in dapr.get("required", []) if key not in _FILLED_BY_FLAGS]
    if not dapr["required"]:
        del dapr["required"]
