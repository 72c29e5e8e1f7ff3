"""The Service Bus test broker killed with SIGKILL and started again on its port. It keeps
everything in memory (as moto and the Pub/Sub emulator do, ``test_sqs_restart.py`` and
``test_gcp_pubsub_restart.py``), so the test checks what such a broker allows: readiness turns
within seconds, the sidecar never exits, it becomes ready again by itself, and everything
published after the restart is delivered (what was published before was all settled before
the kill). The app fails the first delivery of every fifth message, so retries with a delay
(a scheduled copy sent through the driver's own sender) run before the kill and again after
it, through senders whose connection the kill cut.

The test's publisher opens a fresh SDK client for each batch, closed after it, and each batch
runs under a deadline: an SDK connection to the killed broker is never reused (the sync SDK
could wait on it for good), and a publisher that hangs fails the test instead of hanging it.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from priority_pubsub.delivery.receiver import RECEIVE_BACKOFF_MAX_S
from tests.chaos.ledger import Accounting, account, drain_bodies
from tests.chaos.outage import broker_outage
from tests.support.app import Received, RecordingApp, Reply
from tests.support.azure_servicebus.process import BrokerProcess
from tests.support.sidecar import SidecarProcess, sidecar_config
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.azure_servicebus]

QUEUES = ["chaos-high", "chaos-low"]
BATCH = 30
DOWN_S = 8.0
PUBLISH_DEADLINE_S = 60.0
RETRIED_EVERY = 5
"""The app fails the first delivery of every fifth message: it is retried after a delay."""


def _publish(connection_string: str, first: int, count: int) -> list[str]:
    """Bodies ``first`` .. ``first + count - 1`` alternately to the two queues, through a
    client of their own; returns them as the app will see them."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    def send() -> list[str]:
        with ServiceBusClient.from_connection_string(connection_string,
                                                     retry_total=2) as client:
            senders = [client.get_queue_sender(queue) for queue in QUEUES]
            try:
                for n in range(first, first + count):
                    senders[n % 2].send_messages(
                        ServiceBusMessage(json.dumps(n), content_type="application/json"),
                        timeout=10)
            finally:
                for sender in senders:
                    sender.close()
        return [str(n) for n in range(first, first + count)]

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sb-publisher")
    try:
        return pool.submit(send).result(timeout=PUBLISH_DEADLINE_S)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"the test's publisher hung over {PUBLISH_DEADLINE_S:g} s") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _all_settled(app: RecordingApp, published: list[str]) -> bool:
    """Every published body delivered, the ones the app failed once delivered again."""
    seen = Counter(str(e["data"]) for e in app.events())
    return all(seen[n] >= (2 if int(n) % RETRIED_EVERY == 0 else 1) for n in published)


@pytest.mark.timeout(240)
def test_servicebus_broker_killed_and_restarted(
    tmp_path: Path, report: list[Accounting]
) -> None:
    failed_once: set[str] = set()

    def fail_every_fifth_once(received: Received) -> Reply:
        """A retry with a delay is a scheduled copy sent through the driver's sender: after
        the restart, through a sender whose connection the kill cut."""
        data = str(received.event["data"])
        if int(data) % RETRIED_EVERY == 0 and data not in failed_once:
            failed_once.add(data)
            return Reply(status=500)
        return Reply()

    with RecordingApp(behaviour=fail_every_fifth_once) as app:
        _run(tmp_path, app, report, failed_once)


def _run(tmp_path: Path, app: RecordingApp, report: list[Accounting],
         failed_once: set[str]) -> None:
    broker = BrokerProcess(QUEUES, tmp_path / "broker.log", lock_duration_s=2.0,
                           max_delivery_count=20)
    broker.start()
    try:
        driver = {"type": "azure_servicebus", "max_wait_s": 2,
                  "connection_string": broker.connection_string}
        config = sidecar_config(tmp_path, app.url, driver, QUEUES, concurrency=4)
        sidecar = SidecarProcess(tmp_path, config)
        published: list[str] = []
        try:
            sidecar.wait_ready(timeout_s=30)
            published += _publish(broker.connection_string, 0, BATCH)
            # every retry done before the kill (a scheduled copy would die with the broker)
            wait_until(lambda: _all_settled(app, published), timeout_s=60)

            not_ready_after_s, restarted = broker_outage(
                sidecar, broker.kill_9, broker.start, DOWN_S,
                turned=lambda status: status != 200, turn_timeout_s=15)
            wait_until(lambda: sidecar.ready_status() == 200, timeout_s=60, interval_s=0.1)
            ready_again_after_s = time.monotonic() - restarted
            published += _publish(broker.connection_string, BATCH, BATCH)
            wait_until(lambda: _all_settled(app, published), timeout_s=90)
            resumed_after_s = time.monotonic() - restarted
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
        waiting = {body.decode() for body in drain_bodies(sidecar.config_path, QUEUES)}
    finally:
        broker.close()

    seen = Counter(str(e["data"]) for e in app.events())
    seen.subtract(failed_once)  # the deliveries the app failed on purpose are not duplicates
    result = account(f"Service Bus broker killed {DOWN_S:g} s", published, seen, waiting,
                     set(), note=f"{len(failed_once)} retried; not ready after "
                                 f"{not_ready_after_s:.1f} s; ready again "
                                 f"{ready_again_after_s:.1f} s, all delivered "
                                 f"{resumed_after_s:.1f} s after restart")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == result.acked == 2 * BATCH
    assert len(failed_once) == 2 * BATCH // RETRIED_EVERY  # retried before and after the kill
    assert not_ready_after_s < 10
    # the receiver's longest backoff, the SDK's own retries (about 3.5 s) and a loaded machine
    assert ready_again_after_s < RECEIVE_BACKOFF_MAX_S + 15
