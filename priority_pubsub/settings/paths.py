"""Relative paths written in a config file mean "next to that file".

``priority-pubsub stats -c some/dir/config.yaml`` must read the queue file the sidecar running
on that config writes, whatever the working directory. So a relative path *written in the
file* (``driver.path``, ``journal.path``, ``dapr.resources_path``, any ``Path``-typed option
of the configured driver) is anchored at the file's directory as the file is read. Everything
else keeps following the working directory, as a command-line tool's paths do: built-in
defaults the file does not mention (``./data/queues.db``), environment overrides
(``PRIORITY_PUBSUB_JOURNAL__PATH``) and daprd's ``--resources-path`` flag, which belong to the
process that sets them, not to the file. (The image reads its config read-only from /etc and
keeps its data in the working directory, /data.)"""

from __future__ import annotations

import os
import types
import typing
from pathlib import Path
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.plugins import driver_options_model

CORE_PATH_KEYS: tuple[tuple[str, str], ...] = (
    ("journal", "path"), ("dapr", "resources_path"), ("kubernetes", "service_account_dir"))
"""(section, key) of the core settings that hold filesystem paths (one, or a list)."""


def anchor_relative_paths(raw: dict[str, Any], config_dir: Path, env_prefix: str) -> None:
    """Rewrite, in place, each relative path the file wrote to ``config_dir / path``."""
    overridden = {name.upper() for name in os.environ}
    for section, key in (*CORE_PATH_KEYS, *_driver_path_keys(raw)):
        block = raw.get(section)
        if not isinstance(block, dict) or key not in block:
            continue
        from_env = {f"{env_prefix}_{section}".upper(), f"{env_prefix}_{section}__{key}".upper()}
        if not overridden & from_env:
            block[key] = _anchored(block[key], config_dir)


def _anchored(value: Any, config_dir: Path) -> Any:
    if isinstance(value, list | tuple):
        return [_anchored(item, config_dir) for item in value]
    if isinstance(value, str | Path) and not Path(value).is_absolute():
        return str(config_dir / value)
    return value  # not a path: validation reports it


def _driver_path_keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The configured driver's ``Path``-typed options (its own model says which). In Dapr
    mode without ``driver.type`` the driver is the component's, not known yet: none (the
    local driver's model, the default's, would have imported sqlite3 for nothing: 1.1 MB)."""
    driver = raw.get("driver")
    kind = driver.get("type") if isinstance(driver, dict) else None
    if kind is None and raw.get("dapr") is not None:
        return []
    try:
        model = driver_options_model(str(kind or "local"))
    except ConfigError:
        return []  # reported, with the usual wording, when the config is validated
    return [("driver", name) for name, field in model.model_fields.items()
            if _is_path(field.annotation)]


def _is_path(annotation: Any) -> bool:
    if annotation is Path:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return Path in typing.get_args(annotation)
    return False
