"""A queue's rate limit (``queues[].rate``): a token bucket per replica, and how long a queue
was held back (``HeldTime``: by its rate, or by slots held for another queue).

The bucket holds up to ``burst`` tokens and gains ``per_s`` a second; a message taken spends
one. The dispatcher caps a queue's allowance at the whole tokens it holds, so a receive never
asks for more than the rate lets it keep (nothing is received only to be handed back: on SQS
that would cost an attempt) and no message is held waiting for a token. A queue out of
tokens is not received from; the pick goes on to the next queue that may take, and the take's
wait ends when the next token is due (``next_in_s``), so the limited queue is served as soon
as it may be.

A queue with a backlog keeps its schedule: while the app is full, its message waits for a
free slot like any other, and a bucket full meanwhile would lose what it gains (at burst 1
beside a queue filling the other slots, 2 a second came out as 1.6 to 1.8). So when it takes
while it has a backlog (its last receive got all it asked for), up to half a token of the
time its bucket has been full is kept (``take(..., on_schedule=True)``): over any span t it
takes at most ``burst + per_s x t + 0.5`` messages, ``per_s x t`` on average. No I/O and no
clock here: the time is passed in, so tests replay it exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from priority_pubsub.settings.config import RateConfig

LATE_KEPT = 0.5
"""The most of a token a backlogged queue keeps of the time its bucket was full before it
took (``TokenBucket.take``): under one, so two messages never come at once past the burst."""


@dataclass(slots=True)
class TokenBucket:
    per_s: float
    burst: int
    tokens: float
    """Tokens held at ``at`` (whole ones may be spent)."""
    at: float
    filled_at: float | None = None
    """Since when it has been full (None: it is not)."""

    @classmethod
    def full(cls, rate: RateConfig, now: float) -> TokenBucket:
        """A bucket that may take ``burst`` at once now (a start, a queue new to the rate)."""
        return cls(rate.per_s, rate.burst, float(rate.burst), now, now)

    def retuned(self, rate: RateConfig, now: float) -> TokenBucket:
        """This bucket under a reloaded rate: the tokens it holds kept, up to the new burst."""
        self._refill(now)
        tokens = min(self.tokens, float(rate.burst))
        return TokenBucket(rate.per_s, rate.burst, tokens, now,
                           now if tokens >= rate.burst else None)

    def whole(self, now: float) -> int:
        """The messages it may take now."""
        self._refill(now)
        return int(self.tokens)

    def take(self, count: int, now: float, *, on_schedule: bool = False) -> None:
        """``count`` messages are asked for (at most ``whole`` of them). ``on_schedule``: the
        queue has a backlog, so the time the bucket has been full is the wait for a free
        slot, not a quiet spell: up to ``LATE_KEPT`` of a token of it is kept."""
        self._refill(now)
        full_for_s = now - self.filled_at if on_schedule and self.filled_at is not None else 0.0
        kept = min(full_for_s * self.per_s, LATE_KEPT)
        self.tokens = max(0.0, self.tokens - count) + kept
        self.filled_at = None if self.tokens < self.burst else now

    def give_back(self, count: int, now: float) -> None:
        """``count`` messages taken were handed back unseen: their tokens are not spent."""
        self._refill(now)
        self.tokens = min(float(self.burst), self.tokens + count)
        if self.tokens >= self.burst and self.filled_at is None:
            self.filled_at = now

    def next_in_s(self, now: float) -> float:
        """Seconds until it holds a whole token (0: it does)."""
        self._refill(now)
        return max(0.0, (1.0 - self.tokens) / self.per_s)

    def _refill(self, now: float) -> None:
        if now > self.at:
            if self.tokens < self.burst:
                filled_at = self.at + (self.burst - self.tokens) / self.per_s
                if filled_at <= now:
                    self.filled_at = filled_at
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.per_s)
            self.at = now


def buckets_for(rates: Iterable[tuple[str, RateConfig | None]],
                kept: dict[str, TokenBucket], now: float) -> dict[str, TokenBucket]:
    """The buckets of the queues with a rate, by name: a queue that had one keeps its tokens
    (a reload retunes it), a new one starts full."""
    return {name: (kept[name].retuned(rate, now) if name in kept else TokenBucket.full(rate, now))
            for name, rate in rates if rate is not None}


class HeldTime:
    """How long each queue has been held back, counted at each take: what was held at the
    last take is counted up to now, and what is held now from now (a counter lags a hold by
    one take at most). The dispatcher keeps one for the slots held for a due heavy queue and
    one for the queues its rate limit keeps out."""

    __slots__ = ("_count", "_since")

    def __init__(self, count: Callable[[str, float], None]) -> None:
        self._count = count
        self._since: dict[str, float] = {}

    def update(self, now: float, held: Iterable[str]) -> None:
        for name, since in self._since.items():
            self._count(name, now - since)
        self._since = dict.fromkeys(held, now)
