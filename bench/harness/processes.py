"""The processes a benchmark starts and stops: the no-op app, the CLI sidecar (as users
deploy it), and a git worktree of another commit to run beside this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.harness.output import log
from tests.support.ports import free_port
from tests.support.processes import stop_process


def wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


class AppProcess:
    """``bench.harness.noop_app`` in its own process (uvicorn raw ASGI, uvloop, httptools)."""

    def __init__(self, *, record: bool = False, delay_ms: float = 0.0,
                 port: int | None = None) -> None:
        self.port = port or free_port()  # a port: "the same app" back after an outage
        command = [sys.executable, "-m", "bench.harness.noop_app", "--port", str(self.port)]
        if record:
            command.append("--record")
        if delay_ms:
            command += ["--delay-ms", str(delay_ms)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        try:
            wait_for_port(self.port)
        except RuntimeError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/tasks"

    def stats(self) -> dict[str, Any]:
        """Requests seen and, in record mode, CloudEvent id -> arrival ns (then cleared)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_stats", timeout=10) as rsp:
            value: dict[str, Any] = json.loads(rsp.read())
            return value

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> AppProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class CliSidecar:
    """``priority-pubsub run`` as a subprocess (what users deploy), logs to a file."""

    def __init__(self, directory: Path, config: dict[str, Any], name: str = "sidecar",
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        """``cwd``: run there (with ``PYTHONPATH`` set to it in ``env``, another checkout's
        code, e.g. a ``git_worktree`` of main's)."""
        import yaml

        self.port = free_port()
        self.config = {**config, "server": {**config["server"], "port": self.port}}
        """The config it runs with (its ops port set): what a reload rewrites."""
        self.config_path = directory / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self._log = (directory / f"{name}.log").open("wb")
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "priority_pubsub", "run", "-c", str(self.config_path)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as rsp:
                return int(rsp.status), bytes(rsp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, b""

    def wait_ready(self, timeout_s: float = 30) -> float:
        """Seconds from process start to the first 200 on /readyz."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self.process.returncode}")
            with contextlib.suppress(OSError):
                if self.get("/readyz")[0] == 200:
                    return time.perf_counter() - self.started
            time.sleep(0.01)
        raise RuntimeError(f"sidecar not ready within {timeout_s}s")

    def metric_sum(self, name: str) -> float:
        """Sum of all samples of one metric family from /metrics."""
        _, body = self.get("/metrics")
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        stop_process(self.process, 30)
        self._log.close()


def git_worktree(commit: str, tree: Path, stack: contextlib.ExitStack) -> Path | None:
    """A git worktree of ``commit`` at ``tree`` (this checkout's repository), removed when
    ``stack`` closes; None (said in the log) when none can be made (no git, or a clone
    without that commit). Run its code with ``cwd`` and ``PYTHONPATH`` set to it."""
    root = Path(__file__).resolve().parents[2]
    remove = ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)]
    if tree.exists():
        subprocess.run(remove, capture_output=True, check=False)
        shutil.rmtree(tree, ignore_errors=True)
    made = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        log(f"no worktree of {commit}: {made.stderr.strip()[:200]}")
        return None
    stack.callback(subprocess.run, remove, capture_output=True, check=False)
    return tree
