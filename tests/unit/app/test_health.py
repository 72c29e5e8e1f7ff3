"""The app's health state and its throttled outage log (credentials masked), on an injected
clock."""

from __future__ import annotations

import structlog

from priority_pubsub.app.health import HealthState, OutageLog, probe_url
from priority_pubsub.core.redaction import SecretUrl, mask_url
from tests.unit.app.test_circuit import FakeClock


def test_health_starts_gated_then_threshold_failures_take_it_down() -> None:
    clock = FakeClock()
    state = HealthState(threshold=3, clock=clock)
    assert not state.up
    assert "waiting for the app" in state.reason
    assert not state.probe_failed("ConnectionRefusedError")
    assert state.reason == "app not reachable: ConnectionRefusedError"
    assert state.probe_passed()
    assert state.up
    assert state.ever_up
    assert not state.probe_failed("health check /healthz answered 500")
    assert not state.probe_failed("health check /healthz answered 500")
    clock.advance(7)
    assert state.probe_failed("health check /healthz answered 500")
    assert not state.up
    assert state.reason == "app unhealthy: health check /healthz answered 500"
    clock.advance(3)
    assert state.down_for_s() == 3


def test_a_failed_connect_takes_it_down_at_once_and_a_probe_brings_it_back() -> None:
    state = HealthState(threshold=3, clock=FakeClock())
    state.probe_passed()
    assert state.went_down("app not reachable: connection refused")
    assert not state.went_down("again")  # already down: one transition
    assert state.probe_passed()
    assert state.up


def test_outage_log_once_then_at_a_slow_interval_with_credentials_masked() -> None:
    clock = FakeClock()
    state = HealthState(threshold=1, clock=clock)
    url = SecretUrl("http://user:s3cret@127.0.0.1:8000/tasks")
    outage = OutageLog(url, every_s=30, clock=clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(60):  # a probe every 0.5 s for ~30 s
            outage.down(state)
            clock.advance(0.5)
        outage.down(state)
    assert [entry["event"] for entry in logs] == [
        "waiting for the app before receiving", "still waiting for the app before receiving"]
    assert all("s3cret" not in str(entry) for entry in logs)
    assert logs[0]["app"] == "http://user:***@127.0.0.1:8000/tasks"


def test_mask_url_and_probe_url() -> None:
    assert mask_url("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000/x"
    assert mask_url("https://tok@app.internal/x") == "https://***@app.internal/x"
    assert str(probe_url("http://u:p@10.0.0.1:8000/tasks/run?x=1", "/healthz")) == (
        "http://10.0.0.1:8000/healthz")
