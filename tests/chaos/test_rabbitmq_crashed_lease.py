"""RabbitMQ requeues a dead connection's unacked deliveries at once: without care, a replica
killed mid-task has its tasks started again elsewhere while its app still runs them. Measured
both ways on one schedule (long tasks, a steady replica with free slots, kill -9 of the other
while it holds tasks): with ``hold_redelivered: false`` the app gets copies of the same
message running at once; with the default (a redelivered delivery parked for one lease) it
never does, and nothing is lost."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.chaos.ledger import Accounting, account, drain_bodies
from tests.e2e.helpers import wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, write_config
from tests.support.topologies.base import topology_config
from tests.support.topologies.rabbitmq import RabbitTopology

pytestmark = [pytest.mark.chaos, pytest.mark.rabbitmq]

TASK_S = 1.5
LEASE_S = 4.0
MESSAGES = 40
KILLS = 2


def overlapping(app: RecordingApp) -> set[str]:
    """Ids the app was running twice at the same moment (a copy arrived before the task of
    an earlier one ended)."""
    starts: dict[str, list[float]] = defaultdict(list)
    for received in app.received:
        starts[str(received.event["data"])].append(received.at)
    return {key for key, times in starts.items()
            if any(b - a < TASK_S for a, b in itertools.pairwise(sorted(times)))}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hold", [False, True], ids=["requeued-at-once", "held-for-a-lease"])
def test_a_killed_replicas_tasks_do_not_run_twice_at_once(
    tmp_path: Path, app: RecordingApp, report: list[Accounting],
    rabbitmq_topology: RabbitTopology, hold: bool,
) -> None:
    app.behaviour = lambda _: Reply(delay_s=TASK_S)
    queue = rabbitmq_topology.queue("tasks")
    config = topology_config(rabbitmq_topology, tmp_path, app.url, [queue],
                             lease={"duration_s": LEASE_S}, shutdown={"grace_s": 5},
                             retry={"max_attempts": 10, "initial_delay_s": 0.2,
                                    "max_delay_s": 1})
    config["driver"]["hold_redelivered"] = hold
    for n in range(MESSAGES):
        rabbitmq_topology.publish(queue, json.dumps(n).encode())
    steady = SidecarProcess(tmp_path, {**config, "concurrency": 8}, name="steady")
    victim = SidecarProcess(tmp_path, {**config, "concurrency": 4}, name="victim-0")
    try:
        steady.wait_ready()
        for kill in range(KILLS):
            victim.wait_ready()
            time.sleep(TASK_S / 2)  # mid-task: the victim's app is running its four
            victim.kill()
            victim.wait()
            victim = SidecarProcess(tmp_path, {**config, "concurrency": 4},
                                    name=f"victim-{kill + 1}")
        wait_until(lambda: len({str(r.event["data"]) for r in app.received}) >= MESSAGES,
                   timeout_s=120)
        victim.wait_ready()  # a SIGTERM before its handlers are set would kill it
    finally:
        assert steady.stop() == 0
        assert victim.stop() == 0

    twice_at_once = overlapping(app)
    waiting = {str(json.loads(b)) for b in drain_bodies(write_config(tmp_path, config),
                                                         [queue])}
    seen: Counter[str] = Counter()
    for received in app.received:
        seen[str(received.event["data"])] += 1
    result = account(f"rabbitmq kill -9 x{KILLS}, hold_redelivered {hold}",
                     [str(n) for n in range(MESSAGES)], seen, waiting, set(),
                     note=f"{len(twice_at_once)} ran twice at once; task {TASK_S} s, "
                          f"lease {LEASE_S} s")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == MESSAGES
    if hold:
        assert twice_at_once == set()
