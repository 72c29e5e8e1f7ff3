"""Google's Pub/Sub emulator for the test session: a real gRPC server on 127.0.0.1.

``gcp_pubsub_emulator`` is a session fixture (import it into a test module): it starts
``cloud-pubsub-emulator`` on a free port, waits until it answers, sets
``PUBSUB_EMULATOR_HOST`` for the SDK, and at the end stops the whole process group (the
launcher is a shell script that starts Java; killing only the script would leave Java
running). Missing emulator or Java: the test is skipped with the reason, or fails when
``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.servers import free_port, skip_or_fail

EMULATOR = Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator")
EMULATOR_ENV = "PUBSUB_EMULATOR_HOST"
PROJECT = "priority-pubsub-test"
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Emulator:
    host: str
    port: int
    project: str = PROJECT

    @property
    def address(self) -> str:
        """``host:port``, the value of ``PUBSUB_EMULATOR_HOST``."""
        return f"{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for a subprocess (e.g. the sidecar) that should use this emulator."""
        return {**os.environ, EMULATOR_ENV: self.address, "GOOGLE_CLOUD_PROJECT": self.project}


def missing_reason() -> str | None:
    """Why the emulator cannot run here, or None."""
    if not os.access(EMULATOR, os.X_OK):
        return f"Pub/Sub emulator not installed at {EMULATOR}"
    if shutil.which("java") is None:
        return "Pub/Sub emulator needs java on PATH"
    return None


def _answers(port: int) -> bool:
    """The emulator's HTTP side answers ``GET /`` with ``Ok`` once gRPC is up too."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
            return bool(response.read().strip() == b"Ok")
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def running_emulator(log_path: Path, port: int | None = None) -> Iterator[Emulator]:
    """Start the emulator (own process group), yield once it answers, stop it after; on
    ``port`` when a test starts it after its clients were configured."""
    port = port or free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(EMULATOR), "--host=127.0.0.1", f"--port={port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _answers(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Pub/Sub emulator did not start on port {port}: "
                        f"{log_path.read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.1)
            yield Emulator("127.0.0.1", port)
        finally:
            _stop(process)


@pytest.fixture(scope="session")
def gcp_pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """The session's emulator, with ``PUBSUB_EMULATOR_HOST`` set while it runs."""
    reason = missing_reason()
    if reason:
        skip_or_fail(reason)
    log_path = tmp_path_factory.mktemp("pubsub-emulator") / "emulator.log"
    with running_emulator(log_path) as emulator:
        saved = os.environ.get(EMULATOR_ENV)
        os.environ[EMULATOR_ENV] = emulator.address
        try:
            yield emulator
        finally:
            if saved is None:
                os.environ.pop(EMULATOR_ENV, None)
            else:
                os.environ[EMULATOR_ENV] = saved


class PubSubAdmin:
    """Creates the topics and subscriptions a test needs (the driver never creates any).

    Built inside the test's event loop (grpc.aio channels belong to one loop); ``close`` it.
    """

    def __init__(self, project: str = PROJECT) -> None:
        from google.pubsub_v1 import PublisherAsyncClient, SubscriberAsyncClient

        self.project = project
        self.publisher = PublisherAsyncClient()
        self.subscriber = SubscriberAsyncClient()

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription}"

    async def topic(self, topic: str) -> str:
        path = self.topic_path(topic)
        await self.publisher.create_topic(name=path)
        return path

    async def subscription(
        self,
        subscription: str,
        topic: str,
        *,
        ack_deadline_s: int = 10,
        dead_letter_topic: str | None = None,
        max_delivery_attempts: int = 100,
    ) -> str:
        """A subscription on ``topic``; with a dead-letter policy when a topic is given."""
        from google.pubsub_v1.types import DeadLetterPolicy, Subscription

        policy = (
            DeadLetterPolicy(dead_letter_topic=self.topic_path(dead_letter_topic),
                             max_delivery_attempts=max_delivery_attempts)
            if dead_letter_topic else None
        )
        path = self.subscription_path(subscription)
        await self.subscriber.create_subscription(request=Subscription(
            name=path, topic=self.topic_path(topic), ack_deadline_seconds=ack_deadline_s,
            dead_letter_policy=policy,
        ))
        return path

    async def publish(self, topic: str, body: bytes, attributes: dict[str, str]) -> str:
        from google.pubsub_v1.types import PubsubMessage

        response = await self.publisher.publish(
            topic=self.topic_path(topic), messages=[PubsubMessage(data=body, attributes=attributes)]
        )
        return str(response.message_ids[0])

    async def drain(self, subscription: str) -> list[tuple[bytes, dict[str, str]]]:
        """Pull and ack everything ``subscription`` has now (the emulator answers an empty
        pull ~1 s before the deadline, so each empty round costs ~1 s)."""
        got: list[tuple[bytes, dict[str, str]]] = []
        while True:
            response = await self.subscriber.pull(
                subscription=self.subscription_path(subscription), max_messages=100, timeout=2
            )
            if not response.received_messages:
                return got
            got += [(r.message.data, dict(r.message.attributes))
                    for r in response.received_messages]
            await self.subscriber.acknowledge(
                subscription=self.subscription_path(subscription),
                ack_ids=[r.ack_id for r in response.received_messages],
            )

    async def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            close: Callable[[], Awaitable[None]] = client.transport.close  # untyped in the SDK
            with contextlib.suppress(Exception):
                await close()
