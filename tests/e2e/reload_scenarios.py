"""Live reload end to end: the real ``priority-pubsub run`` process
reloads its config on SIGHUP and when a ConfigMap-style volume swaps it, refuses what only a
restart can change, removes and adds queues, and pauses a queue on every replica.

A small base class of its own, next to ``SidecarScenarios`` in the brokers that run it (local
and SQS: ``QueueAdder`` drivers, the two ways a queue is added; a reload changes nothing a
driver does, so the other brokers would only repeat these at their cost in CI time)::

    class TestLocalScenarios(SidecarScenarios, ReloadScenarios): ...

Every wait is on a condition the sidecar reports (``priority_pubsub_config_reloads_total``,
the app's requests, the journal), deadlines are derived from the configured task lengths.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from tests.e2e.helpers import journal_records, total
from tests.support.app import Received, RecordingApp, Reply
from tests.support.configmap import ConfigMapVolume
from tests.support.sidecar import SidecarProcess, write_config
from tests.support.topologies.base import Topology
from tests.support.waiting import wait_until

RELOADS = "priority_pubsub_config_reloads_total"
APPLIED_WITHIN_S = 5.0
"""A change to a watched file is applied within 5 s (SIGHUP: at once)."""
LONG_S = 6.0
"""A long task: it runs through the reload and well past it."""


def tag(data: str) -> bytes:
    return json.dumps(data).encode()


def data_of(request: Received) -> str:
    return str(request.event["data"])


def reloads(sidecar: SidecarProcess, result: str) -> float:
    return total(sidecar.metrics(), RELOADS, result=result)


def wait_reloaded(sidecar: SidecarProcess, result: str, count: int,
                  timeout_s: float = APPLIED_WITHIN_S) -> None:
    """Until ``count`` reloads ended as ``result``; the process must stay up meanwhile."""
    def done() -> bool:
        assert sidecar.process.poll() is None, f"sidecar exited:\n{sidecar.logs()}"
        return reloads(sidecar, result) >= count

    wait_until(done, timeout_s=timeout_s)


def state(sidecar: SidecarProcess) -> dict[str, Any]:
    document = httpx.get(f"{sidecar.ops_url}/api/v1/state", timeout=5).json()
    assert isinstance(document, dict)
    return document


def queue_row(sidecar: SidecarProcess, name: str) -> dict[str, Any]:
    row: dict[str, Any] = next(q for q in state(sidecar)["queues"] if q["name"] == name)
    return row


class ReloadScenarios:
    """Mixed in after ``SidecarScenarios`` (which gives ``config`` and ``ready_timeout_s``)."""

    ready_timeout_s: ClassVar[float]

    def config(self, topology: Topology, directory: Path, app: RecordingApp, queues: list[str],
               **overrides: Any) -> dict[str, Any]:
        raise NotImplementedError

    def running(self, directory: Path, config: dict[str, Any], name: str = "sidecar",
                volume: ConfigMapVolume | None = None) -> SidecarProcess:
        sidecar = SidecarProcess(directory, config, name=name,
                                 write=volume.write if volume is not None else None)
        sidecar.wait_ready(timeout_s=self.ready_timeout_s)
        return sidecar

    @pytest.mark.parametrize("trigger", ["SIGHUP", "ConfigMap swap"])
    def test_a_reserve_added_while_long_tasks_run_holds_for_the_next_takes(
        self, tmp_path: Path, app: RecordingApp, topology: Topology, trigger: str
    ) -> None:
        """Three long low tasks hold three of four workers when the reload gives high a
        reserve of one: they run on untouched (delivered once, settled once, no release), a
        low published then waits for one of them to end, a high takes the reserved worker."""
        high, low = topology.queue("high", lease_s=30), topology.queue("low", lease_s=30)
        app.behaviour = lambda r: Reply(delay_s=LONG_S if data_of(r).startswith("long") else 0.1)
        longs = [f"long-{n}" for n in range(3)]
        for data in longs:
            topology.publish(low, tag(data))
        swapped = trigger == "ConfigMap swap"
        volume = ConfigMapVolume(tmp_path / "configmap") if swapped else None
        config = self.config(topology, tmp_path, app, [high, low], concurrency=4,
                             lease={"duration_s": 30}, reload={"watch": swapped})
        sidecar = self.running(tmp_path, config, volume=volume)
        try:
            app.wait_for(3, timeout_s=30)  # the three long tasks run
            pid = sidecar.process.pid
            reserved = {**sidecar.config, "queues": [{"name": high, "reserve": 1},
                                                     {"name": low}]}
            if volume is not None:
                volume.write(reserved)  # no signal: the watch sees the swap
            else:
                write_config(tmp_path, reserved, sidecar.config_path.name)
                sidecar.hang_up()
            wait_reloaded(sidecar, "applied", 1)
            topology.publish(low, tag("low-after"))
            published = time.time()
            topology.publish(high, tag("high-after"))
            app.wait_for(5, timeout_s=3 * LONG_S)
            wait_until(lambda: len(journal_records(tmp_path / "journal", releases=True)) >= 5,
                       timeout_s=10)
            assert (sidecar.process.poll(), sidecar.process.pid) == (None, pid)  # stayed up
        finally:
            assert sidecar.stop() == 0
        seen = {data_of(r): r for r in app.received}
        assert Counter(data_of(r) for r in app.received) == Counter(
            [*longs, "low-after", "high-after"])  # each once
        assert seen["high-after"].at - published <= 2.0  # the reserved worker, at once
        first_end = min(seen[data].at for data in longs) + LONG_S
        assert seen["low-after"].at >= first_end - 0.5  # not the fourth worker any more
        records = journal_records(tmp_path / "journal", releases=True)
        assert [r["outcome"] for r in records] == ["ack"] * 5  # no release, no retry
        running = {seen[data].event["id"] for data in longs}
        assert sorted(r["attempt"] for r in records if r["message_id"] in running) == [1] * 3
        # (a message published after the reload may show attempt 2 on SQS: a long poll the
        # reload's new take cancelled caught it and handed it back, drivers/sqs/driver.py)

    def test_an_invalid_file_and_a_restart_only_change_are_refused(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        queue = topology.queue("steady", lease_s=30)
        app.behaviour = lambda _: Reply(delay_s=0.05)
        config = self.config(topology, tmp_path, app, [queue], concurrency=2,
                             lease={"duration_s": 30}, reload={"watch": False})
        sidecar = self.running(tmp_path, config)
        try:
            started = state(sidecar)["config"]
            sidecar.config_path.write_text("queues: [\n")  # not YAML
            sidecar.hang_up()
            wait_reloaded(sidecar, "refused", 1)
            restart_only = {**sidecar.config, "concurrency": 3, "lease": {"duration_s": 31}}
            write_config(tmp_path, restart_only, sidecar.config_path.name)
            sidecar.hang_up()
            wait_reloaded(sidecar, "refused", 2)
            topology.publish(queue, tag("after"))  # delivery goes on
            app.wait_for(1, timeout_s=20)
            metrics = sidecar.metrics()
            wait_until(lambda: state(sidecar)["config"]["last_refused"] is not None,
                       timeout_s=10)  # the page's snapshot is shared for refresh_s
            now = state(sidecar)["config"]
        finally:
            assert sidecar.stop() == 0
        assert total(metrics, "priority_pubsub_concurrency") == 2  # the old config, all of it
        assert total(metrics, RELOADS, result="applied") == 0
        assert (now["hash"], now["loaded_ms"]) == (started["hash"], started["loaded_ms"])
        assert "lease.duration_s" in now["last_refused"]["reason"]
        refusals = [json.loads(line) for line in sidecar.logs().splitlines()
                    if "config reload refused" in line]
        assert len(refusals) == 2, refusals  # one line each
        assert "cannot parse" in refusals[0]["reason"]
        assert refusals[1]["restart_only"] == ["lease.duration_s"]

    def test_a_removed_queue_finishes_its_work_and_an_added_one_is_served_in_order(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        """[keep, gone] -> [added, keep] while gone's two slow tasks hold both workers: they
        finish and settle once, gone is taken from no more, and once the workers are free
        the added queue, now the highest, is served before keep."""
        keep, gone = topology.queue("keep", lease_s=30), topology.queue("gone", lease_s=30)
        added = topology.queue("added", lease_s=30)
        slow_s = 4.0
        app.behaviour = lambda r: Reply(delay_s=slow_s if data_of(r).startswith("slow") else 0.2)
        for n in range(2):
            topology.publish(gone, tag(f"slow-{n}"))
        config = self.config(topology, tmp_path, app, [keep, gone], concurrency=2,
                             lease={"duration_s": 30}, reload={"watch": False})
        sidecar = self.running(tmp_path, config)
        try:
            app.wait_for(2, timeout_s=30)
            for n in range(3):
                topology.publish(keep, tag(f"keep-{n}"))
                topology.publish(added, tag(f"added-{n}"))
            write_config(tmp_path, {**sidecar.config, "queues": [{"name": added},
                                                                  {"name": keep}]},
                         sidecar.config_path.name)
            sidecar.hang_up()
            wait_reloaded(sidecar, "applied", 1)
            applied_at = time.time()
            topology.publish(gone, tag("gone-after"))
            app.wait_for(8, timeout_s=4 * slow_s)
            wait_until(lambda: len(journal_records(tmp_path / "journal")) >= 8, timeout_s=10)
            time.sleep(1.0)  # a take from gone would have delivered by now
        finally:
            assert sidecar.stop() == 0
        received = [data_of(r) for r in app.received]
        assert "gone-after" not in received
        assert Counter(received) == Counter(
            ["slow-0", "slow-1", *(f"{q}-{n}" for q in ("added", "keep") for n in range(3))])
        assert min(r.at for r in app.received if data_of(r).startswith("slow")) + slow_s \
            > applied_at  # the reload came while both slow tasks ran
        after = [data for data in received if not data.startswith("slow")]
        assert [data.split("-")[0] for data in after[:3]] == ["added"] * 3, after
        slow = [r for r in journal_records(tmp_path / "journal", releases=True)
                if r["queue"] == gone]
        assert sorted((r["outcome"], r["attempt"]) for r in slow) == [("ack", 1)] * 2

    def test_a_queue_paused_by_the_config_stops_every_replica_until_resumed(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        """Two replicas share a queue, each with its own ConfigMap volume (each pod's
        kubelet writes its own copy of the same edit): ``paused: true`` stops both, the
        monitor says by whom, and the next edit resumes both."""
        queue = topology.queue("fleet", lease_s=30)
        task_s = 2.0
        app.behaviour = lambda _: Reply(delay_s=task_s)
        config = self.config(topology, tmp_path, app, [queue], concurrency=2, journal=None,
                             lease={"duration_s": 30})
        volumes = [ConfigMapVolume(tmp_path / f"pod{n}") for n in range(2)]
        replicas = [SidecarProcess(tmp_path, config, name=f"pod{n}", write=volume.write)
                    for n, volume in enumerate(volumes)]
        try:
            for replica in replicas:
                replica.wait_ready(timeout_s=self.ready_timeout_s)
            for volume, replica in zip(volumes, replicas, strict=True):
                volume.write({**replica.config, "queues": [{"name": queue, "paused": True}]})
            for replica in replicas:
                wait_reloaded(replica, "applied", 1)
                row = queue_row(replica, queue)
                assert (row["paused_by_config"], row["paused"]) == (True, None)
                page = httpx.get(f"{replica.ops_url}/monitor/live", timeout=5).text
                assert "paused by the config</span> (every replica)" in page
            for n in range(8):
                topology.publish(queue, tag(f"m-{n}"))
            time.sleep(3.0)  # a take by either would have delivered by now
            assert app.received == []
            for volume, replica in zip(volumes, replicas, strict=True):
                volume.write({**replica.config, "queues": [{"name": queue}]})
            for replica in replicas:
                wait_reloaded(replica, "applied", 2)
            app.wait_for(8, timeout_s=8 * task_s)
        finally:
            codes = [replica.stop() for replica in replicas]
        assert codes == [0, 0]
        assert sorted(data_of(r) for r in app.received) == [f"m-{n}" for n in range(8)]
        assert app.max_in_progress > 2  # both replicas took again, at once
