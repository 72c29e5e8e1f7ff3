"""Chaos scenarios: each records its accounting, printed at the end of the run (CI logs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.ledger import Accounting
from tests.support.app import RecordingApp

_REPORTED: list[Accounting] = []
_FUZZ_LINES: list[str] = []


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running


@pytest.fixture
def report() -> Iterator[list[Accounting]]:
    """A scenario appends its ``Accounting``; the run's summary prints every one."""
    rows: list[Accounting] = []
    yield rows
    _REPORTED.extend(rows)


@pytest.fixture(scope="session")
def fuzz_summary() -> list[str]:
    """A fuzz run appends its counts line; the run's summary prints them (CI logs)."""
    return _FUZZ_LINES


@pytest.fixture(scope="session")
def report_lines() -> list[str]:
    """Figures a run prints at the end (the soak's), beside the fuzz counts."""
    return _FUZZ_LINES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FUZZ_LINES:
        terminalreporter.section("fuzz counts and soak")
        for line in _FUZZ_LINES:
            terminalreporter.write_line(line)
    if not _REPORTED:
        return
    terminalreporter.section("chaos accounting")
    terminalreporter.write_line(Accounting.header())
    for row in _REPORTED:
        terminalreporter.write_line(row.line())
