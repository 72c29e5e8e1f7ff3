"""Redis for the tests: the machine's server for ordinary tests, and servers the tests start
themselves (``redis-server`` binary, free port) when they must restart or stop one.

Ordinary tests share 127.0.0.1:6379 (``PRIORITY_PUBSUB_TEST_REDIS_URL`` overrides) and use
stream names with a random suffix, so parallel runs never meet. A missing server or binary
skips locally with the reason and fails when ``CI=true`` (``.ci/run`` starts one).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.servers import free_port, skip_or_fail

SHARED_URL = os.environ.get("PRIORITY_PUBSUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def unique(prefix: str = "t") -> str:
    """A stream-name prefix no other test (or helper on this machine) uses."""
    return f"pp-{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The shared Redis, after checking that it answers."""
    client = redis.Redis.from_url(SHARED_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        skip_or_fail(f"no Redis at {SHARED_URL} ({exc}); start redis-server or set "
                     "PRIORITY_PUBSUB_TEST_REDIS_URL")
    finally:
        client.close()
    return SHARED_URL


_READY = b"Ready to accept connections"
"""What redis-server logs once *it* listens. Waited for in its own log, not by connecting:
when the port was taken, ours exits, but a server of another test (or test run) answered
meanwhile and the test shared its streams (seen once: a quickstart's group read another
run's orders). Its log also works for servers with a password or TLS only."""


class OwnRedis:
    """A ``redis-server`` of the test's own, with an append-only file fsynced on every
    write: it can be stopped (or killed) and started again on the same port, keeping every
    stream, group, pending entry and parked message."""

    def __init__(self, directory: Path, port: int | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            skip_or_fail("redis-server binary not found (apt-get install redis-server)")
        self.binary = str(binary)
        self.directory = directory
        self.port = port or free_port()
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / "redis.log"
        already = log_path.stat().st_size if log_path.exists() else 0  # a restart appends
        log = log_path.open("ab")
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.directory),
             "--daemonize", "no", *self.extra],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.logs()}")
            if _READY in log_path.read_bytes()[already:]:
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server not listening within {timeout_s}s: {self.logs()}")

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.process.wait(10)

    def logs(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
