"""The sidecar started with a daprd command line of ``dapr run``'s shape (dapr/cli
``pkg/standalone/run.go``: ``--app-max-concurrency -1``, ``--metrics-port``,
``--placement-host-address``, ``--config ~/.dapr/config.yaml``, ``--components-path``), the
binary name changed only, and Dapr resources on Redis for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.own_time import wait_in_own_time
from tests.support.servers import free_port

DAPR_INIT_CONFIG = {  # what `dapr init` writes to ~/.dapr/config.yaml
    "apiVersion": "dapr.io/v1alpha1", "kind": "Configuration",
    "metadata": {"name": "daprConfig"},
    "spec": {"tracing": {"samplingRate": "1",
                         "zipkin": {"endpointAddress": "http://localhost:9411/api/v2/spans"}}},
}


def redis_resources(directory: Path, redis_port: int, subscriptions: list[dict[str, Any]]) -> Path:
    directory.mkdir()
    documents: list[dict[str, Any]] = [
        {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
         "metadata": {"name": "orderpubsub"},
         "spec": {"type": "pubsub.redis", "version": "v1", "metadata": [
             {"name": "redisHost", "value": f"127.0.0.1:{redis_port}"},
             {"name": "redisPassword", "value": ""}]}},
        {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
         "metadata": {"name": "statestore"},
         "spec": {"type": "state.redis", "version": "v1", "metadata": [
             {"name": "redisHost", "value": f"127.0.0.1:{redis_port}"}]}},
        {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
         "metadata": {"name": "elsewhere"}, "scopes": ["another-app"],
         "spec": {"type": "pubsub.redis", "version": "v1", "metadata": []}},
        *subscriptions,
    ]
    (directory / "resources.yaml").write_text(yaml.safe_dump_all(documents))
    return directory


class Daprd:
    """``priority-pubsub run`` with a daprd command line of ``dapr run``'s shape."""

    def __init__(self, directory: Path, app_id: str, resources: Path,
                 app_port: int | None, *extra: str, env: dict[str, str] | None = None) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        config = directory / f"{app_id}-dapr-config.yaml"
        config.write_text(yaml.safe_dump(DAPR_INIT_CONFIG))
        line = ["--app-id", app_id, "--dapr-http-port", str(self.http_port),
                "--dapr-grpc-port", str(self.grpc_port), "--log-level", "info",
                "--app-max-concurrency", "-1", "--app-protocol", "http",
                "--components-path", str(resources), "--metrics-port", str(self.metrics_port),
                "--dapr-http-max-request-size", "-1",
                "--placement-host-address", "localhost:50005",
                "--scheduler-host-address", "localhost:50006", "--config", str(config),
                *(["--app-port", str(app_port)] if app_port is not None else []), *extra]
        self.log_path = directory / f"{app_id}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "priority_pubsub", "run", *line],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_api(self, timeout_s: float = 30) -> None:
        """Until its API answers, for ``timeout_s`` of its own time (as ``wait_ready``)."""
        def answering() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode}:\n{self.logs()}")
            try:
                return httpx.get(f"{self.api}/v1.0/healthz", timeout=1).status_code == 204
            except httpx.HTTPError:
                return False

        try:
            wait_in_own_time(self.process.pid, answering, timeout_s)
        except TimeoutError as late:
            raise AssertionError(f"daprd API not answering: {late}:\n{self.logs()}") from None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(30)
        self._log.close()
        return code


