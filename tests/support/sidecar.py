"""Run the real ``priority-pubsub`` CLI as a subprocess, as users and Kubernetes do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.own_time import wait_in_own_time
from tests.support.servers import free_port


def cli(
    *args: str,
    config: Path | None = None,
    input_bytes: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """One CLI command to completion (publish, stats, check, requeue ...)."""
    command = [sys.executable, "-m", "priority_pubsub", *args]
    if config is not None:
        command += ["-c", str(config)]
    return subprocess.run(
        command, input=input_bytes.decode() if input_bytes is not None else None,
        capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def write_config(directory: Path, config: dict[str, Any], name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def sidecar_config(
    directory: Path, app_url: str, driver: dict[str, Any], queues: list[str], **overrides: Any
) -> dict[str, Any]:
    """A test config for any driver: concurrency 1, short retries and lease, the journal and
    the ops server under ``directory``; keyword overrides replace top-level keys."""
    config: dict[str, Any] = {
        "driver": driver,
        "queues": [{"name": name} for name in queues],
        "concurrency": 1,
        "app": {"url": app_url, "timeout_s": 30},
        "retry": {"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 8},
        "lease": {"duration_s": 2},
        "shutdown": {"grace_s": 2},
        "server": {"host": "127.0.0.1", "port": 0},
        "journal": {"path": str(directory / "journal"), "rotate_mb": 64},
        "log": {"level": "info", "format": "json"},
    }
    config.update(overrides)
    return config


def local_config(directory: Path, app_url: str, **overrides: Any) -> dict[str, Any]:
    """The local driver on ``directory/queues.db`` with queues high, normal, low and dead."""
    defaults: dict[str, Any] = {
        "concurrency": 2,
        "retry": {"max_attempts": 3, "initial_delay_s": 0.2, "max_delay_s": 2},
        "dead_letter": {"queue": "dead"},
        "lease": {"duration_s": 30},
        "shutdown": {"grace_s": 5},
    }
    driver = {"type": "local", "path": str(directory / "queues.db")}
    config = sidecar_config(directory, app_url, driver, ["high", "normal", "low"], **defaults)
    config.update(overrides)  # may replace the queue list itself (weights, routes)
    return config


class SidecarProcess:
    """``priority-pubsub run`` in a subprocess with its own ops port and captured logs."""

    def __init__(self, directory: Path, config: dict[str, Any], name: str = "sidecar",
                 env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                 prefix: tuple[str, ...] = (),
                 write: Callable[[dict[str, Any]], Path] | None = None) -> None:
        """``prefix``: what runs the command (``ip netns exec NAME``, which execs it: the
        process is the sidecar's own, signals reach it). ``write``: how the config file is
        written, the path to run with returned (default ``directory/NAME.yaml``)."""
        self.port = free_port()
        self.config = {**config, "server": {**config.get("server", {}), "port": self.port}}
        """The config it runs with (its own ops port set): what a reload test changes."""
        self.config_path = (write(self.config) if write is not None
                            else write_config(directory, self.config, f"{name}.yaml"))
        self.log_path = directory / f"{name}.log"
        self._env = {**os.environ, **(env or {})}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "priority_pubsub", "run", "-c",
             str(self.config_path), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=self._env,
        )

    @property
    def ops_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 30) -> None:
        """Until ``/readyz`` answers 200, for ``timeout_s`` of the sidecar's own time
        (``own_time``: its waits for a CPU on a loaded machine are not counted)."""
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"sidecar exited {self.process.returncode}:\n{self.logs()}")
            try:
                return httpx.get(f"{self.ops_url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_in_own_time(self.process.pid, ready, timeout_s)
        except TimeoutError as late:
            raise AssertionError(f"sidecar not ready: {late}:\n{self.logs()}") from None

    def ready_status(self) -> int:
        """``/readyz``'s status now; 0 when it does not answer within 3 s."""
        try:
            return httpx.get(f"{self.ops_url}/readyz", timeout=3).status_code
        except httpx.HTTPError:
            return 0

    def metrics(self) -> str:
        return httpx.get(f"{self.ops_url}/metrics", timeout=5).text

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def hang_up(self) -> None:
        """SIGHUP: reload the config."""
        self.process.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout_s: float = 30) -> int:
        code = self.process.wait(timeout_s)
        self._log.close()
        return code

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.terminate()
        try:
            return self.wait()
        except subprocess.TimeoutExpired:
            self.kill()
            return self.wait()


def start_sidecar(directory: Path, config: dict[str, Any], ready_timeout_s: float = 20,
                  name: str = "sidecar", args: tuple[str, ...] = ()) -> SidecarProcess:
    """``priority-pubsub run`` in a subprocess, returned once ``/readyz`` answers 200."""
    sidecar = SidecarProcess(directory, config, name=name, args=args)
    sidecar.wait_ready(timeout_s=ready_timeout_s)
    return sidecar

