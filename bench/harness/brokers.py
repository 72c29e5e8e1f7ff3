"""The brokers a benchmark can run against: local SQLite, SQS on ministack, Pub/Sub emulator,
Redis Streams (a redis-server of its own), RabbitMQ (a private ``rabbitmq-server``, so other
users of the machine's server neither slow the numbers nor see the queues).

Each gives the ``driver:`` config for the sidecar, creates queues (the driver never does) and
preloads messages through the fastest path it has, so preloading stays out of the timings.
Servers run as subprocesses on 127.0.0.1 and free ports, and are stopped on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from bench.harness.config import sample_body
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver, LocalOptions
from tests.support.ports import free_port

MINISTACK = Path(__file__).resolve().parents[2] / ".venv-ministack" / "bin" / "ministack"
"""ministack in a venv of its own (``make bench`` makes it): it pins botocore exactly, which
would downgrade the project's boto3."""
EMULATOR = Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator")
GCP_PROJECT = "priority-pubsub-bench"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
}


class Broker(Protocol):
    name: str

    def driver_config(self) -> dict[str, Any]: ...

    async def create(self, queues: Sequence[str]) -> None: ...

    async def preload(self, queue: str, count: int, body: Callable[[int], bytes] = ...) -> None:
        ...

    async def close(self) -> None: ...


class LocalBroker:
    name = "local"

    def __init__(self, directory: Path) -> None:
        self.path = directory / "queues.db"

    def driver_config(self) -> dict[str, Any]:
        return {"type": "local", "path": str(self.path)}

    async def create(self, queues: Sequence[str]) -> None:
        return None  # a local queue exists as soon as a row names it

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        driver = LocalDriver(LocalOptions(path=self.path), DriverContext(queues=(queue,)))
        await driver.start()
        try:
            for start in range(0, count, 1000):
                await asyncio.gather(*(driver.publish(queue, body(i))
                                       for i in range(start, min(count, start + 1000))))
        finally:
            await driver.close()

    async def close(self) -> None:
        return None


class SqsBroker:
    """ministack (``BIND_HOST=127.0.0.1 GATEWAY_PORT=PORT ministack``): moto slows with deep
    queues, ministack does not."""

    name = "sqs"

    def __init__(self, directory: Path) -> None:
        os.environ.update(AWS_ENV)
        self.port = free_port()
        self._log = (directory / "ministack.log").open("wb")
        self.process = subprocess.Popen(
            [str(MINISTACK)], stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "BIND_HOST": "127.0.0.1", "GATEWAY_PORT": str(self.port)},
        )
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        _wait_http(f"{self.endpoint_url}/_ministack/health", self.process)
        import boto3

        self.client = boto3.client("sqs", endpoint_url=self.endpoint_url, region_name="us-east-1")
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="bench-sqs")

    def driver_config(self) -> dict[str, Any]:
        return {"type": "sqs", "endpoint_url": self.endpoint_url, "region": "us-east-1"}

    async def create(self, queues: Sequence[str]) -> None:
        for queue in queues:
            await asyncio.to_thread(self.client.create_queue, QueueName=queue)

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        url = self.client.get_queue_url(QueueName=queue)["QueueUrl"]
        loop = asyncio.get_running_loop()

        def send(start: int) -> None:
            entries = [{"Id": str(i), "MessageBody": body(i).decode()}
                       for i in range(start, min(count, start + 10))]
            self.client.send_message_batch(QueueUrl=url, Entries=entries)  # type: ignore[arg-type]

        await asyncio.gather(*(loop.run_in_executor(self._pool, send, start)
                               for start in range(0, count, 10)))

    async def close(self) -> None:
        self._pool.shutdown(wait=False)
        _stop_group(self.process)
        self._log.close()


