"""Durations and instants as the page and the monitor print them: the unit changes at its
boundaries, never a bare number of seconds in the thousands."""

from __future__ import annotations

import pytest

from priority_pubsub.core.human import duration, when


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"),
    (0.0, "0 ms"),
    (0.85, "850 ms"),
    (0.9996, "1000 ms"),
    (1.0, "1.0 s"),
    (119.94, "119.9 s"),
    (120.0, "2.0 min"),
    (270.0, "4.5 min"),
    (7199.0, "120.0 min"),
    (7200.0, "2.0 h"),
    (90_000.0, "25.0 h"),
])
def test_a_duration_in_the_unit_a_person_reads(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_an_instant_in_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert when(1_700_000_000_999) == "2023-11-14 22:13:20 UTC"
    assert when(0) == "1970-01-01 00:00:00 UTC"
    assert when(None) == "-"
