"""Shutdown, crashes and replicas: no message lost, none delivered twice while leased."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.helpers import journal_records, publish, queue_rows, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local


def test_sigterm_lets_the_task_finish_within_grace(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = lambda _: Reply(delay_s=1.5)
    config = local_config(tmp_path, app.url, shutdown={"grace_s": 10})
    [message_id] = publish(write_config(tmp_path, config), "high", "{}")
    sidecar = SidecarProcess(tmp_path, config)
    app.wait_for(1)
    sidecar.terminate()
    started = time.monotonic()
    assert sidecar.wait(15) == 0
    assert 0.5 < time.monotonic() - started < 10
    assert queue_rows(tmp_path / "queues.db", "high") == []
    [record] = journal_records(tmp_path / "journal")
    assert (record["message_id"], record["outcome"]) == (message_id, "ack")



def test_kill_9_mid_task_loses_nothing(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = lambda _: Reply(delay_s=0.2)
    config = local_config(tmp_path, app.url, concurrency=3, lease={"duration_s": 2})
    ids = set(publish(write_config(tmp_path, config), "normal", '{"work": 1}', count=30))
    first = SidecarProcess(tmp_path, config, name="first")
    app.wait_for(8, timeout_s=20)
    first.kill()
    assert first.wait() != 0
    killed_ms = time.time_ns() // 1_000_000
    in_flight = [row["id"] for row in queue_rows(tmp_path / "queues.db", "normal")
                 if row["leased"]]
    assert in_flight, "the kill should have caught messages mid-task"
    second = SidecarProcess(tmp_path, config, name="second")
    try:
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "normal"), timeout_s=40)
    finally:
        assert second.stop() == 0
    delivered = Counter(r.event["id"] for r in app.received)
    assert set(delivered) == ids  # every message reached the app; none is left in the queue
    # The messages the kill caught leased were delivered again, by the second sidecar, whose
    # journal (flushed on its SIGTERM) records their ack. (The first one's last second of
    # journal died with it: the journal is flushed every second, not per record.)
    second_acks = {r["message_id"] for r in journal_records(tmp_path / "journal")
                   if r["outcome"] == "ack" and r["received_ms"] >= killed_ms}
    assert set(in_flight) <= second_acks


def test_idle_replica_takes_a_crashed_replicas_message_when_its_lease_ends(
    tmp_path: Path, app: RecordingApp
) -> None:
    """kill -9 of the replica holding a message: the idle survivor's waiting receive must
    wake at the lease's end (2 s), not at its next idle wake-up (20 s)."""
    app.behaviour = lambda _: Reply(delay_s=60 if len(app.received) == 1 else 0)
    config = local_config(tmp_path, app.url, lease={"duration_s": 2})
    publish(write_config(tmp_path, config), "high", "{}")
    holder = SidecarProcess(tmp_path, config, name="holder")
    app.wait_for(1)
    survivor = SidecarProcess(tmp_path, config, name="survivor")
    survivor.wait_ready()
    time.sleep(1.0)  # the survivor is now in its idle wait (woken only by the holder's extends)
    holder.kill()
    killed = time.monotonic()
    holder.wait()
    try:
        [_, again] = app.wait_for(2, timeout_s=25)
        waited_s = time.monotonic() - killed
    finally:
        assert survivor.stop() == 0
    assert again.event["attempt"] == 2
    assert waited_s < 2 + 2.5, f"picked up {waited_s:.1f}s after the kill (lease 2 s)"


@pytest.mark.parametrize("fsync", ["none", "every_line"])
def test_kill_9_loses_no_journal_line_of_a_settled_message(
    tmp_path: Path, app: RecordingApp, fsync: str
) -> None:
    """Every acked (deleted) message has its journal line, even when the sidecar is killed
    a quarter second after the last one is settled (a buffer flushed every second lost
    those lines). The line is written when the broker's settle returns: a kill in the
    instant between the two can still lose it, so the kill waits for that instant to pass
    (on a loaded machine the sidecar may not get the CPU at once)."""
    config = local_config(tmp_path, app.url, concurrency=4,
                          journal={"path": str(tmp_path / "journal"), "rotate_mb": 64,
                                   "fsync": fsync})
    ids = publish(write_config(tmp_path, config), "high", "{}", count=300)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "high"), timeout_s=60,
                   interval_s=0.01)
        time.sleep(0.25)
    finally:
        sidecar.kill()
        sidecar.wait()
    records = journal_records(tmp_path / "journal")
    assert Counter(r["outcome"] for r in records) == {"ack": 300}
    assert sorted(r["message_id"] for r in records) == sorted(ids)
