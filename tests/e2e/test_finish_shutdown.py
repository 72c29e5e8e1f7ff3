"""``shutdown.mode: finish`` end to end, local driver, real processes.

Replica A holds a 20 s task under a 3 s lease when it is told to stop: by SIGTERM, or by
``GET /drain?wait=true`` on its ops port (what the chart's preStop hook sends). It takes
nothing new, keeps the task's lease alive past many lease lengths (no redelivery to replica
B, which polls the queue all along) and lets the task run to its end, far past
``shutdown.grace_s``: the task is acked once. Meanwhile replica B takes the queue's other
messages. ``/drain`` answers 200 once the task is done, while A still serves it; A exits 0.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.helpers import journal_records, publish, queue_rows, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.sidecar import local_config, start_sidecar, write_config

pytestmark = pytest.mark.local

LONG_S = 20.0
LEASE_S = 3.0
SHORT = [f"short-{n}" for n in range(6)]


def name_of(received: Received) -> str:
    return str(received.event["data"]["n"])


def replica_config(directory: Path, app: RecordingApp, name: str) -> dict[str, Any]:
    return local_config(
        directory, app.url, queues=[{"name": "work"}], concurrency=1,
        lease={"duration_s": LEASE_S},
        app={"url": app.url, "timeout_s": 60},
        shutdown={"mode": "finish", "grace_s": 1},  # grace_s does not apply in this mode
        journal={"path": str(directory / f"journal-{name}"), "rotate_mb": 64})


class DrainCall:
    """``GET /drain?wait=true`` in a thread, as the kubelet's preStop hook makes it."""

    def __init__(self, url: str) -> None:
        self.status: int | None = None
        self.answered_at: float | None = None
        self._thread = threading.Thread(target=self._call, args=(url,), daemon=True)
        self._thread.start()

    def _call(self, url: str) -> None:
        response = httpx.get(url, timeout=LONG_S + 40)
        self.answered_at = time.monotonic()
        self.status = response.status_code

    def join(self) -> None:
        self._thread.join(LONG_S + 45)


@pytest.mark.parametrize("stop", ["sigterm", "drain"])
def test_a_stopped_replica_finishes_its_long_task_and_another_takes_the_rest(
    tmp_path: Path, stop: str
) -> None:
    def behaviour(received: Received) -> Reply:
        return Reply(delay_s=LONG_S if name_of(received) == "long" else 0.2)

    with RecordingApp(behaviour=behaviour) as app:
        config_a = replica_config(tmp_path, app, "a")
        publisher = write_config(tmp_path, config_a, "publish.yaml")
        [long_id] = publish(publisher, "work", json.dumps({"n": "long"}))
        a = start_sidecar(tmp_path, config_a, name="a")
        b = None
        try:
            app.wait_for(1)
            long_started = time.monotonic()
            drain = None
            if stop == "sigterm":
                a.terminate()
            else:
                drain = DrainCall(f"{a.ops_url}/drain?wait=true")
            wait_until(lambda: a.ready_status() != 200, 10)  # draining: takes nothing new
            b = start_sidecar(tmp_path, replica_config(tmp_path, app, "b"), name="b")
            for name in SHORT:
                publish(publisher, "work", json.dumps({"n": name}))
            wait_until(lambda: {name_of(r) for r in app.received} >= set(SHORT), 30)
            # B took them all while A was still finishing its task
            assert a.process.poll() is None
            shorts_done = time.monotonic()
            assert shorts_done < long_started + LONG_S
            # past three lease lengths and more: the lease was kept, nobody got it again
            time.sleep(max(0.0, long_started + 4 * LEASE_S - time.monotonic()))
            [row] = queue_rows(tmp_path / "queues.db", "work")
            assert (row["id"], row["leased"]) == (long_id, True)
            assert a.wait(timeout_s=LONG_S + 30) == 0
            exited = time.monotonic()
            if drain is not None:
                drain.join()
                assert drain.status == 200
                assert drain.answered_at is not None
                assert long_started + LONG_S - 1 <= drain.answered_at <= exited + 1
            assert exited >= long_started + LONG_S - 1  # not cut short at grace_s
            time.sleep(LEASE_S + 1)  # a redelivery to B would come by now
        finally:
            codes = [b.stop() if b is not None else 0, a.stop()]
        assert codes == [0, 0]
        names = [name_of(r) for r in app.received]
    assert sorted(names) == sorted(["long", *SHORT])  # each once: nothing redelivered
    records_a = journal_records(tmp_path / "journal-a")
    assert [(r["message_id"], r["outcome"], r["attempt"]) for r in records_a] == [
        (long_id, "ack", 1)]
    records_b = journal_records(tmp_path / "journal-b")
    assert sorted(r["outcome"] for r in records_b) == ["ack"] * len(SHORT)
    assert queue_rows(tmp_path / "queues.db", "work") == []
