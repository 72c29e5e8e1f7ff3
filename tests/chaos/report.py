"""The chaos run's summary (a plugin, loaded from the root conftest so the process that
prints the summary has it even under pytest-xdist): the accounting rows and figures (fuzz
counts, the soak) every scenario recorded.

A worker's terminal summary is never shown under xdist (``make test`` runs three), so each
line is appended to a file in a directory the controlling process makes before the workers
start (``PP_CHAOS_REPORT_DIR``, inherited by them); the controller prints them all.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_REPORT_DIR = "PP_CHAOS_REPORT_DIR"
HEADER = (f"{'scenario':<34} {'published':>9} {'delivered':>9} {'acked':>6} {'dead':>5} "
          f"{'duplicated':>10} {'lost':>5}  note")


def record(section: str, line: str) -> None:
    directory = os.environ.get(_REPORT_DIR)
    if directory:
        with (Path(directory) / f"{section}-{os.getpid()}.txt").open("a") as out:
            out.write(line + "\n")


def _recorded(section: str) -> list[str]:
    directory = os.environ.get(_REPORT_DIR)
    if not directory:
        return []
    return [line for path in sorted(Path(directory).glob(f"{section}-*.txt"))
            for line in path.read_text().splitlines()]


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process (or no xdist)
        os.environ[_REPORT_DIR] = tempfile.mkdtemp(prefix="pp-chaos-report-")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if hasattr(terminalreporter.config, "workerinput"):
        return
    figures = _recorded("figures")
    if figures:
        terminalreporter.section("fuzz counts and soak")
        for line in figures:
            terminalreporter.write_line(line)
    rows = _recorded("accounting")
    if rows:
        terminalreporter.section("chaos accounting")
        terminalreporter.write_line(HEADER)
        for line in rows:
            terminalreporter.write_line(line)
