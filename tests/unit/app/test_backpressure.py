"""The AIMD limiter with the "not now" pause, and Retry-After parsing, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from priority_pubsub.app.backpressure import AimdLimiter, parse_retry_after
from tests.unit.app.test_circuit import FakeClock


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
