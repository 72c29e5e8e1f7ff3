"""End-to-end fixtures: a recording app and helpers around the real CLI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.app import RecordingApp


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running
