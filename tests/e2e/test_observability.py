"""What the sidecar tells operators: metrics that add up, readiness, logs without secrets."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import journal_records, publish, queue_rows, samples, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local


def mixed_behaviour(received: Received) -> Reply:
    kind = received.event["data"]["kind"]
    attempt = received.event["attempt"]
    if kind == "retry-once":
        return Reply(500 if attempt == 1 else 200)
    if kind == "fatal":
        return Reply(400)
    if kind == "always-500":
        return Reply(500)
    return Reply(200)


def test_metric_counts_equal_journal_counts_equal_app_counts(
    tmp_path: Path, app: RecordingApp
) -> None:
    app.behaviour = mixed_behaviour
    config = local_config(tmp_path, app.url, concurrency=3,
                          retry={"max_attempts": 2, "initial_delay_s": 0.1, "max_delay_s": 0.2})
    path = write_config(tmp_path, config)
    plan = {"ok": ("high", 10), "retry-once": ("normal", 5), "fatal": ("low", 3),
            "always-500": ("low", 2)}
    for kind, (queue, count) in plan.items():
        publish(path, queue, json.dumps({"kind": kind}), count=count)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        app.wait_for(27)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 27, timeout_s=15)
        text = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0

    journal = Counter((r["queue"], r["outcome"]) for r in journal_records(tmp_path / "journal"))
    assert journal == {("high", "ack"): 10, ("normal", "retry"): 5, ("normal", "ack"): 5,
                       ("low", "dead"): 5, ("low", "retry"): 2}
    settled = samples(text, "priority_pubsub_messages_settled_total")
    from_metrics = Counter({(dict(k)["queue"], dict(k)["outcome"]): int(v)
                            for k, v in settled.items() if v})
    # every settle is counted and journaled alike, a wake-up's surplus hand-back included
    # (a 'release': when one comes is up to the wake-ups, which a test cannot schedule)
    every_settle = Counter((r["queue"], r["outcome"])
                           for r in journal_records(tmp_path / "journal", releases=True))
    assert from_metrics == every_settle
    received = samples(text, "priority_pubsub_messages_received_total")
    app_seen = Counter(r.event["queue"] for r in app.received)
    assert {dict(k)["queue"]: int(v) for k, v in received.items()} == dict(app_seen)
    assert sum(app_seen.values()) == 27
    forwards = samples(text, "priority_pubsub_forward_seconds_count")
    assert sum(forwards.values()) == 27
    waits = samples(text, "priority_pubsub_wait_seconds_count")
    assert sum(waits.values()) == 27
    assert samples(text, "priority_pubsub_in_flight") == {(): 0.0}
    assert len(queue_rows(tmp_path / "queues.db", "dead")) == 5


def test_readiness_follows_the_queue_file_and_draining(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = lambda _: Reply(delay_s=2)
    config = local_config(tmp_path, app.url, shutdown={"grace_s": 10})
    path = write_config(tmp_path, config)
    publish(path, "high", "{}")  # creates the file
    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready()
        db = tmp_path / "queues.db"
        hidden = tmp_path / "elsewhere.db"
        shutil.move(db, hidden)
        ready = httpx.get(f"{sidecar.ops_url}/readyz")
        assert ready.status_code == 503
        assert "unusable" in ready.json()["reason"]
        assert httpx.get(f"{sidecar.ops_url}/healthz").status_code == 200  # alive all along
        shutil.move(hidden, db)
        assert httpx.get(f"{sidecar.ops_url}/readyz").status_code == 200
        app.wait_for(1)
        sidecar.terminate()
        wait_until(lambda: _status(f"{sidecar.ops_url}/readyz") == 503, timeout_s=5)
    finally:
        assert sidecar.stop() == 0


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return 0


def test_queue_depth_metric_is_refreshed(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = lambda _: Reply(delay_s=30)
    config = local_config(tmp_path, app.url, concurrency=1,
                          server={"host": "127.0.0.1", "depth_interval_s": 0.2})
    publish(write_config(tmp_path, config), "low", "{}", count=6)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        app.wait_for(1)

        def depth_is_five() -> bool:
            depth = samples(sidecar.metrics(), "priority_pubsub_queue_depth")
            return depth.get((("queue", "low"),)) == 5.0

        wait_until(depth_is_five, timeout_s=10)
    finally:
        sidecar.kill()
        sidecar.wait()


def test_logs_carry_delivery_fields_but_never_secrets_or_bodies(
    tmp_path: Path, app: RecordingApp
) -> None:
    app.behaviour = lambda r: Reply(500 if r.event["attempt"] == 1 else 200)
    config = local_config(tmp_path, app.url, log={"level": "debug", "format": "json"},
                          app={"url": app.url, "api_token": "tok-MARKER-SECRET-77"},
                          retry={"max_attempts": 3, "initial_delay_s": 0.1, "max_delay_s": 0.1})
    publish(write_config(tmp_path, config), "normal", '{"secret_body": "BODY-MARKER-42"}',
            attributes={"tier": "gold"})
    sidecar = SidecarProcess(tmp_path, config)
    try:
        requests = app.wait_for(2)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 2, timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    assert requests[0].headers["dapr-api-token"] == "tok-MARKER-SECRET-77"  # it was in use
    logs = sidecar.logs()
    assert "tok-MARKER-SECRET-77" not in logs
    assert "BODY-MARKER-42" not in logs
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    deliveries = [line for line in lines if line.get("event") in ("delivered", "not delivered")]
    assert [d["outcome"] for d in deliveries] == ["retry", "ack"]
    for line in deliveries:
        assert {"message_id", "queue", "priority", "attempt", "outcome", "duration_ms",
                "level", "timestamp"} <= line.keys()


def test_the_live_capacity_gauges(tmp_path: Path, app: RecordingApp) -> None:
    """``priority_pubsub_oldest_wait_seconds`` where the broker tells (local does),
    ``priority_pubsub_workers_needed`` for a queue with ``wait_slo_s`` (and only for it), from
    the deliveries and the change in depth it saw (a backlog there at the start is none)."""
    app.behaviour = lambda _: Reply(delay_s=0.5)
    config = local_config(tmp_path, app.url, concurrency=1,
                          server={"host": "127.0.0.1", "port": 0, "depth_interval_s": 0.2})
    config["queues"] = [{"name": "high", "wait_slo_s": 5}, {"name": "normal"}, {"name": "low"}]
    path = write_config(tmp_path, config)
    publish(path, "high", "{}", count=3)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        app.wait_for(1, timeout_s=20)
        for _ in range(4):  # arrivals while it runs: faster than one worker serves them
            publish(path, "high", "{}")
            time.sleep(0.25)
        app.wait_for(4, timeout_s=20)
        time.sleep(0.3)  # a depth refresh after the last arrival
        text = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    ages = {dict(k)["queue"]: v for k, v in samples(text, "priority_pubsub_oldest_wait_seconds")
            .items()}
    assert ages["high"] >= 1.0  # messages wait behind one 0.5 s worker since the start
    needed = {dict(k)["queue"]: v for k, v in samples(text, "priority_pubsub_workers_needed")
              .items()}
    assert set(needed) == {"high"}
    assert needed["high"] >= 1
