"""RabbitMQ for the tests: the machine's shared server, or a private one on free ports.

Ordinary tests use the shared server (``amqp://guest:guest@127.0.0.1:5672/``, or
``$PRIORITY_PUBSUB_TEST_AMQP_URL``) with uniquely named queues. Tests that must kill the
broker or run it with a short ``consumer_timeout`` start their own ``rabbitmq-server``
process: own node name, AMQP and distribution ports, data and log directories, config file
and Erlang cookie home — the shared server is never reconfigured or restarted.

A missing server or binary skips locally (with the reason) and fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.servers import free_port, skip_or_fail

SHARED_URL = os.environ.get("PRIORITY_PUBSUB_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
_SERVER_CANDIDATES = (
    "/usr/lib/rabbitmq/bin/rabbitmq-server",  # Debian: the real script, not the su wrapper
    "rabbitmq-server",
)


def _reachable(host: str, port: int, timeout_s: float = 1.0) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout_s):
        return True
    return False


def server_binary() -> str | None:
    for candidate in _SERVER_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


@dataclass
class PrivateRabbit:
    """A ``rabbitmq-server`` this test session owns: ``stop``/``start`` at will."""

    directory: Path
    consumer_timeout_ms: int
    port: int = 0
    dist_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _environment(self) -> dict[str, str]:
        base = self.directory
        (base / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"consumer_timeout = {self.consumer_timeout_ms}\n"
            "loopback_users = none\n"
            "log.console = false\n"
            "log.file.level = warning\n"
        )
        # The channel checks consumer_timeout on its tick (60 s by default): tick faster so
        # a short timeout fires when it should.
        (base / "advanced.config").write_text("[{rabbit, [{channel_tick_interval, 500}]}].\n")
        (base / "enabled_plugins").write_text("[].\n")
        (base / "env.conf").write_text("")
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base),  # its own Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": str(base / "env.conf"),
            "RABBITMQ_NODENAME": f"pp-test-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
        }

    def start(self, binary: str, timeout_s: float = 60) -> None:
        if not self.port:
            self.port, self.dist_port = free_port(), free_port()
        log = (self.directory / "server.out").open("ab")
        self.process = subprocess.Popen(
            [binary], env=self._environment(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while not _amqp_answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.directory / "server.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"rabbitmq-server did not start on {self.port}: {tail}")
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop the node (its whole process group: the Erlang VM and epmd children)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None


def _amqp_answers(port: int) -> bool:
    """The node accepts AMQP: it answers the protocol header with a method frame
    (Connection.Start). Plain sockets, so a running event loop is no obstacle."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1) as sock:
            sock.settimeout(2)
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return sock.recv(1) == b"\x01"
    except OSError:
        return False


@contextlib.contextmanager
def private_rabbit(consumer_timeout_ms: int = 3000) -> Iterator[PrivateRabbit]:
    binary = server_binary()
    if binary is None:
        skip_or_fail("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
        raise AssertionError("unreachable")
    with tempfile.TemporaryDirectory(prefix="pp-rabbit-") as directory:
        server = PrivateRabbit(Path(directory), consumer_timeout_ms)
        server.start(binary)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """The shared RabbitMQ; tests on it use unique names (``unique_name``)."""
    host_port = SHARED_URL.split("@")[-1].split("/")[0]
    host, _, port = host_port.partition(":")
    if not _reachable(host, int(port or 5672)):
        skip_or_fail(f"no RabbitMQ at {host_port} (start rabbitmq-server)")
    return SHARED_URL


@pytest.fixture(scope="session")
def short_timeout_rabbit() -> Iterator[PrivateRabbit]:
    """A private RabbitMQ whose server-wide ``consumer_timeout`` is 3 s."""
    with private_rabbit(consumer_timeout_ms=3000) as server:
        yield server


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
