"""The app-channel state machines on an injected clock: circuit breaker, AIMD limiter with
the "not now" pause, Retry-After parsing, the health state and its throttled outage log."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import structlog

from priority_pubsub.app.backpressure import AimdLimiter, parse_retry_after
from priority_pubsub.app.circuit import BreakerState, CircuitBreaker
from priority_pubsub.app.health import HealthState, OutageLog, probe_url
from priority_pubsub.core.redaction import SecretUrl, mask_url


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- circuit breaker ----------------------------------------------------------------------

def test_breaker_opens_after_n_consecutive_failures_only() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(3, open_s=10, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()  # the run is broken: counting starts again
    assert not breaker.record_failure()
    assert not breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.permits() is None
    assert breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    assert breaker.permits() == 0
    assert breaker.closes_in_s() == 10


def test_breaker_half_open_lets_one_through_and_its_result_decides() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(1, open_s=5, clock=clock)
    breaker.record_failure()
    clock.advance(4.9)
    assert breaker.state is BreakerState.OPEN
    clock.advance(0.1)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.permits() == 1
    assert breaker.record_failure()  # the trial failed: open again for the whole open_s
    assert breaker.state is BreakerState.OPEN
    assert breaker.closes_in_s() == 5
    clock.advance(5)
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.permits() is None


def test_a_straggler_success_does_not_close_an_open_breaker() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(2, open_s=5, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()  # a delivery that started before the trip
    assert breaker.state is BreakerState.OPEN
    assert not breaker.record_failure()  # failures while open do not restart the timer
    clock.advance(5)
    assert breaker.state is BreakerState.HALF_OPEN


# -- backpressure -------------------------------------------------------------------------

def test_not_now_halves_once_per_episode_and_pauses() -> None:
    clock = FakeClock()
    limiter = AimdLimiter(8, clock=clock)
    limiter.on_busy(2)
    assert limiter.limit == 4
    assert limiter.paused_for_s() == 2
    clock.advance(0.5)
    limiter.on_busy(2)  # another in-flight delivery of the same episode
    assert limiter.limit == 4
    assert limiter.paused_for_s() == 2
    clock.advance(2)
    assert limiter.paused_for_s() == 0
    limiter.on_busy(1)
    limiter.on_busy(1)
    clock.advance(1)
    limiter.on_busy(1)
    clock.advance(1)
    limiter.on_busy(1)
    assert limiter.limit == 1  # never below one


def test_successes_raise_the_limit_by_one_per_window_up_to_the_ceiling() -> None:
    clock = FakeClock()
    limiter = AimdLimiter(4, clock=clock)
    limiter.on_busy(0)
    limiter.on_busy(0)  # paused for 0 s: a new episode each time
    assert limiter.limit == 1
    limiter.on_success()
    assert limiter.limit == 2
    limiter.on_success()
    assert limiter.limit == 2
    limiter.on_success()
    assert limiter.limit == 3
    for _ in range(20):
        limiter.on_success()
    assert limiter.limit == 4


@pytest.mark.parametrize(
    ("header", "expected"),
    [("2", 2.0), (" 120 ", 120.0), ("Wed, 21 Oct 2026 07:28:10 GMT", 10.0),
     ("Wed, 21 Oct 2026 07:27:00 GMT", 0.0), ("soon", None), ("", None), (None, None),
     ("-5", None)],
)
def test_retry_after_seconds_or_http_date(header: str | None, expected: float | None) -> None:
    now = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert parse_retry_after(header, now) == expected


# -- health state and its log -------------------------------------------------------------

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