class MotoSqsBroker(SqsBroker):
    """moto in server mode (a dev dependency, always there): for counting calls, not speed.
    Its request recorder (``recorder``) writes every request the server receives to a file:
    the broker's own count of API calls."""

    def __init__(self, directory: Path) -> None:
        os.environ.update(AWS_ENV)
        self.port = free_port()
        self._log = (directory / "moto.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "MOTO_RECORDER_FILEPATH": str(directory / "moto-requests.jsonl")},
        )
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        _wait_http(f"{self.endpoint_url}/moto-api/", self.process)
        import boto3

        self.client = boto3.client("sqs", endpoint_url=self.endpoint_url, region_name="us-east-1")
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="bench-sqs")

    def recorder(self, action: str) -> str:
        """One call of moto's recorder API (``start-recording``, ``stop-recording``,
        ``reset-recording``, ``download-recording``); its answer."""
        method = "GET" if action == "download-recording" else "POST"
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/recorder/{action}",
                                         method=method, data=None if method == "GET" else b"")
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bytes(answer.read()).decode()


def sqs_broker(directory: Path) -> SqsBroker:
    """ministack when installed (fast with deep queues), else moto (fine for shallow ones)."""
    return SqsBroker(directory) if MINISTACK.exists() else MotoSqsBroker(directory)


class GcpBroker:
    """Google's Pub/Sub emulator; a queue is a subscription on a topic of the same name."""

    name = "gcp_pubsub"

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self._log = (directory / "emulator.log").open("wb")
        self.process = subprocess.Popen(
            [str(EMULATOR), "--host=127.0.0.1", f"--port={self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_http(f"http://127.0.0.1:{self.port}/", self.process, timeout_s=90)
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{self.port}"
        os.environ["GOOGLE_CLOUD_PROJECT"] = GCP_PROJECT
        self._publisher: Any = None
        self._subscriber: Any = None

    def _clients(self) -> tuple[Any, Any]:
        if self._publisher is None:
            from google.pubsub_v1 import PublisherAsyncClient, SubscriberAsyncClient

            self._publisher = PublisherAsyncClient()
            self._subscriber = SubscriberAsyncClient()
        return self._publisher, self._subscriber

    def driver_config(self) -> dict[str, Any]:
        return {"type": "gcp_pubsub", "project": GCP_PROJECT}

    async def create(self, queues: Sequence[str]) -> None:
        from google.pubsub_v1.types import Subscription

        publisher, subscriber = self._clients()
        for queue in queues:
            topic = f"projects/{GCP_PROJECT}/topics/{queue}"
            await publisher.create_topic(name=topic)
            await subscriber.create_subscription(request=Subscription(
                name=f"projects/{GCP_PROJECT}/subscriptions/{queue}", topic=topic,
                ack_deadline_seconds=60,
            ))

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        from google.pubsub_v1.types import PubsubMessage

        publisher, _ = self._clients()
        topic = f"projects/{GCP_PROJECT}/topics/{queue}"
        for start in range(0, count, 500):
            await publisher.publish(topic=topic, messages=[
                PubsubMessage(data=body(i)) for i in range(start, min(count, start + 500))
            ])

    async def close(self) -> None:
        for client in (self._publisher, self._subscriber):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.transport.close()
        _stop_group(self.process)
        self._log.close()


class RedisBroker:
    """A ``redis-server`` of its own on a free port (no persistence: the benchmark measures
    the driver, not the disk); a queue is a stream, preloaded as daprd publishes
    (``XADD stream * data <body>``), in pipelines."""

    name = "redis"

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found (apt-get install redis-server)")
        self.port = free_port()
        self._log = (directory / "redis.log").open("wb")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis

        self.client = redis.asyncio.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                _stop_group(self.process)
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def driver_config(self) -> dict[str, Any]:
        return {"type": "redis", "url": self.url}

    async def create(self, queues: Sequence[str]) -> None:
        return None  # the driver declares stream and group at start, as Dapr's does

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        for start in range(0, count, 1000):
            async with self.client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + 1000)):
                    pipe.xadd(queue, {"data": body(i)})
                await pipe.execute()

    async def close(self) -> None:
        await self.client.aclose()
        _stop_group(self.process)
        self._log.close()



