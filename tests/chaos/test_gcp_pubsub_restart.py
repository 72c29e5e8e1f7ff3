"""Google's Pub/Sub emulator killed and started again on its port: it keeps nothing in
memory across a restart, so (as ``test_sqs_restart.py`` does for SQS on moto) the test
checks what such a broker allows — readiness turns 503 within seconds, the sidecar never
exits, the topics and subscriptions made again are used, and everything published after the
restart is delivered (what was published before was all settled before the kill)."""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.ledger import Accounting, account
from tests.chaos.outage import broker_outage
from tests.e2e.helpers import wait_until
from tests.support.app import RecordingApp
from tests.support.gcp_pubsub_emulator import Emulator, running_emulator
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess
from tests.support.topologies.base import topology_config

pytestmark = [pytest.mark.chaos, pytest.mark.gcp_pubsub]

BATCH = 40
DOWN_S = 5.0



@pytest.mark.timeout(240)
def test_pubsub_emulator_killed_and_restarted(
    tmp_path: Path, app: RecordingApp, report: list[Accounting], gcp_pubsub_emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.topologies.gcp_pubsub import PubSubTopology

    port = free_port()  # the session's emulator proves the binary; this one is ours
    log = tmp_path / "emulator.log"
    with contextlib.ExitStack() as running:
        emulator = running.enter_context(running_emulator(log, port))
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.address)
        topology = PubSubTopology()
        queues = [topology.queue("high"), topology.queue("low")]
        config = topology_config(topology, tmp_path, app.url, queues, concurrency=4)
        sidecar = SidecarProcess(tmp_path, config)
        published: list[str] = []
        try:
            sidecar.wait_ready(timeout_s=60)
            for n in range(BATCH):
                topology.publish(queues[n % 2], json.dumps(n).encode())
                published.append(str(n))
            wait_until(lambda: len({str(e["data"]) for e in app.events()}) >= BATCH,
                       timeout_s=60)

            # killed: the emulator is gone, and with it every topic
            not_ready_after_s, restarted = broker_outage(
                sidecar, running.close,
                lambda: running.enter_context(running_emulator(log, port)), DOWN_S,
                turned=lambda status: status != 200)
            topology.dead = topology.topic("dead")  # the same names again (same uid)
            topology.dead_reader = topology.subscription("dead-read", topology.dead,
                                                         policy=False)
            assert [topology.queue("high"), topology.queue("low")] == queues
            for n in range(BATCH, 2 * BATCH):
                topology.publish(queues[n % 2], json.dumps(n).encode())
                published.append(str(n))
            wait_until(lambda: len({str(e["data"]) for e in app.events()}) >= 2 * BATCH,
                       timeout_s=90)
            resumed_after_s = time.monotonic() - restarted
            wait_until(lambda: sidecar.ready_status() == 200, timeout_s=30)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]

    seen = Counter(str(e["data"]) for e in app.events())
    result = account(f"Pub/Sub emulator killed {DOWN_S:g} s, restarted", published, seen,
                     set(), set(), note=f"not ready after {not_ready_after_s:.1f} s, all "
                                        f"delivered {resumed_after_s:.1f} s after restart")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == 2 * BATCH
    assert not_ready_after_s < 10
