"""Apps on the Dapr SDKs that install here from the registries, against the real sidecar
started with a daprd command line, on Redis; each subscribes, receives every order once and
publishes a shipment for each with its own client, which it receives too:

- JavaScript (``@dapr/dapr`` 3.18.0 from npm, locked in ``tests/apps/js-sdk/package-lock.json``):
  ``DaprServer`` in HTTP and in gRPC mode (its start-up waits on the sidecar's
  ``GET /v1.0/metadata``), ``DaprClient`` publishing the orders over HTTP and over gRPC;
- Python (``tests/apps/python-sdk/requirements.txt``, pinned): a dapr-ext-fastapi ``DaprApp``
  and a dapr-ext-grpc ``App``, ``dapr``'s ``DaprClient`` publishing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.app_venv import AppProcess, running_app
from tests.support.daprd import Daprd, redis_resources
from tests.support.node_apps import node, node_modules
from tests.support.redis_server import OwnRedis
from tests.support.servers import free_port
from tests.support.waiting import wait_until

JS_APPS = Path(__file__).resolve().parents[1] / "apps" / "js-sdk"
PYTHON_APPS = Path(__file__).resolve().parents[1] / "apps" / "python-sdk"
pytestmark = [pytest.mark.redis, pytest.mark.app_deps(JS_APPS, PYTHON_APPS)]


def _node_app(script: str, protocol: str, log_path: Path, env: dict[str, str]) -> AppProcess:
    """``node script protocol`` with the locked ``node_modules`` (an ``AppProcess``)."""
    return AppProcess([node(), script, protocol], JS_APPS, log_path,
                      int(env.get("APP_PORT", "0")),
                      {"NODE_PATH": str(node_modules(JS_APPS)), **env})


def _lines(output: str, what: str) -> list[int]:
    return [int(n) for n in re.findall(rf"received {what} (\d+)", output)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_js_sdk_server_subscribes_receives_and_publishes(
    tmp_path: Path, own_redis: OwnRedis, protocol: str
) -> None:
    app_port = free_port()
    resources = redis_resources(tmp_path / "resources", own_redis.port, [])
    daprd = Daprd(tmp_path, f"js-{protocol}", resources, app_port, "--app-protocol", protocol)
    env = {"APP_PORT": str(app_port), "DAPR_HTTP_PORT": str(daprd.http_port),
           "DAPR_GRPC_PORT": str(daprd.grpc_port)}
    subscriber = _node_app("subscriber.js", protocol, tmp_path / "subscriber.log", env)
    try:
        wait_until(lambda: "subscriber started" in subscriber.output()
                   or subscriber.process.poll() is not None, 90)
        assert "subscriber started" in subscriber.output(), subscriber.output()[-3000:]
        publisher = _node_app("publisher.js", protocol, tmp_path / "publisher.log", env)
        assert publisher.wait_exit(60) == 0, publisher.output()[-3000:]
        publisher.stop()
        wait_until(lambda: len(_lines(subscriber.output(), "shipment")) >= 5, 60)
    finally:
        subscriber.stop()
        code = daprd.stop()
    output = subscriber.output()
    assert code == 0, daprd.logs()[-3000:]
    assert sorted(_lines(output, "order")) == [1, 2, 3, 4, 5], output[-3000:]
    assert sorted(_lines(output, "shipment")) == [1, 2, 3, 4, 5], output[-3000:]
    assert publisher.output().count("published order") == 5


@pytest.mark.parametrize(("kind", "protocol", "command"), [
    ("fastapi", "http", ["{python}", "-m", "uvicorn", "fastapi_app:app", "--host",
                         "127.0.0.1", "--port", "{port}"]),
    ("grpc", "grpc", ["{python}", "grpc_app.py"]),
])
def test_python_sdk_apps_subscribe_receive_and_publish(
    tmp_path: Path, own_redis: OwnRedis, kind: str, protocol: str, command: list[str]
) -> None:
    app_port = free_port()
    resources = redis_resources(tmp_path / "resources", own_redis.port, [])
    daprd = Daprd(tmp_path, f"py-{kind}", resources, app_port, "--app-protocol", protocol)
    env = {"DAPR_HTTP_PORT": str(daprd.http_port), "DAPR_GRPC_PORT": str(daprd.grpc_port)}
    try:
        with running_app(PYTHON_APPS, command, tmp_path / "app.log", env=env, port=app_port,
                         wait="none") as app:
            daprd.wait_api(60)
            with running_app(PYTHON_APPS, ["{python}", "publisher.py"],
                             tmp_path / "publisher.log", env=env, wait="none") as publisher:
                assert publisher.wait_exit(60) == 0, publisher.output()[-3000:]
            wait_until(lambda: len(_lines(app.output(), "shipment")) >= 5, 60)
            output = app.output()
    finally:
        code = daprd.stop()
    assert code == 0, daprd.logs()[-3000:]
    assert sorted(_lines(output, "order")) == [1, 2, 3, 4, 5], output[-3000:]
    assert sorted(_lines(output, "shipment")) == [1, 2, 3, 4, 5], output[-3000:]
