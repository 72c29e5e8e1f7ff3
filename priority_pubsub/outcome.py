"""The result of one delivery attempt: a value the worker settles with exactly one driver call."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.StrEnum):
    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    DROP = "drop"
    RELEASE = "release"  # placeholder until wt/core's release verb lands


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Kind
    http_status: int | None = None
    reason: str | None = None
    delay_s: float | None = None
    """For a release: how long the app asked us to wait (its ``Retry-After``)."""

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
    def drop(cls, reason: str, http_status: int | None = None) -> Outcome:
        return cls(Kind.DROP, http_status, reason)

    @classmethod
    def release(cls, reason: str, http_status: int | None = None,
                delay_s: float | None = None) -> Outcome:
        return cls(Kind.RELEASE, http_status, reason, delay_s)
