"""One fixture per broker topology (registered in ``tests/conftest.py``): a fresh topology on
the session's server for one test, closed after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.topologies.local import LocalTopology

if TYPE_CHECKING:
    from tests.support.moto_server import MotoServer
    from tests.support.pubsub_emulator import Emulator
    from tests.support.redis_server import OwnRedis
    from tests.support.servicebus import ServiceBusBroker
    from tests.support.topologies.azure import ServiceBusTopology
    from tests.support.topologies.gcp import PubSubTopology
    from tests.support.topologies.rabbitmq import RabbitTopology
    from tests.support.topologies.redis import RedisTopology
    from tests.support.topologies.sqs import SqsTopology


@pytest.fixture
def local_topology(tmp_path: Path) -> LocalTopology:
    return LocalTopology(tmp_path)


@pytest.fixture
def sqs_topology(moto_server: MotoServer) -> Iterator[SqsTopology]:
    from tests.support.topologies.sqs import SqsTopology

    topology = SqsTopology(moto_server)
    yield topology
    topology.close()


@pytest.fixture
def provisioned_sqs_topology(moto_server: MotoServer) -> Iterator[SqsTopology]:
    """SQS queues, SNS subscriptions and the dead-letter wiring made by ``provision`` alone."""
    from tests.support.topologies.sqs import ProvisionedSqsTopology

    topology = ProvisionedSqsTopology(moto_server)
    yield topology
    topology.close()


@pytest.fixture
def pubsub_topology(pubsub_emulator: Emulator) -> Iterator[PubSubTopology]:
    from tests.support.topologies.gcp import PubSubTopology

    topology = PubSubTopology()
    yield topology
    topology.close()


@pytest.fixture
def servicebus_topology(servicebus_broker: ServiceBusBroker) -> Iterator[ServiceBusTopology]:
    from tests.support.topologies.azure import ServiceBusTopology

    topology = ServiceBusTopology(servicebus_broker)
    yield topology
    topology.close()


@pytest.fixture
def rabbitmq_topology(rabbitmq_url: str) -> Iterator[RabbitTopology]:
    from tests.support.topologies.rabbitmq import RabbitTopology

    topology = RabbitTopology(rabbitmq_url)
    yield topology
    topology.close()


@pytest.fixture
def redis_topology(redis_url: str) -> Iterator[RedisTopology]:
    """Fresh streams on the machine's Redis."""
    from tests.support.topologies.redis import RedisTopology

    topology = RedisTopology(redis_url)
    yield topology
    topology.close()


@pytest.fixture
def own_redis_topology(own_redis: OwnRedis) -> Iterator[RedisTopology]:
    """Fresh streams on a ``redis-server`` of the test's own (it may stop and start it)."""
    from tests.support.topologies.redis import RedisTopology

    topology = RedisTopology(own_redis.url)
    yield topology
    topology.close()
