"""One backoff rule for every "try again later" in the sidecar.

Used for connecting to the broker, for failed receives, for settle calls that failed with a
retriable error, and for ``retry.delay_for`` (the delay before a message is redelivered).
The rule is dramatiq's ``compute_backoff``: ``initial * factor**(attempt-1)``, capped.
"""

from __future__ import annotations

import asyncio

__all__ = ["Backoff", "compute_backoff"]

_MAX_EXPONENT = 62  # beyond this every sane cap has long been reached


def compute_backoff(
    attempt: int, *, initial_s: float, max_s: float, factor: float = 2.0
) -> float:
    """The pause before try number ``attempt + 1`` after ``attempt`` failures (1-based)."""
    exponent = max(0, min(attempt - 1, _MAX_EXPONENT))
    return float(min(initial_s * factor**exponent, max_s))


class Backoff:
    """The growing pause of one retry loop; ``reset`` after a success starts it over.

    ``next_s`` tells the pause a caller is about to take (to log it), ``sleep`` takes it
    (``failed`` counts it and returns it, for code that cannot await).
    """

    __slots__ = ("_failures", "factor", "initial_s", "max_s")

    def __init__(self, initial_s: float, max_s: float, factor: float = 2.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self._failures = 0

    def next_s(self) -> float:
        """The pause after the next failure (does not count it)."""
        return compute_backoff(self._failures + 1, initial_s=self.initial_s, max_s=self.max_s,
                               factor=self.factor)

    def failed(self) -> float:
        """Count one failure; return the pause it calls for (for a blocking caller)."""
        pause = self.next_s()
        self._failures += 1
        return pause

    async def sleep(self) -> None:
        """Count one failure and wait the pause it calls for."""
        await asyncio.sleep(self.failed())

    def reset(self) -> None:
        self._failures = 0
