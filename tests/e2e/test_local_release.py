"""A message handed back unseen keeps its attempt, and the hand-back is
journaled and counted like any settle."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from priority_pubsub.commands.ops import open_driver
from priority_pubsub.settings.config import load_config
from tests.e2e.helpers import journal_records, queue_rows, samples, wait_until
from tests.support.app import RecordingApp
from tests.support.sidecar import local_config, start_sidecar, write_config

pytestmark = pytest.mark.local
ROUNDS = 10


async def publish_low_then_high(config: Path, rounds: int, app: RecordingApp) -> None:
    """From another process than the sidecar: it sees both in one wake-up (``data_version``
    poll), leases both, keeps the high one and hands the low one back unseen."""
    async with open_driver(load_config(config)) as driver:
        publisher = driver
        assert hasattr(publisher, "publish")
        for n in range(rounds):
            await publisher.publish("lo", f'{{"n": {n}}}'.encode())
            await asyncio.sleep(0.02)
            await publisher.publish("hi", f'{{"n": {n}}}'.encode())
            with contextlib.suppress(AssertionError):  # the test says what went missing
                await asyncio.to_thread(app.wait_for, 2 * (n + 1), 3)
            await asyncio.sleep(0.3)  # idle again: the sidecar waits on every queue


def test_a_low_message_released_for_a_high_one_is_delivered_as_attempt_1(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = local_config(
        tmp_path, app.url, concurrency=1, queues=[{"name": "hi"}, {"name": "lo"}],
        retry={"max_attempts": 1, "initial_delay_s": 0.2, "max_delay_s": 1},
    )
    config_path = write_config(tmp_path, config)
    sidecar = start_sidecar(tmp_path, config)
    try:
        asyncio.run(publish_low_then_high(config_path, ROUNDS, app))
        with contextlib.suppress(AssertionError):  # the assertions below say what is missing
            wait_until(lambda: len(app.received) >= 2 * ROUNDS, timeout_s=10)
        metrics = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    dead = queue_rows(tmp_path / "queues.db", "dead")
    assert dead == [], [d["attributes"]["dead_letter_reason"] for d in dead]
    delivered = sorted((r.event["queue"], r.event["attempt"]) for r in app.received)
    assert delivered == sorted([("hi", 1), ("lo", 1)] * ROUNDS)
    records = journal_records(tmp_path / "journal", releases=True)
    released = [r for r in records if r["outcome"] == "release"]
    assert released, "the scenario never handed a message back: it tested nothing"
    assert {(r["queue"], r["reason"]) for r in released} == {("lo", "surplus: returned unseen")}
    assert [r["outcome"] for r in records if r["outcome"] != "release"] == ["ack"] * 2 * ROUNDS
    settled = samples(metrics, "priority_pubsub_messages_settled_total")
    release_key = (("outcome", "release"), ("priority", "1"), ("queue", "lo"))
    assert settled[release_key] == len(released)
