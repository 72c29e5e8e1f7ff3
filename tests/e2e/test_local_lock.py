"""Another process holds the local queue file's write lock: the sidecar waits off its loop.

Short SQLite jobs run on the event loop, with a busy timeout of 0 there: a lock
held elsewhere sends the job to the driver's thread, which waits for it. So while another
process holds ``BEGIN IMMEDIATE`` for 3 s the loop keeps answering ``/healthz`` at once and
the watchdog never sees it stand still; afterwards every message is delivered once, in order.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import journal_records, publish, queue_rows, total, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local

HOLD_S = 3.0
_HOLD_THE_LOCK = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def test_a_lock_held_by_another_process_does_not_stop_the_loop(
    tmp_path: Path, app: RecordingApp
) -> None:
    app.behaviour = lambda _: Reply(delay_s=0.1)  # deliveries go on through the lock
    # The watchdog beats every 0.5 s: 1.5 s is a stall, and a driver waiting on the loop for
    # the 3 s lock would be one.
    config = local_config(tmp_path, app.url, concurrency=1,
                          server={"host": "127.0.0.1", "port": 0, "stall_after_s": 1.5})
    ids = publish(write_config(tmp_path, config), "normal", "{}", count=40)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready()
        app.wait_for(3)
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_THE_LOCK, str(tmp_path / "queues.db"), str(HOLD_S)],
            stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()
        seen_during_lock = len(app.received)
        slowest_s = 0.0
        with httpx.Client(base_url=sidecar.ops_url, timeout=5) as client:
            while time.monotonic() - locked_at < HOLD_S:
                started = time.monotonic()
                assert client.get("/healthz").status_code == 200
                slowest_s = max(slowest_s, time.monotonic() - started)
                time.sleep(0.02)
        assert holder.wait(10) == 0
        assert slowest_s < 0.1, f"/healthz took {slowest_s * 1000:.0f} ms during the lock"
        assert len(app.received) <= seen_during_lock + 1  # the lock did hold the queue
        wait_until(lambda: len(app.received) >= len(ids), timeout_s=30)
        assert total(sidecar.metrics(), "priority_pubsub_event_loop_stalls_total") == 0
    finally:
        assert sidecar.stop() == 0
    assert [r.event["id"] for r in app.received] == ids  # each once, in publish order
    assert queue_rows(tmp_path / "queues.db", "normal") == []
    assert sorted(r["message_id"] for r in journal_records(tmp_path / "journal")) == sorted(ids)
