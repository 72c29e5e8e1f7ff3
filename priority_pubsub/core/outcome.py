"""The result of one delivery attempt: a value the worker settles with exactly one driver call."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.StrEnum):
    """What became of one attempt; the journal's ``outcome`` and the metrics' label."""

    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    DROP = "drop"
    RELEASE = "release"
    """Handed back unseen (surplus of a wake-up, the app down): not an attempt where the
    broker lets us avoid counting it (``Driver.release``)."""
    SETTLE_FAILED = "settle_failed"
    """The settle call failed or was refused (lease lost): the broker did not do what was
    asked and delivers the message again when its lease ends. Never an app's answer."""


FINAL_KINDS = frozenset({Kind.ACK, Kind.DEAD, Kind.DROP})
"""After these the broker no longer holds the message (the report's "completed")."""


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Kind
    http_status: int | None = None
    reason: str | None = None
    delay_s: float | None = None
    """For a release: how long the app asked us to wait (its ``Retry-After``)."""
    discard: bool = False
    """For a drop: delete the message even where dead letters have a destination (an
    operator's drop); an app's drop goes where a dead letter goes, as in Dapr."""

    @classmethod
    def ack(cls, http_status: int | None = None) -> Outcome:
        return cls(Kind.ACK, http_status)

    @classmethod
    def retry(cls, reason: str, http_status: int | None = None) -> Outcome:
        return cls(Kind.RETRY, http_status, reason)

    @classmethod
    def dead(cls, reason: str, http_status: int | None = None) -> Outcome:
        return cls(Kind.DEAD, http_status, reason)

    @classmethod
    def release(cls, reason: str, http_status: int | None = None,
                delay_s: float | None = None) -> Outcome:
        """Give the message back without the app having taken it; ``reason`` says why.
        ``http_status``/``delay_s``: the app's "not now" (429/503) and its Retry-After."""
        return cls(Kind.RELEASE, http_status, reason, delay_s)

    @classmethod
    def drop(cls, reason: str, http_status: int | None = None, *,
             discard: bool = False) -> Outcome:
        return cls(Kind.DROP, http_status, reason, discard=discard)
