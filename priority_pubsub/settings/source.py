"""Where the raw config comes from: the YAML file, then the environment on top of it.

Every key can be overridden as ``PRIORITY_PUBSUB_<KEY>``, ``__`` for nesting
(``PRIORITY_PUBSUB_APP__URL``). An environment value is read as a TOML value where it parses
as one (``8`` an int, ``true`` a bool, ``[400, 422]`` a list, ``{a = 1}`` a table) and kept as
text otherwise: what dynaconf, which read the config before, did with it. dynaconf also
imported its Flask and Django integrations (Flask, Jinja2, Werkzeug when installed): some
6-10 MB of every pod's resident set and a third of a second of start-up for a YAML read and a
loop over ``os.environ`` (issue 28; bench/RESULTS.md, "What the resident set is made of").
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from priority_pubsub.core.errors import ConfigError


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The file's top-level mapping (an empty file is an empty one); one line on error."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_SAFE_LOADER)  # CSafeLoader where PyYAML has it
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{path}: cannot parse: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: cannot parse: the top level must be a mapping of keys, "
                          f"not a {type(data).__name__}")
    return data


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def environment_overrides(prefix: str, skip: tuple[str, ...] = (),
                          environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{PREFIX}_A__B=v`` as ``{"a": {"b": v}}``, keys lower-cased; ``skip`` names whole
    variables that are not keys (e.g. the one naming the config file)."""
    marker = f"{prefix}_"
    overrides: dict[str, Any] = {}
    for name, raw in (os.environ if environ is None else environ).items():
        if not name.startswith(marker) or name in skip:
            continue
        path = name[len(marker):].lower().split("__")
        if not all(path):
            continue  # "PREFIX_" alone or an empty level: no key to set
        node = overrides
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[path[-1]] = environment_value(raw)
    return overrides


def environment_value(raw: str) -> Any:
    """A TOML value where ``raw`` is one, else the text as given."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except (tomllib.TOMLDecodeError, KeyError):
        return raw


def merged(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` wins key by key; nested mappings are merged, not replaced."""
    result = dict(base)
    for key, value in override.items():
        current = result.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            result[key] = merged(current, value)
        else:
            result[key] = value
    return result


def section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """Section ``name`` of a raw config, to read: an empty one when it is absent, null, or
    written as anything but a mapping (validation names that; the reader must not crash)."""
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def add_to_section(raw: dict[str, Any], name: str, values: Mapping[str, Any]) -> None:
    """``values`` set in section ``name`` of a raw config, its other keys kept (created when
    absent or null). A section written as anything else (a string, a number, a list) is left
    as written: filled in, the mistake would vanish; validation names it instead."""
    current = raw.get(name)
    if current is None or isinstance(current, dict):
        raw[name] = {**(current or {}), **values}