class RabbitBroker:
    """A private ``rabbitmq-server`` on free ports (the test suite's launcher)."""

    name = "rabbitmq"

    @staticmethod
    def available() -> bool:
        from tests.support.rabbitmq_server import server_binary

        return server_binary() is not None

    def __init__(self, directory: Path) -> None:
        from tests.support.rabbitmq_server import PrivateRabbit, server_binary

        binary = server_binary()
        if binary is None:
            raise RuntimeError("rabbitmq-server is not installed")
        (directory / "rabbitmq").mkdir()
        self.server = PrivateRabbit(directory / "rabbitmq", consumer_timeout_ms=1_800_000)
        self.server.start(binary)
        self._ctl = Path(binary).with_name("rabbitmqctl")

    def global_counters(self) -> dict[str, int]:
        """The node's own counters (``rabbit_global_counters``, via ``rabbitmqctl eval``),
        each summed over protocols and queue types: messages acknowledged, delivered by
        basic.get, empty basic.get answers... (they count messages, not AMQP methods)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "HOME": str(self.server.directory), "ERL_EPMD_ADDRESS": "127.0.0.1"}
        done = subprocess.run(
            [str(self._ctl), "-n", f"pp-test-{self.server.port}@localhost", "eval",
             "rabbit_global_counters:overview()."],
            env=env, capture_output=True, text=True, timeout=60, check=True)
        totals: dict[str, int] = {}
        for name, value in re.findall(r"(\w+_total) => (\d+)", done.stdout):
            totals[name] = totals.get(name, 0) + int(value)
        return totals

    def driver_config(self) -> dict[str, Any]:
        return {"type": "rabbitmq", "url": self.server.url}

    async def create(self, queues: Sequence[str]) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.server.url)
        async with connection:
            channel = await connection.channel()
            for queue in queues:
                await channel.declare_queue(queue, durable=True)

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.server.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            for start in range(0, count, 500):
                await asyncio.gather(*(channel.default_exchange.publish(
                    aio_pika.Message(body(i), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue) for i in range(start, min(count, start + 500))))

    async def close(self) -> None:
        self.server.stop()


class ServiceBusBench:
    """The test suite's Service Bus broker (AMQP 1.0 on python-qpid-proton, a dev
    dependency) in a thread of this process; preloaded through the azure-servicebus SDK."""

    name = "azure_servicebus"

    def __init__(self, directory: Path) -> None:
        from tests.support.azure_servicebus.broker import ServiceBusBroker

        self.broker = ServiceBusBroker().start()

    def driver_config(self) -> dict[str, Any]:
        return {"type": "azure_servicebus", "connection_string": self.broker.connection_string}

    async def create(self, queues: Sequence[str]) -> None:
        for queue in queues:
            self.broker.create_queue(queue)

    async def preload(self, queue: str, count: int,
                      body: Callable[[int], bytes] = sample_body) -> None:
        from azure.servicebus import ServiceBusMessage
        from azure.servicebus.aio import ServiceBusClient

        async with ServiceBusClient.from_connection_string(
                self.broker.connection_string) as client, \
                client.get_queue_sender(queue) as sender:
            for start in range(0, count, 100):
                await sender.send_messages([ServiceBusMessage(body(i)) for i in
                                            range(start, min(count, start + 100))])

    async def close(self) -> None:
        self.broker.stop()


def _listening(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def open_broker(name: str, directory: Path) -> Broker:
    brokers: dict[str, Callable[[Path], Broker]] = {
        "local": LocalBroker, "sqs": SqsBroker, "gcp_pubsub": GcpBroker, "redis": RedisBroker,
        "rabbitmq": RabbitBroker, "azure_servicebus": ServiceBusBench,
    }
    return brokers[name](directory)


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {process.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1):
            return
        time.sleep(0.2)
    _stop_group(process)
    raise RuntimeError(f"{url} did not answer within {timeout_s}s")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """The emulator is a shell script that starts Java: stop the whole process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
