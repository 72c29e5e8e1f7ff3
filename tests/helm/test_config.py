"""The rendered ConfigMap, parsed back, is a config the sidecar accepts in that very pod.

The config file alone is not what the sidecar sees: the pod's environment overrides it
(secrets arrive as ``PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING`` and
``PRIORITY_PUBSUB_APP__API_TOKEN``). So each test writes the ConfigMap's file, sets the
sidecar container's environment (Secret references replaced by sample values) and runs the
sidecar's own loader, ``load_config``: the YAML and environment reader, the Settings model
and the chosen driver's options model, the same static checks ``priority-pubsub check``
starts with (``check`` then tries to reach the broker and the app, which a static test
cannot).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import CONFIG_ENV, ENV_PREFIX, Settings, load_config
from priority_pubsub.settings.schema import config_schema
from tests.helm.conftest import Helm
from tests.helm.manifests import (
    EXAMPLES,
    Doc,
    config_of,
    find,
    sidecar_container,
    unavailable,
)

pytestmark = pytest.mark.helm

SAMPLE_SECRETS = {
    "PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING": (
        "Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=listen;"
        "SharedAccessKey=c2FtcGxlLWtleQ=="
    ),
    "PRIORITY_PUBSUB_APP__API_TOKEN": "sample-token-4f9c",
    "PRIORITY_PUBSUB_DRIVER__PASSWORD": "sample-redis-password-7d1e",
    "PRIORITY_PUBSUB_DRIVER__URL": "amqp://big-server:s3cret-4f9c@rabbitmq:5672/",
}
EXAMPLES_BY_NAME = {p.name.removesuffix("-values.yaml"): p for p in EXAMPLES}
DEPLOYMENT_EXAMPLES = [
    p for p in EXAMPLES if yaml.safe_load(p.read_text()).get("mode") != "sidecar"
]
NATIVE_EXAMPLES = [  # config.yaml alone; Dapr mode also needs the mounted resources
    p for p in DEPLOYMENT_EXAMPLES
    if not (yaml.safe_load(p.read_text()).get("dapr") or {}).get("enabled")
]
SAMPLE_DAPR_SECRET_FILES = {
    "secrets.json": json.dumps({"aws": {"accessKey": "AKIASAMPLE", "secretKey": "c2FtcGxl"}}),
}


def sidecar_environment(container: Doc, config_file: Path) -> dict[str, str]:
    """The container's PRIORITY_PUBSUB_* variables as the sidecar would see them here."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        name = item["name"]
        if not name.startswith(ENV_PREFIX):
            continue
        if name == CONFIG_ENV:
            env[name] = str(config_file)  # the mount path does not exist on this machine
        elif "valueFrom" in item:
            env[name] = SAMPLE_SECRETS[name]
        else:
            env[name] = item["value"]
    return env


def load_as_sidecar(
    docs: list[Doc], container: Doc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_of(docs)))
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in sidecar_environment(container, config_file).items():
        monkeypatch.setenv(name, value)
    try:
        return load_config()  # path from PRIORITY_PUBSUB_CONFIG, as in the container
    except ConfigError as exc:
        if "cannot be imported" in str(exc) or "unknown driver" in str(exc):
            unavailable(f"driver not installed here: {exc}")
        raise


