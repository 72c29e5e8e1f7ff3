"""kill -9 under load with two replicas (local driver): nothing lost, duplicates counted.

Two sidecars share one queue file; one is killed with SIGKILL twice while both work through
a backlog, and restarted each time. With a 2 s lease, the killed replica's messages are
taken over when their lease ends. Every id must be delivered and acked, none dead; a crash
costs duplicates (the messages in the killed replica's hands), never a message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.ledger import Accounting, journal_outcomes, local_accounting
from tests.e2e.helpers import publish, queue_rows, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = [pytest.mark.chaos, pytest.mark.local]

MESSAGES = 1500
KILLS = 3


def test_kill_9_under_load_with_two_replicas(
    tmp_path: Path, app: RecordingApp, report: list[Accounting]
) -> None:
    app.behaviour = lambda _: Reply(delay_s=0.04)
    config = local_config(tmp_path, app.url, concurrency=4, lease={"duration_s": 2},
                          retry={"max_attempts": 10, "initial_delay_s": 0.2, "max_delay_s": 1})
    ids = publish(write_config(tmp_path, config), "normal", '{"work": 1}', count=MESSAGES)
    steady = SidecarProcess(tmp_path, config, name="steady")
    victim = SidecarProcess(tmp_path, config, name="victim-0")
    try:
        for kill in range(KILLS):
            wait_until(lambda k=kill: len(app.received) > (k + 1) * MESSAGES // (KILLS + 2),
                       timeout_s=60)
            victim.kill()
            victim.wait()
            victim = SidecarProcess(tmp_path, config, name=f"victim-{kill + 1}")
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "normal"), timeout_s=90)
    finally:
        assert steady.stop() == 0
        assert victim.stop() == 0

    result = local_accounting(f"kill -9 x{KILLS}, two replicas", ids, app.received, tmp_path,
                              note=f"lease 2 s, {KILLS} kills")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == result.acked == MESSAGES
    assert result.dead == 0
    # at most what the victim held per kill: 4 at the app, up to 4 more settling
    assert result.duplicated <= KILLS * 4 * 2
    # The journal (one unbuffered line per settle) has an ack for every message but those
    # settled in the instant of a kill (their ack committed, the process gone before the
    # line): at most the victim's settles under way per kill.
    journaled = journal_outcomes(tmp_path / "journal")
    unjournaled = [i for i in ids if "ack" not in journaled.get(i, [])]
    assert len(unjournaled) <= KILLS * 4 * 2, unjournaled
