"""The circuit breaker on an injected clock (the app channel's other guards, on the same
clock: ``test_backpressure.py``, ``test_health.py``)."""

from __future__ import annotations

from priority_pubsub.app.circuit import BreakerState, CircuitBreaker


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
