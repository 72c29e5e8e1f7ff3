"""A circuit breaker on the app channel, with the semantics of Dapr resiliency's breaker.

Closed: deliveries flow; ``consecutive_failures`` retriable failures in a row (5xx,
timeouts) open it. Open: nothing is delivered for ``open_s``. Half-open: one delivery is let
through; its success closes the breaker, its failure opens it again for ``open_s``. A pure
state machine on an injected clock: the receive loop asks how many deliveries it may start.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

Clock = Callable[[], float]


class BreakerState(enum.IntEnum):
    """Values are what ``priority_pubsub_circuit_breaker_state`` exports."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    def __init__(
        self, consecutive_failures: int, open_s: float, clock: Clock = time.monotonic
    ) -> None:
        self._trip_after = consecutive_failures
        self._open_s = open_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at < self._open_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def permits(self) -> int | None:
        """Deliveries that may run at once: None = no limit, 0 while open, 1 half-open."""
        state = self.state
        if state is BreakerState.CLOSED:
            return None
        return 0 if state is BreakerState.OPEN else 1

    def closes_in_s(self) -> float:
        """Seconds until an open breaker turns half-open (0 when it is not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self._open_s - self._clock())

    def record_success(self) -> None:
        """A success closes a half-open breaker; one that started before the breaker opened
        (still in flight when it tripped) does not close an open one, as in gobreaker."""
        if self.state is BreakerState.OPEN:
            return
        self._failures = 0
        self._opened_at = None

    def record_failure(self) -> bool:
        """Count one retriable failure; True when this failure opened the breaker."""
        self._failures += 1
        if self.state is BreakerState.HALF_OPEN or (
            self._opened_at is None and self._failures >= self._trip_after
        ):
            self._opened_at = self._clock()
            return True
        return False
