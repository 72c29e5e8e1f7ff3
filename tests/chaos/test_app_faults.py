"""An app that misbehaves in every way Dapr's response table knows, plus an outage.

Each message fails its first attempts with a seeded random mix of faults (500, 503, an
unknown status, RETRY, a reply slower than ``app.timeout_s``), and every request in a 3 s
window gets 503 (the app "restarting"). With ``max_attempts`` above the faults, every message
must end acked, none dead or lost; the retries show as duplicates.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.ledger import Accounting, journal_outcomes, local_accounting
from tests.e2e.helpers import publish, queue_rows, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = [pytest.mark.chaos, pytest.mark.local]

MESSAGES = 200
FAULTS = {
    "500": Reply(500),
    "503": Reply(503, "busy"),
    "unknown-status": Reply(200, {"status": "MAYBE"}),
    "RETRY": Reply(200, {"status": "RETRY"}),
    "timeout": Reply(200, delay_s=1.0),  # past app.timeout_s
}


class FaultyApp:
    """Per message id: the number of faulty answers left (0-2, seeded), then success."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._left: dict[str, int] = {}
        self._lock = threading.Lock()
        self.outage_until = 0.0
        self.faults: Counter[str] = Counter()

    def __call__(self, received: Received) -> Reply:
        if time.monotonic() < self.outage_until:
            self.faults["outage"] += 1
            return Reply(503, "restarting")
        with self._lock:
            key = received.event["id"]
            left = self._left.setdefault(key, self._rng.choice((0, 0, 1, 2)))
            if left == 0:
                return Reply(200, {"status": "SUCCESS"}, delay_s=0.01)
            self._left[key] = left - 1
            name = self._rng.choice(sorted(FAULTS))
        self.faults[name] += 1
        return FAULTS[name]


def test_app_faults_and_an_outage_end_acked(
    tmp_path: Path, app: RecordingApp, report: list[Accounting]
) -> None:
    faulty = FaultyApp(seed=14)
    app.behaviour = faulty
    config = local_config(tmp_path, app.url, concurrency=8,
                          app={"url": app.url, "timeout_s": 0.5, "fatal_codes": [400, 422]},
                          retry={"max_attempts": 20, "initial_delay_s": 0.1, "max_delay_s": 0.8})
    ids = publish(write_config(tmp_path, config), "high", '{"job": 1}', count=MESSAGES)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: len(app.received) > MESSAGES // 3, timeout_s=60)
        faulty.outage_until = time.monotonic() + 3.0
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "high"), timeout_s=90)
    finally:
        assert sidecar.stop() == 0

    result = local_accounting("app faults + 3 s outage", ids, app.received, tmp_path,
                              note=f"faults {dict(sorted(faulty.faults.items()))}")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == result.acked == MESSAGES
    assert result.dead == 0
    assert faulty.faults["outage"] > 0  # the outage happened while work was going on
    journaled = journal_outcomes(tmp_path / "journal")
    assert all(outcomes[-1] == "ack" for outcomes in journaled.values())
    retries = sum(o.count("retry") for o in journaled.values())
    assert retries == result.duplicated  # every extra delivery is a journaled retry