@pytest.mark.parametrize(
    "example",
    DEPLOYMENT_EXAMPLES,
    ids=[p.name.removesuffix("-values.yaml") for p in DEPLOYMENT_EXAMPLES],
)
def test_priority_pubsub_check_accepts_the_rendered_config(
    helm: Helm, example: Path, tmp_path: Path
) -> None:
    """The real CLI, as the container runs it: config from the ConfigMap, env from the pod."""
    docs = helm.render([example])
    (deployment,) = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = sidecar_container(pod)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_of(docs)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(sidecar_environment(container, config_file))
    args = mounted_locally(docs, pod, container, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "priority_pubsub", "check", "--offline", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "OK: config valid" in result.stderr
    expected = (config_of(docs).get("driver") or {}).get("type") or "sqs"  # Dapr: snssqs
    assert json.loads(result.stdout)["driver"]["type"] == expected


def mounted_locally(docs: list[Doc], pod: Doc, container: Doc, tmp_path: Path) -> list[str]:
    """The container's arguments with each mounted ConfigMap/Secret written under
    ``tmp_path`` (sample values for Secrets) and its mount path replaced there, in the
    arguments and in the mounted files (a secretsFile path names a mount)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = " ".join(container.get("args", []))
    files: list[Path] = []
    moved: dict[str, str] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume and mount["name"] != "priority-pubsub-config":
            (configmap,) = [d for d in find(docs, "ConfigMap")
                            if d["metadata"]["name"] == volume["configMap"]["name"]]
            data = configmap["data"]
        elif "secret" in volume:
            data = SAMPLE_DAPR_SECRET_FILES
        else:
            continue
        local = tmp_path / mount["name"]
        local.mkdir()
        for key, text in data.items():
            (local / key).write_text(text)
            files.append(local / key)
        moved[mount["mountPath"]] = str(local)
    for path in files:
        text = path.read_text()
        for mount_path, local_path in moved.items():
            text = text.replace(mount_path, local_path)
        path.write_text(text)
    for mount_path, local_path in moved.items():
        args = args.replace(mount_path, local_path)
    return args.split()


@pytest.mark.parametrize("native", [False, True], ids=["classic", "native"])
@pytest.mark.parametrize(
    "example",
    NATIVE_EXAMPLES,
    ids=[p.name.removesuffix("-values.yaml") for p in NATIVE_EXAMPLES],
)
def test_rendered_config_is_accepted(
    helm: Helm, example: Path, native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.render([example], [f"sidecar.native={str(native).lower()}"])
    (deployment,) = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = sidecar_container(pod)
    settings = load_as_sidecar(docs, container, tmp_path, monkeypatch)

    values = yaml.safe_load(example.read_text())
    assert settings.queue_names == tuple(q["name"] for q in values["config"]["queues"])
    assert settings.driver.type == values["config"]["driver"]["type"]
    assert settings.server.host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert settings.server.port == ports["metrics"]
    assert pod["terminationGracePeriodSeconds"] > math.ceil(settings.shutdown.grace_s)
    # Secrets from the environment land on the right keys, merged into the file's sections.
    names = {item["name"] for item in container["env"]}
    if "PRIORITY_PUBSUB_APP__API_TOKEN" in names:
        token = settings.app.api_token.get_secret_value()
        assert token == SAMPLE_SECRETS["PRIORITY_PUBSUB_APP__API_TOKEN"]
        assert settings.app.url.get_secret_value() == values["config"]["app"]["url"]
    if "PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING" in names:
        secret = settings.driver.options()["connection_string"]  # validated: a SecretStr
        expected = SAMPLE_SECRETS["PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING"]
        assert secret.get_secret_value() == expected
    if "PRIORITY_PUBSUB_DRIVER__URL" in names:
        url = settings.driver.options()["url"]  # validated: a SecretUrl
        assert url.get_secret_value() == SAMPLE_SECRETS["PRIORITY_PUBSUB_DRIVER__URL"]


def test_default_values_config_is_accepted(
    helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.render(sets=["app.image.repository=registry.example.com/app"])
    pod = find(docs, "Deployment")[0]["spec"]["template"]["spec"]
    settings = load_as_sidecar(docs, sidecar_container(pod), tmp_path, monkeypatch)
    assert str(settings.driver.options()["path"]) == "/data/queues.db"
    assert settings.journal is not None
    assert str(settings.journal.path) == "/data/journal"


def test_a_numeric_secret_stays_a_string(
    helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Environment values are parsed as TOML values; a token of digits is still text."""
    docs = helm.render([EXAMPLES_BY_NAME["azure_servicebus"]])
    pod = find(docs, "Deployment")[0]["spec"]["template"]["spec"]
    monkeypatch.setitem(SAMPLE_SECRETS, "PRIORITY_PUBSUB_APP__API_TOKEN", "1234567890")
    settings = load_as_sidecar(docs, sidecar_container(pod), tmp_path, monkeypatch)
    assert settings.app.api_token.get_secret_value() == "1234567890"


@pytest.mark.parametrize("example", [None, *EXAMPLES],
                         ids=["defaults", *(p.name.removesuffix("-values.yaml") for p in EXAMPLES)])
def test_rendered_config_passes_the_json_schema(helm: Helm, example: Path | None) -> None:
    """The config file the chart renders, every mode and driver example, passes the schema
    editors use (``priority-pubsub config schema``); the sidecar's acceptance is above."""
    sets = ["app.image.repository=registry.example.com/app"]
    docs = helm.render([example] if example else [], sets)
    schema = config_schema().schema
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(
        config_of(docs))]
    assert errors == []
