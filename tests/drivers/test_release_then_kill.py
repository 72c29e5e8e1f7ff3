"""Every driver: messages handed back unseen right before their process is killed are received
again by a second process within their lease.

The first process (``tests.support.release_then_die``) receives a few messages, leaves a
waiting receive cut short beside them, releases them as the dispatcher releases a surplus and
is killed with SIGKILL at once. Whatever the broker does with a release and with the dead
process's connection and parked calls, a second consumer gets every message back within one
lease of the kill, each once, and where the broker can release uncounted (local, Redis,
RabbitMQ) with its attempt unchanged.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from priority_pubsub.drivers.base import Driver, Message
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import load_config
from tests.support.sidecar import write_config
from tests.support.topologies.base import Topology, topology_config

COUNT = 5
LEASE_S = {"gcp_pubsub": 10.0}
"""The lease, by driver: Pub/Sub's shortest ack deadline is 10 s; 4 s elsewhere."""
SETTLE_S = 5.0
"""Beyond the lease: a broker's own redelivery tick and this machine's load."""


def _received_again(config: Path, queue: str, deadline: float) -> list[Message]:
    async def receive() -> list[Message]:
        driver: Driver = build_driver(load_config(config))
        await driver.start()
        got: list[Message] = []
        try:
            while len(got) < COUNT and time.monotonic() < deadline:
                wait_s = max(0.1, min(2.0, deadline - time.monotonic()))
                batch = await driver.receive(queue, COUNT, wait_s)
                for message in batch:  # at once: a message back early would lapse meanwhile
                    await driver.ack(message)
                got += batch
        finally:
            await driver.close()
        return got

    return asyncio.run(receive())


@pytest.mark.timeout(120)
def test_released_unseen_then_killed_comes_back_within_the_lease(
    tmp_path: Path, topology_of_every_broker: Topology
) -> None:
    topology = topology_of_every_broker
    lease_s = LEASE_S.get(topology.driver_type, 4.0)
    queue = topology.queue("handed-back", lease_s=lease_s)
    bodies = sorted(f"{n}".encode() for n in range(COUNT))
    for body in bodies:
        topology.publish(queue, body)
    config = write_config(tmp_path, topology_config(
        topology, tmp_path, "http://127.0.0.1:9", [queue], lease={"duration_s": lease_s}))
    dying = subprocess.run(
        [sys.executable, "-m", "tests.support.release_then_die", str(config), queue, str(COUNT)],
        capture_output=True, text=True, timeout=60)
    killed_at = time.monotonic()
    assert dying.returncode == -9, dying.stderr
    [line] = [row for row in dying.stdout.splitlines() if row.startswith("released ")]
    released = line.split()[1:]
    assert len(released) == COUNT, dying.stdout

    back = _received_again(config, queue, killed_at + lease_s + SETTLE_S)
    took_s = time.monotonic() - killed_at
    assert sorted(m.body for m in back) == bodies, (
        f"{len(back)} of {COUNT} back within {lease_s} s + {SETTLE_S} s of the kill")
    assert sorted(m.id for m in back) == sorted(released)
    if topology.driver_type in ("local", "redis", "rabbitmq"):  # released uncounted
        assert {m.attempt for m in back} == {1}, [m.attempt for m in back]
    print(f"{topology.driver_type}: back {took_s:.1f} s after the kill (lease {lease_s} s)")
