"""No secret of any driver reaches ``check``, ``check --offline`` or the sidecar's logs.

Each driver's secret options are given once in the config file and once in the environment
(``PRIORITY_PUBSUB_<SECTION>__<KEY>``). Online checks point at closed ports, so the SDKs fail
and their error messages, which carry the endpoint and its credentials, are printed: those
are what the redaction at the output boundary must mask.

A new driver with secret options adds a ``SecretCase`` to ``CASES``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import RecordingApp
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, cli, sidecar_config, write_config

APP_PASSWORD = "app-pw-5f1e2d"
API_TOKEN = "tok-93ab61c7d2"


@dataclass(frozen=True)
class SecretCase:
    """``driver`` holds the non-secret options; ``secrets`` the secret ones (key -> value);
    ``leaks`` the substrings that must never be printed."""

    driver: dict[str, Any]
    secrets: dict[str, str]
    leaks: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def _cases() -> dict[str, SecretCase]:
    closed = free_port()
    sas_key = "c2VjcmV0LXNhcy1rZXktOTk5OTk5"
    return {
        "local": SecretCase({"type": "local"}, {}, ()),
        "sqs": SecretCase(
            {"type": "sqs", "region": "us-east-1", "connect_timeout_s": 1,
             "queue_urls": {"high": f"http://127.0.0.1:{closed}/000000000000/high"}},
            {"endpoint_url": f"http://proxyuser:sqs-pw-7c1d0e@127.0.0.1:{closed}"},
            ("sqs-pw-7c1d0e",),
            {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_MAX_ATTEMPTS": "1"},
        ),
        "gcp_pubsub": SecretCase(
            {"type": "gcp_pubsub", "project": "p", "call_timeout_s": 2}, {}, (),
            {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{closed}"},
        ),
        "azure_servicebus": SecretCase(
            {"type": "azure_servicebus", "retry_total": 0},
            {"connection_string": f"Endpoint=sb://127.0.0.1:{closed};SharedAccessKeyName=Root;"
                                  f"SharedAccessKey={sas_key};UseDevelopmentEmulator=true"},
            (sas_key,),
        ),
        "redis": SecretCase(
            {"type": "redis", "connect_timeout_s": 1, "call_timeout_s": 1},
            {"url": f"redis://app:redis-pw-4b8e2a@127.0.0.1:{closed}/0"},
            ("redis-pw-4b8e2a",),
        ),
        "redis_password": SecretCase(  # the password alone, as a Kubernetes Secret gives it
            {"type": "redis", "url": f"redis://127.0.0.1:{closed}/0", "connect_timeout_s": 1},
            {"password": "redis-pw-alone-91c3"},
            ("redis-pw-alone-91c3",),
        ),
        "rabbitmq": SecretCase(
            {"type": "rabbitmq", "connect_timeout_s": 1},
            {"url": f"amqp://rabbituser:rabbit-pw-4e2b9a@127.0.0.1:{closed}/"},
            ("rabbit-pw-4e2b9a",),
        ),
    }


CASES = _cases()


def _config(tmp_path: Path, case: SecretCase, where: str,
            app_url: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The config with the case's secrets and the app's (basic-auth URL, API token) in the
    file (``where == "file"``) or in the environment; returns the path and the environment."""
    secret_app = {"url": app_url, "api_token": API_TOKEN}
    in_file = where == "file"
    driver = {**case.driver, **(case.secrets if in_file else {})}
    if driver["type"] == "local":
        driver["path"] = str(tmp_path / "queues.db")
    config = sidecar_config(tmp_path, "http://127.0.0.1:1", driver, ["high"],
                            app={"timeout_s": 5, **(secret_app if in_file else {})})
    env = dict(case.env)
    if not in_file:
        env["PRIORITY_PUBSUB_APP__URL"] = app_url
        env["PRIORITY_PUBSUB_APP__API_TOKEN"] = API_TOKEN
        for key, value in case.secrets.items():
            env[f"PRIORITY_PUBSUB_DRIVER__{key.upper()}"] = value
    return config, env


def _write(tmp_path: Path, case: SecretCase, where: str,
           app_url: str) -> tuple[Path, dict[str, str]]:
    config, env = _config(tmp_path, case, where, app_url)
    return write_config(tmp_path, config), env


def _leaks(case: SecretCase) -> tuple[str, ...]:
    return (*case.leaks, APP_PASSWORD, API_TOKEN)


@pytest.mark.parametrize("where", ["file", "env"])
@pytest.mark.parametrize("driver", sorted(CASES))
def test_check_never_prints_a_secret(tmp_path: Path, driver: str, where: str) -> None:
    case = CASES[driver]
    app_url = f"http://worker:{APP_PASSWORD}@127.0.0.1:{free_port()}/tasks"
    path, env = _write(tmp_path, case, where, app_url)

    offline = cli("check", "--offline", config=path, env=env)
    assert offline.returncode == 0, offline.stderr
    printed = offline.stdout + offline.stderr
    assert "worker:***@127.0.0.1" in printed  # masked, yet the host is still shown
    for key in case.secrets:
        assert f'"{key}"' in offline.stdout  # the option is listed, its secret masked

    online = cli("check", config=path, env=env, timeout_s=120)
    assert online.returncode == 1, online.stdout + online.stderr  # nothing is reachable
    assert "FAIL app" in online.stderr
    for output in (printed, online.stdout + online.stderr):
        for secret in _leaks(case):
            assert secret not in output, (secret, output)


def test_sdk_error_with_credentials_is_masked_in_check(tmp_path: Path) -> None:
    """SQS's endpoint with ``user:password@`` appears in botocore's connection error."""
    case = CASES["sqs"]
    path, env = _write(tmp_path, case, "file", "http://127.0.0.1:1/tasks")
    online = cli("check", config=path, env=env, timeout_s=120)
    assert "FAIL driver sqs" in online.stderr, online.stderr
    assert "proxyuser:***@127.0.0.1" in online.stderr  # the error names the endpoint, masked
    assert "sqs-pw-7c1d0e" not in online.stderr


@pytest.mark.parametrize("driver", ["sqs", "azure_servicebus", "redis", "rabbitmq"])
def test_sidecar_logs_never_show_a_secret(
    tmp_path: Path, app: RecordingApp, driver: str
) -> None:
    """A real sidecar whose broker is unreachable logs its SDK's errors while it retries."""
    case = CASES[driver]
    app_url = app.url.replace("http://", f"http://worker:{APP_PASSWORD}@") + "/tasks"
    config, env = _config(tmp_path, case, "env", app_url)
    sidecar = SidecarProcess(tmp_path, config, env=env)
    try:
        deadline = time.monotonic() + 60
        while sidecar.logs().count('"error":') < 2 and time.monotonic() < deadline \
                and sidecar.process.poll() is None:
            time.sleep(0.2)
    finally:
        sidecar.stop()
    logs = sidecar.logs()
    assert '"error":' in logs, logs  # the SDK's errors were logged...
    for secret in _leaks(case):
        assert secret not in logs, (secret, logs)  # ...without the secrets they carried
