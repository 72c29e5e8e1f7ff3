"""Service Bus end to end: the shared scenarios through the test broker (AMQP on 127.0.0.1),
with the real azure-servicebus SDK inside the real ``priority-pubsub run`` subprocess."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from tests.e2e.scenarios import SidecarScenarios
from tests.support.app import RecordingApp, Reply
from tests.support.azure_servicebus import ServiceBusBroker
from tests.support.sidecar import SidecarProcess
from tests.support.topologies.azure_servicebus import ServiceBusTopology
from tests.support.topologies.base import topology_config

pytestmark = pytest.mark.azure_servicebus


class TestServiceBusScenarios(SidecarScenarios):
    # The SDK's first connection to the test broker can take a while on a busy machine.
    ready_timeout_s: ClassVar[float] = 30
    # Each publish opens a sender link on the test broker (most of a second on a busy machine):
    # the publish-while-waiting scenario publishes fewer, in the same batches-while-waiting way.
    waiting_batches: ClassVar[int] = 4
    waiting_batch_size: ClassVar[int] = 8

    @pytest.fixture
    def topology(self, azure_servicebus_topology: ServiceBusTopology) -> ServiceBusTopology:
        return azure_servicebus_topology


def test_application_properties_reach_the_app_and_the_queue_is_left_empty(
    tmp_path: Path, app: RecordingApp, azure_servicebus_topology: ServiceBusTopology
) -> None:
    queue = azure_servicebus_topology.queue("props")
    azure_servicebus_topology.publish(queue, b'{"n": 1}', {"origin": "e2e"})
    app.behaviour = lambda _: Reply(200)
    sidecar = TestServiceBusScenarios().start(
        tmp_path, topology_config(azure_servicebus_topology, tmp_path, app.url, [queue]))
    try:
        [request] = app.wait_for(1)
    finally:
        assert sidecar.stop() == 0
    assert request.headers["metadata.origin"] == "e2e"
    assert request.event["data"] == {"n": 1}
    counts = azure_servicebus_topology.broker.counts(queue)
    assert (counts.active, counts.locked, counts.dead_lettered) == (0, 0, 0)


def test_broker_unreachable_at_start_is_waited_for_not_ready_never_exit(
    tmp_path: Path, app: RecordingApp
) -> None:
    """``run`` used to exit 1 after ~0.6 s (its start retry reused the client it
    had just closed). Now: not ready while the broker is down, delivering once it is up."""
    late = ServiceBusBroker()  # its port is chosen now; it listens only after start()
    topology = ServiceBusTopology(late)
    queue = f"{topology.prefix}-late"
    sidecar = SidecarProcess(tmp_path, topology_config(topology, tmp_path, app.url, [queue]))
    try:
        time.sleep(10)
        assert sidecar.process.poll() is None, sidecar.logs()
        assert httpx.get(f"{sidecar.ops_url}/readyz", timeout=2).status_code == 503
        late.start()
        late.create_queue(queue, lock_duration_s=2.0, max_delivery_count=20)
        topology.publish(queue, b'{"n": 1}')
        [received] = app.wait_for(1, timeout_s=40)
        assert received.event["data"] == {"n": 1}
        sidecar.wait_ready(timeout_s=10)
    finally:
        assert sidecar.stop() == 0
        topology.close()
        late.stop()
