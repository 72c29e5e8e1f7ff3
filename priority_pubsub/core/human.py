"""Durations and instants as a person reads them (the report's page and the monitor's)."""

from __future__ import annotations

from datetime import UTC, datetime


def duration(seconds: float | None) -> str:
    """1.2 s, 850 ms, 4.5 min, 2.0 h: a duration a person reads at a glance."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
