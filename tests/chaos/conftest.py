"""Chaos scenarios: each records its accounting, printed at the end of the run (CI logs,
``tests/chaos/report.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.ledger import Accounting
from tests.chaos.report import record
from tests.support.app import RecordingApp


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running


@pytest.fixture
def report() -> Iterator[list[Accounting]]:
    """A scenario appends its ``Accounting``; the run's summary prints every one."""
    rows: list[Accounting] = []
    yield rows
    for row in rows:
        record("accounting", row.line())


class _Lines(list[str]):
    """A list whose appended lines also go to the run's summary (fuzz counts, the soak)."""

    def append(self, line: str) -> None:
        super().append(line)
        record("figures", line)

    def extend(self, lines: object) -> None:
        for line in lines:  # type: ignore[attr-defined]
            self.append(line)


@pytest.fixture(scope="session")
def fuzz_summary() -> list[str]:
    """A fuzz run appends its counts line; the run's summary prints them (CI logs)."""
    return _Lines()


@pytest.fixture(scope="session")
def report_lines() -> list[str]:
    """Figures a run prints at the end (the soak's), beside the fuzz counts."""
    return _Lines()
