"""Backpressure: the app's "not now" (429 or 503 with ``Retry-After``) slows deliveries.

A "not now" pauses every delivery for the time the app asked (capped), and halves the number
of deliveries the sidecar runs at once (multiplicative decrease, never below 1). Successes
raise it again by one per window of ``limit`` successes (additive increase, as TCP's
congestion window grows by one segment per round trip) up to ``concurrency``. A pure state
machine on an injected clock.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]
BUSY_STATUSES = frozenset({429, 503})


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), None if absent
    or unreadable (RFC 9110 §10.2.3)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class AimdLimiter:
    """The effective concurrency and the "not now" pause."""

    def __init__(self, ceiling: int, clock: Clock = time.monotonic) -> None:
        self.ceiling = ceiling
        self.limit = ceiling
        self._clock = clock
        self._successes = 0
        self._paused_until = 0.0

    def on_busy(self, pause_s: float) -> None:
        """The app said "not now, try in ``pause_s``": pause and halve the limit.

        Answers that arrive while a pause is already running are the same episode (the other
        deliveries that were in flight): they extend the pause but do not halve again, as
        TCP decreases once per window, not once per lost segment."""
        now = self._clock()
        if now >= self._paused_until:
            self.limit = max(1, self.limit // 2)
        self._successes = 0
        self._paused_until = max(self._paused_until, now + pause_s)

    def resize(self, ceiling: int) -> None:
        """A new ``concurrency`` (a live reload): at the ceiling, the limit follows it (a
        grown one is in force at once); backed off, it stays, never above the new ceiling,
        and grows back by the usual steps."""
        at_ceiling = self.limit >= self.ceiling
        self.ceiling = ceiling
        self.limit = ceiling if at_ceiling else min(self.limit, ceiling)

    def on_success(self) -> None:
        if self.limit >= self.ceiling:
            return
        self._successes += 1
        if self._successes >= self.limit:
            self._successes = 0
            self.limit += 1

    def paused_for_s(self) -> float:
        return max(0.0, self._paused_until - self._clock())
