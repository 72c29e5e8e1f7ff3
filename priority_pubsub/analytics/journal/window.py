"""The settle times a report counts (``--since``/``--until``): a record settled before
``since`` or from ``until`` on is counted as out of range, never aggregated."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

TimeBound = datetime | str | int | None
"""ISO 8601 text (naive = UTC, 'Z' allowed), an aware or naive datetime, or epoch ms."""


def to_epoch_ms(bound: TimeBound) -> int | None:
    """``bound`` as epoch milliseconds (None stays None); bad text raises ``ValueError``."""
    if bound is None or isinstance(bound, int):
        return bound
    if isinstance(bound, str):
        bound = datetime.fromisoformat(bound.strip().replace("Z", "+00:00"))
    if bound.tzinfo is None:
        bound = bound.replace(tzinfo=UTC)
    return int(bound.timestamp() * 1000)


@dataclass(frozen=True)
class SettleWindow:
    """``since_ms`` inclusive, ``until_ms`` exclusive (None: unbounded), and each bound as it
    was given, for the page to show as the user wrote it."""

    since_ms: int | None = None
    until_ms: int | None = None
    since: TimeBound = None
    until: TimeBound = None

    @classmethod
    def between(cls, since: TimeBound, until: TimeBound) -> SettleWindow:
        """The window of two bounds as given; bad text raises ``ValueError``."""
        return cls(to_epoch_ms(since), to_epoch_ms(until), since, until)

    @property
    def stored(self) -> list[int | None]:
        """The bounds as the state's manifest keeps them (``Manifest.bounds``)."""
        return [self.since_ms, self.until_ms]
