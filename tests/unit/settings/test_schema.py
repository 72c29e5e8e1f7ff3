"""``priority-pubsub config schema``: the JSON Schema of config.yaml, from the models.

The schema must accept what the sidecar accepts (the repo's configs) and refuse what it
refuses, naming the same key: each bad config below goes through the sidecar's own loader
(``load_config``: dynaconf, the models, the driver's options model) and through the schema
(the ``jsonschema`` package), and the two must point at the same field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from jsonschema.exceptions import ValidationError, best_match
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import load_config
from priority_pubsub.settings.schema import config_schema

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "config.schema.json"
REPO_CONFIGS = [ROOT / "config.yaml", *sorted((ROOT / "deploy").rglob("config.yaml"))]
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")
Config = dict[str, Any]


@pytest.fixture(scope="module")
def schema() -> Config:
    generated = config_schema()
    assert generated.missing == (), "every driver and transform is installed in the test venv"
    return generated.schema


@pytest.fixture(scope="module")
def validator(schema: Config) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # a valid draft 2020-12 schema
    return cls(schema)


def test_the_command_prints_the_schema(schema: Config) -> None:
    result = CliRunner().invoke(cli.app, ["config", "schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == schema


def test_the_committed_copy_is_current(schema: Config) -> None:
    """Editors read docs/config.schema.json: regenerate it with
    ``priority-pubsub config schema > docs/config.schema.json`` when the models change."""
    assert json.loads(COMMITTED.read_text()) == schema


@pytest.mark.parametrize("path", REPO_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_repo_configs_name_the_schema_and_pass_it(
    path: Path, validator: jsonschema.protocols.Validator
) -> None:
    first = path.read_text().splitlines()[0]
    match = MODELINE.match(first)
    assert match, f"{path}: first line must be the yaml-language-server modeline"
    assert (path.parent / match.group(1)).resolve() == COMMITTED
    load_config(path)  # the sidecar accepts it, and so does the schema
    assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == []


def test_the_driver_is_keyed_on_its_type(schema: Config) -> None:
    branches = schema["properties"]["driver"]["allOf"]
    keyed = {b["if"]["properties"]["type"]["const"]: b["then"]["$ref"] for b in branches}
    assert set(keyed) == {"local", "sqs", "gcp_pubsub", "azure_servicebus", "rabbitmq", "redis"}
    for name, ref in keyed.items():
        body = schema["$defs"][ref.removeprefix("#/$defs/")]
        assert body["additionalProperties"] is False
        assert body["properties"]["type"] == {"const": name}


BASE: Config = {
    "driver": {"type": "local", "path": "./q.db"},
    "queues": [{"name": "high", "weight": 2}, {"name": "low"}],
    "app": {"url": "http://127.0.0.1:8000/tasks", "health": {"interval_s": 5}},
    "dead_letter": {"queue": "dead"},
}
SQS: Config = {**BASE, "driver": {"type": "sqs", "region": "eu-west-1"}}


def _set(path: str, value: Any, base: Config = BASE) -> Callable[[], Config]:
    def build() -> Config:
        config = json.loads(json.dumps(base))
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return config

    return build


BAD = {
    "unknown top-level key": (_set("concurency", 4), "concurency"),
    "unknown nested key": (_set("app.timeout", 3), "app.timeout"),
    "unknown key two levels down": (_set("app.health.intervall_s", 3), "app.health.intervall_s"),
    "unknown local driver key": (_set("driver.wait_time_s", 5), "driver.wait_time_s"),
    "unknown sqs driver key": (_set("driver.path", "x", SQS), "driver.path"),
    "unknown key in a queue": (_set("queues.1.priority", 1), "queues.1.priority"),
    "a string for an integer": (_set("concurrency", "many"), "concurrency"),
    "a string for a number": (_set("retry.initial_delay_s", "soon"), "retry.initial_delay_s"),
    "a value out of range": (_set("app.health.threshold", 0), "app.health.threshold"),
    "not one of the choices": (_set("scheduling", "fastest"), "scheduling"),
    "wrong type in a list item": (_set("queues.0.weight", "heavy"), "queues.0.weight"),
    "wrong type of a driver key": (
        _set("driver.poll_interval_s", "fast"), "driver.poll_interval_s"),
    "wrong type of an sqs key": (_set("driver.wait_time_s", "long", SQS), "driver.wait_time_s"),
    "a list for a section": (_set("lease", [60]), "lease"),
    "unknown key of a transform": (
        _set("transforms", [{"name": "s3_claim_check", "bucket_name": "payloads"}]),
        "transforms.0.bucket_name"),
}


def _sidecar_names(config: Config, tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    return str(refused.value).split(":")[0]


def _schema_names(error: ValidationError) -> str:
    """The key path the schema's most relevant error names; an unknown key is named by the
    object that refuses it, so the key is added (as the sidecar names it)."""
    path = [str(part) for part in error.absolute_path]
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        path += re.findall(r"'([^']+)' (?:was|were) unexpected", error.message)
    return ".".join(path)


@pytest.mark.parametrize(("build", "expected"), BAD.values(), ids=BAD.keys())
def test_schema_and_sidecar_refuse_at_the_same_key(
    build: Callable[[], Config], expected: str,
    validator: jsonschema.protocols.Validator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    config = build()
    assert _sidecar_names(config, tmp_path) == expected
    error = best_match(validator.iter_errors(config))
    assert error is not None, "the schema accepted a config the sidecar refuses"
    assert _schema_names(error) == expected


@pytest.mark.parametrize("config", [BASE, SQS, _set("driver", {"path": "./q.db"})()],
                         ids=["local", "sqs", "local without type"])
def test_good_configs_pass_both(config: Config, validator: jsonschema.protocols.Validator,
                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    load_config(path)
    assert list(validator.iter_errors(config)) == []


def test_dapr_mode_needs_no_queues_and_refuses_them(
    validator: jsonschema.protocols.Validator,
) -> None:
    dapr = {"dapr": {"priorities": ["orders-high"]}, "app": {"url": "http://127.0.0.1:6002"}}
    assert list(validator.iter_errors(dapr)) == []
    assert not validator.is_valid({**dapr, "queues": [{"name": "x"}]})
    assert not validator.is_valid({"app": {"url": "http://127.0.0.1:6002"}})  # native: queues


def test_transform_options_are_checked_by_name(validator: jsonschema.protocols.Validator) -> None:
    claim_check = {"name": "s3_claim_check", "bucket": "payloads"}
    good = {**BASE, "transforms": ["sns_envelope", claim_check]}
    assert list(validator.iter_errors(good)) == []
    assert not validator.is_valid({**BASE, "transforms": [{"name": "s3_claim_check", "x": 1}]})
    assert not validator.is_valid({**BASE, "transforms": [{"name": "base64", "x": 1}]})
    assert not validator.is_valid({**BASE, "transforms": ["no_such_transform"]})


def test_a_driver_whose_sdk_is_missing_is_left_out_and_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As on an install without the ``sqs`` extra: the schema still comes, without that
    driver, and the command says on stderr what it left out."""
    from priority_pubsub.settings import schema as module

    real = module.driver_options_model

    def without_sqs(name: str) -> Any:
        if name == "sqs":
            raise ConfigError("driver 'sqs' cannot be imported (boto3)")
        return real(name)

    monkeypatch.setattr(module, "driver_options_model", without_sqs)
    generated = config_schema()
    assert "sqs" not in generated.drivers
    assert generated.missing == ("priority_pubsub.drivers:sqs",)
    result = CliRunner().invoke(cli.app, ["config", "schema"])
    assert result.exit_code == 0
    driver = json.loads(result.stdout)["properties"]["driver"]
    assert "sqs" not in driver["properties"]["type"]["enum"]
    assert "WARN priority_pubsub.drivers:sqs" in result.stderr
