"""One fixture per broker topology (registered in ``tests/conftest.py``): a fresh topology on
the session's server for one test, closed after it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import pytest

from tests.support.topologies.local import LocalTopology

if TYPE_CHECKING:
    from tests.support.azure_servicebus import ServiceBusBroker
    from tests.support.gcp_pubsub_emulator import Emulator
    from tests.support.moto_server import MotoServer
    from tests.support.redis_server import OwnRedis
    from tests.support.topologies.azure_servicebus import ServiceBusTopology
    from tests.support.topologies.base import Topology
    from tests.support.topologies.gcp_pubsub import PubSubTopology
    from tests.support.topologies.rabbitmq import RabbitTopology
    from tests.support.topologies.redis import RedisTopology
    from tests.support.topologies.sqs import SqsTopology

P = ParamSpec("P")
T = TypeVar("T", bound="Topology")


def closed_after(make: Callable[P, T]) -> Any:
    """A fixture of ``make``: the topology it makes from the fixtures it names (its
    parameters, as pytest reads them through ``functools.wraps``), closed after the test.
    Each ``make`` imports its broker's topology itself: the SDKs are heavy and optional."""

    @functools.wraps(make)
    def fixture(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        topology = make(*args, **kwargs)
        yield topology
        topology.close()

    return pytest.fixture(fixture)


@pytest.fixture
def local_topology(tmp_path: Path) -> LocalTopology:
    return LocalTopology(tmp_path)


@closed_after
def sqs_topology(moto_server: MotoServer) -> SqsTopology:
    from tests.support.topologies.sqs import SqsTopology

    return SqsTopology(moto_server)


@closed_after
def provisioned_sqs_topology(moto_server: MotoServer) -> SqsTopology:
    """SQS queues, SNS subscriptions and the dead-letter wiring made by ``provision`` alone."""
    from tests.support.topologies.sqs import ProvisionedSqsTopology

    return ProvisionedSqsTopology(moto_server)


@closed_after
def gcp_pubsub_topology(gcp_pubsub_emulator: Emulator) -> PubSubTopology:
    from tests.support.topologies.gcp_pubsub import PubSubTopology

    return PubSubTopology()


@closed_after
def azure_servicebus_topology(azure_servicebus_broker: ServiceBusBroker) -> ServiceBusTopology:
    from tests.support.topologies.azure_servicebus import ServiceBusTopology

    return ServiceBusTopology(azure_servicebus_broker)


@closed_after
def rabbitmq_topology(rabbitmq_url: str) -> RabbitTopology:
    from tests.support.topologies.rabbitmq import RabbitTopology

    return RabbitTopology(rabbitmq_url)


@closed_after
def redis_topology(redis_url: str) -> RedisTopology:
    """Fresh streams on the machine's Redis."""
    from tests.support.topologies.redis import RedisTopology

    return RedisTopology(redis_url)


@closed_after
def own_redis_topology(own_redis: OwnRedis) -> RedisTopology:
    """Fresh streams on a ``redis-server`` of the test's own (it may stop and start it)."""
    from tests.support.topologies.redis import RedisTopology

    return RedisTopology(own_redis.url)


EVERY_BROKER = [
    pytest.param("local_topology", marks=pytest.mark.local, id="local"),
    pytest.param("gcp_pubsub_topology", marks=pytest.mark.gcp_pubsub, id="gcp_pubsub"),
    pytest.param("sqs_topology", marks=pytest.mark.sqs, id="sqs"),
    pytest.param("azure_servicebus_topology", marks=pytest.mark.azure_servicebus,
                 id="azure_servicebus"),
    pytest.param("redis_topology", marks=pytest.mark.redis, id="redis"),
    pytest.param("rabbitmq_topology", marks=pytest.mark.rabbitmq, id="rabbitmq"),
]
"""The six brokers' topology fixtures, each marked with its broker: a test parametrised by
``topology_of_every_broker`` runs once per broker."""


@pytest.fixture(params=EVERY_BROKER)
def topology_of_every_broker(request: pytest.FixtureRequest) -> Topology:
    """One parametrised test per broker, each on a fresh topology (``EVERY_BROKER``)."""
    found: Topology = request.getfixturevalue(request.param)
    return found
