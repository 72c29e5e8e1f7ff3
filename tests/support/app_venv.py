"""Third-party apps run in their own virtualenv, built from their own ``requirements.txt``.

A venv is built once per requirements file content (and Python version) under
``~/.cache/priority-pubsub/venvs/<hash>`` (``tests.support.user_cache``) and reused, by later
runs and other clones; a lock file keeps two test processes from building the same one at once.
It is built with the uv beside the test run's python (``make install`` puts it there), else with
venv and pip. Building needs the package registry: if it cannot be reached the tests skip
locally with the reason and fail in CI.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.processes import stop_process
from tests.support.servers import free_port, skip_or_fail
from tests.support.user_cache import user_cache


def venv_python(requirements: Path) -> Path:
    """The python of a venv holding ``requirements`` (built on first use)."""
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()[:16]
    venv = user_cache("venvs") / key
    python = venv / "bin" / "python"
    if (venv / ".ready").exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".ready").exists():
            _build(venv, requirements)
    return python


def _build(venv: Path, requirements: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    beside_python = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    uv = shutil.which("uv", path=beside_python)
    if uv:
        steps = [[uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                 [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                  "-r", str(requirements)]]
    else:
        steps = [[sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                  "-r", str(requirements)]]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            skip_or_fail(f"cannot build a venv for {requirements}: {result.stderr[-800:]}")
    (venv / ".ready").touch()


class AppProcess:
    """A third-party app on a free port, its output captured to ``log_path``."""

    def __init__(self, command: list[str], cwd: Path, log_path: Path, port: int,
                 env: dict[str, str] | None = None) -> None:
        self.port = port
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            command, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "APP_PORT": str(port), "PYTHONUNBUFFERED": "1", **(env or {})},
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_listening(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"app exited {self.process.returncode}:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{self.url}/dapr/subscribe", timeout=1)
                return
            time.sleep(0.1)
        raise AssertionError(f"app not listening after {timeout_s}s:\n{self.output()}")

    def wait_tcp(self, timeout_s: float = 30) -> None:
        """For apps that speak no HTTP (gRPC): the port accepts connections."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"app exited {self.process.returncode}:\n{self.output()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        raise AssertionError(f"app not listening after {timeout_s}s:\n{self.output()}")

    def wait_exit(self, timeout_s: float) -> int:
        """For apps that run to their end (publishers): the exit code."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"app still running after {timeout_s}s:\n{self.output()}"
                                 ) from None

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


@contextlib.contextmanager
def running_app(app_dir: Path, command: list[str], log_path: Path, *,
                env: dict[str, str] | None = None, port: int | None = None,
                wait: str = "http") -> Iterator[AppProcess]:
    """``command`` with ``{python}`` and ``{port}`` filled in, in ``app_dir``'s own venv.
    ``wait``: "http" (``/dapr/subscribe`` answers), "tcp" (the port accepts) or "none"."""
    python = venv_python(app_dir / "requirements.txt")
    port = port or free_port()
    filled = [part.format(python=python, port=port) for part in command]
    app = AppProcess(filled, app_dir, log_path, port, env)
    try:
        if wait == "http":
            app.wait_listening()
        elif wait == "tcp":
            app.wait_tcp()
        yield app
    finally:
        app.stop()
