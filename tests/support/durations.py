"""Where a test run's time goes: each file's seconds, recorded on request.

``TESTS_RECORD_DURATIONS=/path/durations.json make test`` writes, at the end of the session,
the seconds each test file took (setup, call and teardown of its tests, session servers'
starts included where they fell), longest first, rounded to a tenth of a second. Under xdist
the workers' reports reach the controller, which writes the file once.

The order of the run is left to xdist (``--dist loadfile`` reorders files by their number of
tests). Ordering the files longest first from such a recording was tried and measured: the
recorded work (5,540 s over 172 files) leaves little for an order to win on three workers, and
the one clean-clone run that followed it (``--no-loadscope-reorder``) was slower.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

RECORD_TO = "TESTS_RECORD_DURATIONS"
"""The environment variable naming where a run records its files' times (not under the
sidecar's ``PRIORITY_PUBSUB_`` prefix: every sidecar the tests start would read it as a
setting and refuse it)."""

_recorded: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORD_TO):
        _recorded[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On the controller (or a run without xdist): the workers' reports reach it too."""
    target = os.environ.get(RECORD_TO)
    if not target or hasattr(session.config, "workerinput") or not _recorded:
        return
    ordered = sorted(_recorded.items(), key=lambda item: -item[1])
    Path(target).write_text(json.dumps({file: round(seconds, 1) for file, seconds in ordered},
                                       indent=0) + "\n")
