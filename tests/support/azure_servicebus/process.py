"""The test broker in a child process on a port fixed for its whole life, so a test can kill
it with SIGKILL (the kernel closes its sockets, as when a real broker dies) and start it again
where clients expect it. The broker keeps everything in memory: a restart starts empty, with
the same queues made again."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.servers import free_port

_REPO = Path(__file__).resolve().parents[3]


class BrokerProcess:
    """``python -m tests.support.azure_servicebus`` serving ``queues``; ``start`` returns once the
    queues exist (the child printed its connection string)."""

    def __init__(self, queues: list[str], log_path: Path, *, lock_duration_s: float = 60.0,
                 max_delivery_count: int = 10) -> None:
        self.port = free_port()
        self.queues = list(queues)
        self.log_path = log_path
        self.lock_duration_s = lock_duration_s
        self.max_delivery_count = max_delivery_count
        self.connection_string = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30) -> None:
        assert self._process is None, "already running"
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.azure_servicebus", "--port", str(self.port),
                 "--lock-s", str(self.lock_duration_s),
                 "--max-deliveries", str(self.max_delivery_count), *self.queues],
                cwd=_REPO, stdout=subprocess.PIPE, stderr=log,
            )
        self._process = process
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout_s
            while not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline or process.poll() is not None:
                    self.kill_9()
                    raise RuntimeError(f"the broker did not start in {timeout_s:g} s:\n"
                                       f"{self.log_path.read_text(errors='replace')[-3000:]}")
        line = process.stdout.readline().decode().strip()
        if not line.startswith("Endpoint="):
            self.kill_9()
            raise RuntimeError(f"the broker printed {line!r}:\n"
                               f"{self.log_path.read_text(errors='replace')[-3000:]}")
        self.connection_string = line

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def kill_9(self) -> None:
        """SIGKILL and reap (nothing when not running)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()

    def close(self) -> None:
        self.kill_9()
