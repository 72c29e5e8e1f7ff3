"""The report's settle window: bounds as given, in epoch ms, and as the manifest keeps them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from priority_pubsub.analytics.journal.window import SettleWindow, to_epoch_ms


def test_a_window_keeps_its_bounds_as_given_and_in_epoch_ms() -> None:
    window = SettleWindow.between("2026-05-01T00:00", "2026-05-02T00:00Z")
    assert window.since_ms == int(datetime(2026, 5, 1, tzinfo=UTC).timestamp() * 1000)
    assert window.until_ms == window.since_ms + 86_400_000
    assert (window.since, window.until) == ("2026-05-01T00:00", "2026-05-02T00:00Z")
    assert window.stored == [window.since_ms, window.until_ms]


def test_an_open_window_is_stored_as_two_nones() -> None:
    assert SettleWindow.between(None, None).stored == [None, None]
    assert SettleWindow().stored == [None, None]


def test_bad_text_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="yesterday"):
        SettleWindow.between("yesterday", None)
    assert to_epoch_ms(1_000) == 1_000
