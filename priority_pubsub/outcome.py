"""The result of one delivery attempt: a value the worker settles with exactly one driver call."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.StrEnum):
    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Kind
    http_status: int | None = None
    reason: str | None = None

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
