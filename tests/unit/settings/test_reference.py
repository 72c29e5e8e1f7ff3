"""The generated reference pages cover everything: every key of the config models (walked here
from the pydantic models themselves, not from the schema the page is rendered from) and every
command and option of the CLI (walked from typer's registrations)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.commands.cli_reference import cli_reference, command_names
from priority_pubsub.settings.config import DriverConfig, Settings, TransformEntry, load_config
from priority_pubsub.settings.plugins import (
    available_drivers,
    available_transforms,
    driver_options_model,
    transform_class,
)
from priority_pubsub.settings.reference import config_reference, sections

ROOT = Path(__file__).resolve().parents[3]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        else []
    for arg in get_args(annotation):
        found += _models_in(arg)
    return found


def _is_list(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) in (tuple, list) or any(
        _is_list(arg) for arg in get_args(annotation))


def model_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """``app.health.interval_s``, ``queues[].name``...: every key a config file may hold."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for nested in _models_in(info.annotation):
            if nested in (DriverConfig, TransformEntry):
                continue  # keyed unions, below
            inner = f"{prefix}{name}[]." if _is_list(info.annotation) else f"{path}."
            yield from model_keys(nested, inner)


def all_keys() -> set[str]:
    keys = set(model_keys(Settings))
    keys |= {"driver.type", "transforms[].name"}
    for driver in available_drivers():
        keys |= set(model_keys(driver_options_model(driver), "driver."))
    for name in available_transforms():
        options = getattr(transform_class(name), "options_model", None)
        if options is not None:
            keys |= set(model_keys(options, "transforms[]."))
    return keys


def test_every_config_key_is_in_the_reference() -> None:
    page = config_reference()
    rows = set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.M))
    keys = all_keys()
    assert len(keys) > 100  # every driver's options are walked
    assert keys - rows == set()
    assert rows - keys == set()  # and nothing the models do not have


def test_every_driver_has_a_section() -> None:
    titles = {section.title for section in sections()}
    assert {f"driver: {name}" for name in available_drivers()} <= titles


@pytest.mark.parametrize(("key", "env", "value", "read"), [
    ("concurrency", "PRIORITY_PUBSUB_CONCURRENCY", "7", lambda s: s.concurrency == 7),
    ("app.health.interval_s", "PRIORITY_PUBSUB_APP__HEALTH__INTERVAL_S", "7",
     lambda s: s.app.health is not None and s.app.health.interval_s == 7),
    ("driver.poll_interval_s", "PRIORITY_PUBSUB_DRIVER__POLL_INTERVAL_S", "0.7",
     lambda s: s.driver.options()["poll_interval_s"] == 0.7),
    ("queues", "PRIORITY_PUBSUB_QUEUES", '[{name="high"}, {name="low"}]',  # the page's example
     lambda s: s.queue_names == ("high", "low")),
])
def test_the_documented_variable_sets_the_key(
    key: str, env: str, value: str, read: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference's naming rule is the loader's: the variable it prints does set the key."""
    rows = {k.path: k for section in sections() for k in section.keys}
    assert rows[key].env == f"`{env}`"
    config = tmp_path / "config.yaml"
    config.write_text("queues: [{name: q}]\ndriver: {type: local}\n")
    monkeypatch.setenv(env, value)
    assert read(load_config(config))


def test_a_key_in_a_list_names_the_lists_variable() -> None:
    rows = {k.path: k for section in sections() for k in section.keys}
    in_lists = [key for key in rows.values() if "[]." in key.path]
    assert {"queues[].name", "dapr.priorities[].topic", "transforms[].bucket"} <= {
        key.path for key in in_lists}
    for key in in_lists:
        listed = key.path.split("[].")[0]
        assert key.env == f"{rows[listed].env} (the whole list)", key.path


def _registered(app: typer.Typer, prefix: str = "") -> Iterator[str]:
    for command in app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        yield prefix + name.replace("_", "-")
    for group in app.registered_groups:
        assert group.typer_instance is not None
        assert group.name is not None
        yield prefix + group.name
        yield from _registered(group.typer_instance, f"{prefix}{group.name} ")


def test_every_cli_command_is_in_the_reference() -> None:
    root = typer.main.get_command(cli.app)
    page = cli_reference(root)
    registered = set(_registered(cli.app))
    assert {"run", "check", "provision", "publish", "config schema"} <= registered
    assert set(command_names(root)) == registered
    for name in registered:
        assert f"## `{name}`" in page


@pytest.mark.parametrize("name", command_names(typer.main.get_command(cli.app)))
def test_every_option_is_in_the_reference(name: str) -> None:
    """Each option ``--help`` lists for the command is in its section of the page."""
    page = cli_reference(typer.main.get_command(cli.app))
    section = page.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
    result = CliRunner().invoke(cli.app, [*name.split(), "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", result.output)) - {"--help"}
    missing = {option for option in options if f"`{option}`" not in section}
    assert missing == set()
