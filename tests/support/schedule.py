"""The longest test files first, so the run's tail is short.

With ``--dist loadfile`` xdist gives each worker whole files in collection order, the next file
to whichever worker is free. A long file collected late (the Spark report's JVM runs, the soak,
a chaos scenario) starts when the others are nearly done and runs alone at the end: that tail
is the run's length. Ordering the files by their expected time, longest first, is the classic
longest-processing-time schedule; files without an estimate keep their order after those with
one. The order is a pure function of the collection and ``tests/durations.json``, as xdist
needs every worker to collect the same list. xdist follows it only with
``--no-loadscope-reorder``; by default it reorders the files by their number of tests, and
this order only breaks its ties. The Makefile keeps xdist's default: the one clean-clone run
with the flag was slower and not green (the closing note of 2026-12-07).

``tests/durations.json`` holds the seconds each file takes (setup, call and teardown of its
tests, session servers' starts included where they fell); only the long files matter, and a
file missing from it runs after those listed. To record a run's:
``TESTS_RECORD_DURATIONS=tests/durations.json make test``; the controller writes it
at the end of the session, files rounded to a tenth of a second.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

ESTIMATES = Path(__file__).resolve().parents[1] / "durations.json"
RECORD_TO = "TESTS_RECORD_DURATIONS"
"""The environment variable naming where a run records its files' times (not under the
sidecar's ``PRIORITY_PUBSUB_`` prefix: every sidecar the tests start would read it as a
setting and refuse it)."""

_recorded: defaultdict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(nodeids: list[str], estimates: dict[str, float]) -> list[int]:
    """The indexes of ``nodeids`` in run order: their files by estimate, longest first, the
    ones without an estimate after, each group in its first-collected order; the tests of one
    file keep theirs."""
    first_seen: dict[str, int] = {}
    for nodeid in nodeids:
        first_seen.setdefault(_file_of(nodeid), len(first_seen))

    def key(index: int) -> tuple[float, int]:
        file = _file_of(nodeids[index])
        return -estimates.get(file, 0.0), first_seen[file]

    return sorted(range(len(nodeids)), key=key)


def _estimates() -> dict[str, float]:
    if not ESTIMATES.exists():
        return {}
    loaded: dict[str, float] = json.loads(ESTIMATES.read_text())
    return loaded


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = longest_first([item.nodeid for item in items], _estimates())
    items[:] = [items[index] for index in order]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORD_TO):
        _recorded[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On the controller (or a run without xdist): the workers' reports reach it too."""
    target = os.environ.get(RECORD_TO)
    if not target or hasattr(session.config, "workerinput") or not _recorded:
        return
    ordered = sorted(_recorded.items(), key=lambda item: -item[1])
    Path(target).write_text(json.dumps({file: round(seconds, 1) for file, seconds in ordered},
                                       indent=0) + "\n")
