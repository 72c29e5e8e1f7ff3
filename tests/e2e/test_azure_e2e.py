"""Service Bus end to end: the test broker (AMQP on 127.0.0.1) -> the real ``priority-pubsub
run`` subprocess (azure-servicebus SDK inside) -> a real HTTP app."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue

from tests.e2e.helpers import journal_records, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.servicebus_broker import ServiceBusBroker
from tests.support.sidecar import SidecarProcess, sidecar_config, start_sidecar

pytestmark = pytest.mark.azure


@pytest.fixture(scope="module")
def broker() -> Iterator[ServiceBusBroker]:
    with ServiceBusBroker() as running:
        yield running


class Bus:
    def __init__(self, broker: ServiceBusBroker) -> None:
        self.broker = broker
        self.prefix = f"e{uuid.uuid4().hex[:8]}"
        self.client = ServiceBusClient.from_connection_string(broker.connection_string)

    def queue(self, suffix: str, lock_s: float = 2.0) -> str:
        name = f"{self.prefix}-{suffix}"
        self.broker.create_queue(name, lock_duration_s=lock_s, max_delivery_count=20)
        return name

    def send(self, queue: str, *bodies: str) -> None:
        with self.client.get_queue_sender(queue) as sender:
            for body in bodies:
                sender.send_messages(
                    ServiceBusMessage(
                        body,
                        content_type="application/json",
                        application_properties={"origin": "e2e"},
                    )
                )

    def dead_letters(self, queue: str) -> list[Any]:
        with self.client.get_queue_receiver(
            queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
        ) as receiver:
            found = receiver.receive_messages(max_message_count=20, max_wait_time=1)
            for message in found:
                receiver.complete_message(message)
            return list(found)

    def config(
        self, directory: Path, app_url: str, queues: list[str], **overrides: Any
    ) -> dict[str, Any]:
        driver = {"type": "azure_servicebus", "max_wait_s": 2,
                  "connection_string": self.broker.connection_string}
        defaults = {
            "app": {"url": app_url, "timeout_s": 30, "fatal_codes": [422]},
            "retry": {"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 4},
            "shutdown": {"grace_s": 1},
        }
        return sidecar_config(directory, app_url, driver, queues, **{**defaults, **overrides})


# The Service Bus SDK's first connection to the test broker can take a while on a busy machine.
run_sidecar = functools.partial(start_sidecar, ready_timeout_s=30)

@pytest.fixture
def bus(broker: ServiceBusBroker) -> Iterator[Bus]:
    found = Bus(broker)
    yield found
    found.client.close()



def test_strict_priority_across_two_queues(tmp_path: Path, app: RecordingApp, bus: Bus) -> None:
    high, low = bus.queue("high"), bus.queue("low")
    app.behaviour = lambda _: Reply(delay_s=0.3)
    bus.send(low, *(f'{{"n": {n}}}' for n in range(5)))
    bus.send(high, *(f'{{"n": {n}}}' for n in range(3)))
    sidecar = run_sidecar(tmp_path, bus.config(tmp_path, app.url, [high, low]))
    try:
        received = app.wait_for(8, timeout_s=40)
    finally:
        assert sidecar.stop() == 0
    order = [r.event["queue"] for r in received]
    assert order[:3] == [high] * 3, order
    assert sorted(order) == sorted([high] * 3 + [low] * 5)
    assert received[0].headers["metadata.origin"] == "e2e"
    assert bus.broker.counts(high).active == bus.broker.counts(low).active == 0


def test_task_three_times_the_lock_is_delivered_once(
    tmp_path: Path, app: RecordingApp, bus: Bus
) -> None:
    high = bus.queue("long", lock_s=1.0)
    app.behaviour = lambda _: Reply(delay_s=3.5)
    bus.send(high, '"long"')
    sidecar = run_sidecar(tmp_path, bus.config(tmp_path, app.url, [high], lease={"duration_s": 1}))
    try:
        app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=20)
        time.sleep(1.5)
    finally:
        assert sidecar.stop() == 0
    assert len(app.received) == 1
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["attempt"]) == ("ack", 1)


def _flaky_doomed_or_fatal(request: Received) -> Reply:
    data = request.event["data"]
    if data == "fatal":
        return Reply(422)
    if data == "flaky" and request.event["attempt"] >= 2:
        return Reply(200)
    return Reply(503)


def test_retry_max_attempts_and_fatal_codes_dead_letter_with_reason(
    tmp_path: Path, app: RecordingApp, bus: Bus
) -> None:
    high = bus.queue("retry")
    app.behaviour = _flaky_doomed_or_fatal
    bus.send(high, '"flaky"', '"doomed"', '"fatal"')
    sidecar = run_sidecar(tmp_path, bus.config(tmp_path, app.url, [high], concurrency=3))
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 6, timeout_s=40)
    finally:
        assert sidecar.stop() == 0
    attempts: dict[str, list[int]] = {}
    for request in app.received:
        attempts.setdefault(request.event["data"], []).append(request.event["attempt"])
    assert attempts == {"flaky": [1, 2], "doomed": [1, 2, 3], "fatal": [1]}
    letters = {b"".join(m.body).decode(): m for m in bus.dead_letters(high)}
    assert set(letters) == {'"doomed"', '"fatal"'}
    assert "max attempts" in (letters['"doomed"'].dead_letter_reason or "")
    assert "422" in (letters['"fatal"'].dead_letter_reason or "")
    assert bus.broker.counts(high).active == 0


def test_sigterm_abandons_unfinished_messages_at_once(
    tmp_path: Path, app: RecordingApp, bus: Bus
) -> None:
    high = bus.queue("busy", lock_s=60.0)
    app.behaviour = lambda _: Reply(delay_s=30)
    bus.send(high, '"busy"')
    sidecar = run_sidecar(tmp_path, bus.config(tmp_path, app.url, [high], lease={"duration_s": 60}))
    try:
        app.wait_for(1)
        sidecar.terminate()
        stopped = time.monotonic()
        assert sidecar.wait(timeout_s=20) == 0
    finally:
        sidecar.stop()
    assert time.monotonic() - stopped < 15
    counts = bus.broker.counts(high)
    assert (counts.active, counts.locked) == (1, 0)  # back now, not after the 60 s lock
    with bus.client.get_queue_receiver(high, prefetch_count=0) as receiver:
        [message] = receiver.receive_messages(max_wait_time=2)
        assert message.delivery_count == 1
        receiver.complete_message(message)


def test_broker_unreachable_at_start_is_waited_for_not_ready_never_exit(
    tmp_path: Path, app: RecordingApp
) -> None:
    """Issue #14: ``run`` used to exit 1 after ~0.6 s (its start retry reused the client it
    had just closed). Now: not ready while the broker is down, delivering once it is up."""
    late = ServiceBusBroker()  # its port is chosen now; it listens only after start()
    bus = Bus(late)
    queue = f"{bus.prefix}-late"
    config = bus.config(tmp_path, app.url, [queue])
    sidecar = SidecarProcess(tmp_path, config)
    try:
        time.sleep(10)
        assert sidecar.process.poll() is None, sidecar.logs()
        assert httpx.get(f"{sidecar.ops_url}/readyz", timeout=2).status_code == 503
        late.start()
        late.create_queue(queue, lock_duration_s=2.0, max_delivery_count=20)
        bus.send(queue, '{"n": 1}')
        [received] = app.wait_for(1, timeout_s=40)
        assert received.event["data"] == {"n": 1}
        sidecar.wait_ready(timeout_s=10)
    finally:
        assert sidecar.stop() == 0
        bus.client.close()
        late.stop()
