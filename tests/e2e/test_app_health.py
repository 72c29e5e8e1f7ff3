"""The app's health gates delivery, end to end on the local driver: the real
``priority-pubsub run`` subprocess, a real HTTP app that comes and goes on a fixed port."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.e2e.helpers import journal_records, publish, queue_rows, total, wait_until
from tests.e2e.scenarios import APP_DOWN_RETRY as RETRY
from tests.support.app import Received, RecordingApp, Reply
from tests.support.servers import free_port
from tests.support.sidecar import (
    SidecarProcess,
    cli,
    local_config,
    start_sidecar,
    write_config,
)


def test_sidecar_started_before_the_app_waits_and_every_first_delivery_is_attempt_1(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = local_config(tmp_path, f"http://127.0.0.1:{port}", retry=RETRY)
    config_path = write_config(tmp_path, config, "publisher.yaml")
    publish(config_path, "high", '{"n": 1}', count=10)
    publish(config_path, "low", '{"n": 2}', count=10)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: _readyz(sidecar) == (503, "app not reachable"), 20)
        time.sleep(20)
        assert _readyz(sidecar)[0] == 503
        assert all(row["attempts"] == 0 for q in ("high", "low")
                   for row in queue_rows(tmp_path / "queues.db", q))  # nothing received
        assert journal_records(tmp_path / "journal") == []
        with RecordingApp(port=port) as app:
            app.wait_for(20, timeout_s=30)
            sidecar.wait_ready(10)
        assert [e["attempt"] for e in app.events()] == [1] * 20
        assert [e["queue"] for e in app.events()] == ["high"] * 10 + ["low"] * 10
    finally:
        sidecar.stop()
    events = Counter(json.loads(line).get("event") for line in sidecar.logs().splitlines()
                     if line.startswith("{"))
    # said once, then at a slow interval (30 s): not once per 0.5 s probe
    assert events["waiting for the app before receiving"] == 1
    assert events["still waiting for the app before receiving"] <= 1


def test_health_path_failing_while_the_port_is_open_delivers_nothing(tmp_path: Path) -> None:
    healthy = threading.Event()

    def behaviour(request: Received) -> Reply:
        if request.path == "/healthz":
            return Reply(200 if healthy.is_set() else 503)
        return Reply(200)

    with RecordingApp(behaviour) as app:
        health = {"path": "/healthz", "interval_s": 0.5, "timeout_s": 0.5, "threshold": 2}
        config = local_config(tmp_path, f"{app.url}/tasks", retry=RETRY,
                              app={"url": f"{app.url}/tasks", "health": health})
        config_path = write_config(tmp_path, config, "publisher.yaml")
        publish(config_path, "high", '{"n": 1}', count=5)
        sidecar = SidecarProcess(tmp_path, config)
        try:
            wait_until(lambda: len(app.received) >= 4, 20)  # several probes answered 503
            time.sleep(3)
            assert {r.path for r in app.received} == {"/healthz"}  # on the host, not /tasks
            assert _readyz(sidecar)[0] == 503
            healthy_at = time.time()
            healthy.set()
            wait_until(lambda: sum(r.path == "/tasks" for r in app.received) == 5, 20)
            assert min(r.at for r in app.received if r.path == "/tasks") >= healthy_at
            # the app goes unhealthy again: after `threshold` failed probes nothing more is sent
            healthy.clear()
            wait_until(lambda: total(sidecar.metrics(), "priority_pubsub_app_up") == 0, 10)
            publish(config_path, "high", '{"n": 2}', count=3)
            time.sleep(2)
            assert sum(r.path == "/tasks" for r in app.received) == 5
            healthy.set()
            wait_until(lambda: sum(r.path == "/tasks" for r in app.received) == 8, 20)
            metrics = sidecar.metrics()
        finally:
            sidecar.stop()
    assert [e["attempt"] for r in app.received if r.path == "/tasks"
            for e in [r.event]] == [1] * 8
    assert total(metrics, "priority_pubsub_app_pauses_total", cause="unhealthy") == 1


def test_app_answering_503_retry_after_slows_down_and_dead_letters_nothing(
    tmp_path: Path,
) -> None:
    busy_until = [0.0]
    answered_busy: list[float] = []

    def behaviour(request: Received) -> Reply:
        if time.monotonic() < busy_until[0]:
            answered_busy.append(request.at)
            return Reply(503, "busy", headers={"Retry-After": "2"})
        return Reply(200, delay_s=0.05)

    concurrency = 8
    with RecordingApp(behaviour) as app:
        # max_delay_s caps the pause: leave room for the app's 2 s
        retry = {**RETRY, "max_delay_s": 5}
        config = local_config(tmp_path, app.url, retry=retry, concurrency=concurrency,
                              queues=[{"name": "high"}])
        config_path = write_config(tmp_path, config, "publisher.yaml")
        sidecar = start_sidecar(tmp_path, config)
        samples: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                samples.append(total(sidecar.metrics(),
                                     "priority_pubsub_effective_concurrency"))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        try:
            samples.append(total(sidecar.metrics(), "priority_pubsub_effective_concurrency"))
            busy_until[0] = time.monotonic() + 10
            watcher.start()
            publish(config_path, "high", '{"n": 1}', count=300)
            wait_until(lambda: queue_rows(tmp_path / "queues.db", "high") == [], 90)
            wait_until(lambda: samples[-1] == concurrency, 30)
        finally:
            stop.set()
            watcher.join(5)
            final = sidecar.metrics()
            sidecar.stop()
    assert samples[0] == concurrency
    assert min(samples) < concurrency / 2
    assert samples[-1] == concurrency  # ... and recovered
    assert queue_rows(tmp_path / "queues.db", "dead") == []
    records = journal_records(tmp_path / "journal", releases=True)
    outcomes = Counter(r["outcome"] for r in records)
    assert outcomes["ack"] == 300
    assert outcomes["dead"] == 0
    assert outcomes["retry"] == 0
    released = [r for r in records if r["outcome"] == "release"]
    assert released
    assert all(r["http_status"] == 503 or r["forwarded_ms"] is None
                            for r in released)
    assert {r["reason"] for r in released if r["http_status"] == 503} == {
        "app busy: 503 with Retry-After 2s"}
    assert {r["attempt"] for r in records if r["outcome"] == "ack"} == {1}  # uncounted
    assert total(final, "priority_pubsub_app_pauses_total", cause="busy") >= 2
    # while paused nothing is delivered: no request arrives well inside the 2 s after a 503
    # (the margins cover requests already on their way when the 503 was answered)
    arrivals = [r.at for r in app.received]
    for busy_at in answered_busy:
        assert not [t for t in arrivals if busy_at + 0.3 < t < busy_at + 1.7], busy_at


def _readyz(sidecar: SidecarProcess) -> tuple[int, str]:
    try:
        answer = httpx.get(f"{sidecar.ops_url}/readyz", timeout=2)
    except httpx.HTTPError:
        return (0, "")
    reason = str(answer.json().get("reason", ""))
    return answer.status_code, reason.partition(":")[0]



def test_check_probes_like_the_gate_and_masks_credentials_in_the_app_url(tmp_path: Path) -> None:
    url = f"http://user:s3cret@127.0.0.1:{free_port()}/tasks"
    config = local_config(tmp_path, url, app={"url": url})
    result = cli("check", config=write_config(tmp_path, config))
    assert result.returncode == 1
    assert "s3cret" not in result.stdout + result.stderr
    assert "FAIL app http://user:***@127.0.0.1:" in result.stderr
    assert "unreachable (ConnectionRefusedError" in result.stderr
