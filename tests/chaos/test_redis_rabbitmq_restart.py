"""A broker that keeps its data (Redis with its append-only file fsynced, RabbitMQ with
durable queues and persistent messages) killed with SIGKILL under load and started again on
the same port: the sidecar turns not-ready, never exits, delivers again, and nothing that
the broker accepted is lost — messages waiting, leased by the sidecar at the kill, or
published throughout. (SQS on moto, in memory, is ``test_sqs_restart.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest

from tests.chaos.ledger import Accounting, account, drain_bodies
from tests.chaos.outage import broker_outage
from tests.e2e.helpers import wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.rabbitmq_server import PrivateRabbit, private_rabbit, server_binary
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import SidecarProcess, write_config
from tests.support.topologies.base import Topology, topology_config

pytestmark = pytest.mark.chaos

MESSAGES = 300
DOWN_S = 5.0


@dataclass
class DurableBroker:
    """A topology on a broker of the test's own, with the kill and the restart."""

    topology: Topology
    kill_9: Callable[[], None]
    start: Callable[[], None]
    publish: Callable[[str, bytes], None]
    """Durably: Redis appends to its AOF, RabbitMQ gets a persistent message, confirmed."""


@pytest.fixture
def redis_broker(tmp_path: Path) -> Iterator[DurableBroker]:
    from tests.support.topologies.redis import RedisTopology

    server = OwnRedis(tmp_path / "redis")
    server.start()
    topology = RedisTopology(server.url)
    try:
        yield DurableBroker(topology, lambda: server.stop(kill=True), server.start,
                            topology.publish)
    finally:
        with contextlib.suppress(Exception):
            topology.close()
        server.stop()


@pytest.fixture(scope="session")
def restartable_rabbit() -> Iterator[PrivateRabbit]:
    with private_rabbit(consumer_timeout_ms=1_800_000) as server:
        yield server


@pytest.fixture
def rabbitmq_broker(restartable_rabbit: PrivateRabbit) -> Iterator[DurableBroker]:
    from tests.support.topologies.rabbitmq import RabbitTopology

    server = restartable_rabbit
    binary = server_binary()
    assert binary is not None

    def kill_9() -> None:
        assert server.process is not None
        os.killpg(server.process.pid, signal.SIGKILL)  # the Erlang VM and its children
        server.process.wait(10)
        server.process = None

    topology = RabbitTopology(server.url)

    def publish(queue: str, body: bytes) -> None:
        """Bounded: a publish on a connection the broker's death left half-open waits for a
        confirm forever; it is given up after 5 s and sent again on a new connection."""
        try:
            topology.run(asyncio.wait_for(topology.admin.publish(
                queue, body, None, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), 5))
        except BaseException:
            topology.admin._connection = None  # a fresh connection next time
            raise

    try:
        yield DurableBroker(topology, kill_9, lambda: server.start(binary), publish)
    finally:
        if server.process is None:
            server.start(binary)
        with contextlib.suppress(Exception):
            topology.close()


BROKERS = [
    pytest.param("redis_broker", marks=pytest.mark.redis, id="redis-aof"),
    pytest.param("rabbitmq_broker", marks=pytest.mark.rabbitmq, id="rabbitmq-durable"),
]


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> DurableBroker:
    found: DurableBroker = request.getfixturevalue(request.param)
    return found



def _publish_throughout(broker: DurableBroker, queues: list[str], published: list[str]) -> None:
    """Every message until the broker accepted it: one refused while it is down is sent
    again, and counts as published only once accepted."""
    for n in range(MESSAGES):
        while True:
            try:
                broker.publish(queues[n % 2], json.dumps(n).encode())
                break
            except Exception:
                time.sleep(0.2)
        published.append(str(n))
        time.sleep(0.02)


@pytest.mark.timeout(300)
def test_durable_broker_killed_under_load(
    tmp_path: Path, app: RecordingApp, report: list[Accounting], broker: DurableBroker
) -> None:
    topology = broker.topology
    app.behaviour = lambda _: Reply(delay_s=0.02)
    queues = [topology.queue("high", lease_s=2), topology.queue("low", lease_s=2)]
    config = topology_config(topology, tmp_path, app.url, queues, concurrency=4,
                             lease={"duration_s": 2}, shutdown={"grace_s": 5},
                             retry={"max_attempts": 10, "initial_delay_s": 0.2,
                                    "max_delay_s": 1})
    published: list[str] = []
    publisher = threading.Thread(target=_publish_throughout,
                                 args=(broker, queues, published))
    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready(timeout_s=60)
        publisher.start()
        wait_until(lambda: len(app.received) > MESSAGES // 3, timeout_s=60)
        not_ready_after_s, restarted = broker_outage(sidecar, broker.kill_9, broker.start,
                                                     DOWN_S)
        wait_until(lambda: sidecar.ready_status() == 200, timeout_s=60, interval_s=0.1)
        ready_after_s = time.monotonic() - restarted
        publisher.join()
        with contextlib.suppress(AssertionError):  # what is missing is accounted below
            wait_until(lambda: len({str(e["data"]) for e in app.events()}) >= MESSAGES,
                       timeout_s=60)
    finally:
        publisher.join()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]

    waiting = {str(json.loads(b)) for b in drain_bodies(write_config(tmp_path, config),
                                                         queues)}
    dead = {str(json.loads(letter.body)) for letter in topology.dead_letters()}
    seen = Counter(str(event["data"]) for event in app.events())
    result = account(f"{topology.driver_type} killed {DOWN_S:g} s under load", published,
                     seen, waiting, dead,
                     note=f"not ready after {not_ready_after_s:.1f} s, ready again "
                          f"{ready_after_s:.1f} s after restart")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == MESSAGES
    assert result.dead == 0
    assert not_ready_after_s < 10

