"""The monitor's starvation flag: a lower queue waits while higher ones are served."""

from __future__ import annotations

from typing import Any

from priority_pubsub.monitor.state import flag_starvation


def row(visible: int | None, delivered: float, paused: bool = False) -> dict[str, Any]:
    return {"broker": None if visible is None else {"visible": visible},
            "per_minute": {"delivered": delivered}, "paused": {} if paused else None,
            "starved": None}


def flags(*rows: dict[str, Any]) -> list[bool | None]:
    queues = list(rows)
    flag_starvation(queues)
    return [q["starved"] for q in queues]


def test_a_waiting_queue_below_a_served_one_is_starved() -> None:
    assert flags(row(0, 50), row(30, 0), row(5, 0)) == [False, True, True]


def test_not_starved_when_served_when_nothing_waits_or_when_paused() -> None:
    assert flags(row(10, 50), row(30, 2), row(0, 0), row(7, 0, paused=True)) == [
        False, False, False, False]


def test_nothing_above_served_is_no_starvation_and_an_unknown_depth_is_unknown() -> None:
    assert flags(row(0, 0), row(30, 0)) == [False, False]
    assert flags(row(0, 50), row(None, 0)) == [False, None]
