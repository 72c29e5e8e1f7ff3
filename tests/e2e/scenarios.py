"""The end-to-end scenarios every broker must pass, written once and subclassed per broker.

Each test runs the real ``priority-pubsub run`` subprocess against a real broker (server or
emulator) and a real HTTP app (``RecordingApp``), and checks what the app saw, what the
journal recorded and what reached the dead-letter destination.

How to add a broker (the FastStream ``tests/brokers/base`` pattern):

1. Write its topology in ``tests/support/topologies/<broker>.py``: a class satisfying
   ``tests.support.topologies.base.Topology`` (fresh uniquely named queues, ``publish``,
   ``dead_letters``, ``driver_options``, ``dead_letter_config``, ``close``). The driver tests in
   ``tests/drivers`` use the same class.
   Add its fixture (fresh topology per test, closed after) to
   ``tests/support/topologies/fixtures.py``.
2. In ``tests/e2e/test_<broker>_e2e.py``, subclass ``SidecarScenarios``, mark it, and return
   that fixture as ``topology``::

       pytestmark = pytest.mark.redis

       class TestRedisScenarios(SidecarScenarios):
           @pytest.fixture
           def topology(self, redis_topology: RedisTopology) -> RedisTopology:
               return redis_topology

   Tune the class attributes below only where the broker really differs (say why in a
   comment). Broker-specific tests (wire formats, native features) go next to the subclass.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from priority_pubsub.delivery.settlement import LAST_ATTEMPT_KEPT
from priority_pubsub.delivery.worker import SHUTDOWN_REASON
from priority_pubsub.drivers.registry import driver_class
from tests.e2e.helpers import (
    assert_attempts_follow_the_stop_rule,
    assert_strict_with_a_late_high,
    journal_records,
    total,
    wait_until,
)
from tests.e2e.long_task_scenarios import LongTaskScenarios
from tests.support.app import Received, RecordingApp, Reply
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, start_sidecar
from tests.support.topologies.base import Topology, topology_config


def body(data: object) -> bytes:
    """A JSON body: the sidecar wraps it into a CloudEvent whose ``data`` is ``data``."""
    return json.dumps(data).encode()


SETTLED = "priority_pubsub_messages_settled_total"
APP_DOWN_RETRY = {"max_attempts": 3, "initial_delay_s": 0.5, "max_delay_s": 1}
"""The whole schedule (0.5 s, then 1 s) is over within ~2 s: any outage longer than that would
dead-letter every message if deliveries that never reached the app counted as attempts."""


@dataclass(frozen=True)
class BatchedRun:
    """What a publish-while-waiting run delivered: deliveries per published number and the
    delivered numbers that no journal shows acked."""

    published: int
    deliveries: Counter[int]
    unacked: list[int]

    @property
    def missing(self) -> list[int]:
        return sorted(set(range(self.published)) - set(self.deliveries))

    @property
    def duplicated(self) -> int:
        return sum(count - 1 for count in self.deliveries.values())


def _outcomes(directory: Path) -> list[str]:
    return sorted(record["outcome"] for record in journal_records(directory / "journal"))


class SidecarScenarios(LongTaskScenarios):
    """Subclass per broker and provide a ``topology`` fixture (see the module docstring).
    The long-task scenarios (reserve, max_concurrency, max_wait_s) come with it."""

    ready_timeout_s: ClassVar[float] = 20
    """How long the sidecar may take to become ready (SDK connection set-up)."""
    short_lease_s: ClassVar[float] = 1.0
    """The shortest lease the broker honours reliably; the long task runs 3.5 of these."""
    gap_slack_s: ClassVar[float] = 2.5
    """How much later than its backoff delay a retry may arrive (polling granularity)."""
    concurrency: ClassVar[int] = 2
    """Tasks at once in the long-task and backoff scenarios: with 2, a lapsed lease is taken
    again by the idle slot, and settles run concurrently."""
    replica_messages: ClassVar[int] = 40
    """Messages the two replicas share (0.2 s each, two at a time per replica)."""
    app_down_messages: ClassVar[int] = 10
    app_down_s: ClassVar[float] = 10.0
    """The app-down scenario: this many messages wait while the app is away this
    long, far longer than the whole retry schedule (``APP_DOWN_RETRY``)."""
    app_down_concurrency: ClassVar[int] = 4
    app_down_delivered_timeout_s: ClassVar[float] = 90.0
    waiting_batches: ClassVar[int] = 6
    waiting_batch_size: ClassVar[int] = 20
    waiting_batch_gap_s: ClassVar[float] = 0.5
    """The publish-while-waiting scenario: batches this far apart, so the sidecars
    are back in their wait on every queue when the next batch lands on both."""
    counts_exactly: ClassVar[bool] = False
    """The driver owns its delivery count and undoes it for a return (local): every message
    reaches the app first as attempt 1, even those in hand when the app went away. Elsewhere
    an outage costs the messages in hand one count (docs/app/down.md)."""

    def config(self, topology: Topology, directory: Path, app: RecordingApp, queues: list[str],
               **overrides: Any) -> dict[str, Any]:
        return topology_config(topology, directory, app.url, queues, **overrides)

    def start(self, directory: Path, config: dict[str, Any], name: str = "sidecar"
              ) -> SidecarProcess:
        return start_sidecar(directory, config, ready_timeout_s=self.ready_timeout_s, name=name)

    def test_strict_priority_with_a_late_high(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        high, low = topology.queue("high", lease_s=10), topology.queue("low", lease_s=10)
        app.behaviour = lambda _: Reply(delay_s=0.3)
        for n in range(6):  # the low backlog is there first
            topology.publish(low, body(n))
        for n in range(4):
            topology.publish(high, body(n))
        sidecar = self.start(tmp_path, self.config(topology, tmp_path, app, [high, low],
                                                   lease={"duration_s": 10}))
        try:
            app.wait_for(6, timeout_s=30)  # four high, then lows: a high arrives mid-backlog
            topology.publish(high, body("late"))
            received = app.wait_for(11, timeout_s=30)
        finally:
            assert sidecar.stop() == 0
        assert_strict_with_a_late_high(received, high, low)

    def test_long_task_is_delivered_once(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        lease_s = self.short_lease_s
        queue = topology.queue("long", lease_s=lease_s)
        app.behaviour = lambda _: Reply(delay_s=3.5 * lease_s)
        topology.publish(queue, body("long"))
        config = self.config(topology, tmp_path, app, [queue], concurrency=self.concurrency,
                             lease={"duration_s": lease_s})
        sidecar = self.start(tmp_path, config)
        try:
            app.wait_for(1)
            wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=10 * lease_s)
            time.sleep(1.5 * lease_s)  # a lapsed lease would show up as a second delivery
            metrics = sidecar.metrics()
        finally:
            assert sidecar.stop() == 0
        assert len(app.received) == 1
        [record] = journal_records(tmp_path / "journal")
        assert (record["outcome"], record["attempt"]) == ("ack", 1)
        [extensions] = [line for line in metrics.splitlines()
                        if line.startswith("priority_pubsub_lease_extensions_total{")]
        assert float(extensions.split()[-1]) >= 2

    def test_backoff_then_max_attempts_then_dead_letter(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        queue = topology.queue("retry", lease_s=10)

        def flaky_or_doomed(request: Received) -> Reply:
            succeeds = request.event["data"] == "flaky" and request.event["attempt"] >= 3
            return Reply(200) if succeeds else Reply(503)

        app.behaviour = flaky_or_doomed
        topology.publish(queue, body("flaky"))
        topology.publish(queue, body("doomed"), {"origin": "e2e"})
        config = self.config(topology, tmp_path, app, [queue], concurrency=self.concurrency,
                             lease={"duration_s": 10},
                             retry={"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 8})
        sidecar = self.start(tmp_path, config)
        try:
            wait_until(lambda: len(journal_records(tmp_path / "journal")) == 6, timeout_s=40)
        finally:
            assert sidecar.stop() == 0
        by_data: dict[str, list[Received]] = {"flaky": [], "doomed": []}
        for request in app.received:
            by_data[request.event["data"]].append(request)
        for data, requests in by_data.items():  # attempts come from the broker
            assert [r.event["attempt"] for r in requests] == [1, 2, 3], data
            gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
            for gap, delay in zip(gaps, (1, 2), strict=True):  # initial 1 s, doubled
                assert delay - 0.1 <= gap <= delay + self.gap_slack_s, (data, gaps)
        [letter] = topology.dead_letters()
        assert json.loads(letter.body) == "doomed"  # body kept
        assert letter.attributes.get("origin") == "e2e"  # attributes kept
        assert "max attempts (3) reached" in (letter.reason or "")
        assert _outcomes(tmp_path) == ["ack", "dead", "retry", "retry", "retry", "retry"]

    def test_fatal_code_dead_letters_at_once(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        queue = topology.queue("fatal", lease_s=10)
        app.behaviour = lambda _: Reply(422)
        topology.publish(queue, body("invalid"), {"origin": "frontend"})
        config = self.config(topology, tmp_path, app, [queue], lease={"duration_s": 10})
        sidecar = self.start(tmp_path, config)
        try:
            wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
        finally:
            assert sidecar.stop() == 0
        [letter] = topology.dead_letters()
        assert json.loads(letter.body) == "invalid"
        assert letter.attributes.get("origin") == "frontend"
        assert "422" in (letter.reason or "")
        assert len(app.received) == 1  # never retried
        assert _outcomes(tmp_path) == ["dead"]

    def test_sigterm_returns_unfinished_messages_at_once(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        queue = topology.queue("busy", lease_s=60)
        app.behaviour = lambda _: Reply(delay_s=30 if len(app.received) == 1 else 0)
        topology.publish(queue, body("busy"))
        config = self.config(topology, tmp_path, app, [queue], lease={"duration_s": 60},
                             shutdown={"grace_s": 1})
        sidecar = self.start(tmp_path, config)
        try:
            app.wait_for(1)
            sidecar.terminate()
            assert sidecar.wait(timeout_s=20) == 0
        finally:
            sidecar.stop()
        [record] = journal_records(tmp_path / "journal")
        assert record["outcome"] == "retry"
        # Back on the queue now, not after the 60 s lease: a replica gets it at once.
        replica = self.start(tmp_path, {**config, "journal": None}, name="replica")
        try:
            received = app.wait_for(2, timeout_s=20)
        finally:
            assert replica.stop() == 0
        assert received[1].event["data"] == "busy"
        assert received[1].event["attempt"] == 2

    def test_sigterm_never_punishes_a_message(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        """Issue 42 item 4 (daprd 1.18: dapr/dapr #9619, #9844): SIGTERM while the app holds
        two messages past the grace period, one at its last attempt, and while new ones
        arrive. A delivery cut short counts its attempt, never past the limit, and goes back
        at once; what the app never got goes back uncounted where the broker can (elsewhere
        the broker counts it, and the next delivery is made all the same). After a restart
        every message is acked once; nothing is dead-lettered."""
        counted = driver_class(topology.driver_type).releases_count_as_attempts
        lease_s, grace_s, limit = 60.0, 1.0, 2
        queue = topology.queue("stop", lease_s=lease_s)
        run = uuid.uuid4().hex[:6]
        edge, held = f"{run}-edge", f"{run}-held"
        arriving = [f"{run}-new-{n}" for n in range(4)]
        restarted = threading.Event()

        def stop_cuts_edge_and_held(request: Received) -> Reply:
            data = request.event["data"]
            if restarted.is_set() or data in arriving:
                return Reply()
            if data == edge and request.event["attempt"] == 1:
                return Reply(503)  # back at once as attempt 2, the last
            return Reply(until_closed=True)  # held past the grace period

        def at_app() -> set[tuple[str, int]]:
            return {(e["data"], e["attempt"]) for e in app.events()}

        app.behaviour = stop_cuts_edge_and_held
        topology.publish(queue, body(edge))
        topology.publish(queue, body(held))
        config = self.config(topology, tmp_path, app, [queue], concurrency=3,
                             lease={"duration_s": lease_s}, shutdown={"grace_s": grace_s},
                             retry={"max_attempts": limit, "initial_delay_s": 0.2,
                                    "max_delay_s": 0.5})
        sidecar = self.start(tmp_path, config)
        try:
            wait_until(lambda: {(edge, 2), (held, 1)} <= at_app(), timeout_s=30)
            for data in arriving[:2]:
                topology.publish(queue, body(data))
            wait_until(lambda: arriving[0] in {data for data, _ in at_app()}, timeout_s=30)
            sidecar.terminate()
            for data in arriving[2:]:  # while it drains, or once it is gone
                topology.publish(queue, body(data))
            # Pub/Sub waits for a pull in flight (up to 21 s) before it exits
            assert sidecar.wait(timeout_s=grace_s + 45) == 0
        finally:
            sidecar.stop()
        restarted.set()
        published = {edge, held, *arriving}

        def acked() -> Counter[str]:
            data_of = {e["id"]: e["data"] for e in app.events()}
            return Counter(data_of[r["message_id"]]
                           for r in journal_records(tmp_path / "journal")
                           if r["outcome"] == "ack")

        def settled() -> bool:  # all acked, or one dead-lettered (asserted below)
            return set(acked()) == published or "dead" in _outcomes(tmp_path)

        replica = self.start(tmp_path, config, name="restarted")
        try:  # back at once: well within the lease a message not returned would wait out
            wait_until(settled, timeout_s=lease_s / 2)
        finally:
            assert replica.stop() == 0
        assert topology.dead_letters() == []
        assert acked() == Counter(published)  # nothing lost, each acked once
        records = journal_records(tmp_path / "journal", releases=True)
        assert {r["outcome"] for r in records} <= {"ack", "retry", "release"}, records
        data_of = {e["id"]: e["data"] for e in app.events()}
        cut = {data_of[r["message_id"]]: (r["outcome"], r["attempt"], r["reason"])
               for r in records if r["reason"] and r["reason"].startswith(SHUTDOWN_REASON)}
        assert cut.pop(held) == ("retry", 1, SHUTDOWN_REASON)
        assert cut.pop(edge) == ("retry", limit, f"{SHUTDOWN_REASON}; {LAST_ATTEMPT_KEPT}")
        assert set(cut) <= set(arriving), cut  # one answering slower than the grace period
        by_message: dict[str, list[dict[str, Any]]] = {}
        for record in records:  # in the order they were written, run after run
            by_message.setdefault(record["message_id"], []).append(record)
        for history in by_message.values():
            assert_attempts_follow_the_stop_rule(history, releases_counted=counted)
        [edge_acked] = [r["attempt"] for r in records if r["outcome"] == "ack"
                        and data_of[r["message_id"]] == edge]
        # delivered once more, as the last attempt where the broker lets the stop's return
        # go uncounted, past it elsewhere (admit never refuses there)
        assert edge_acked > limit if counted else edge_acked == limit

    def test_two_replicas_share_queues_without_double_delivery(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        queue = topology.queue("shared", lease_s=30)
        app.behaviour = lambda _: Reply(delay_s=0.2)
        for n in range(self.replica_messages):
            topology.publish(queue, body(n))
        config = self.config(topology, tmp_path, app, [queue], concurrency=2, journal=None,
                             lease={"duration_s": 30})
        # both start before either is waited for, so neither drains the queue alone
        replicas = [SidecarProcess(tmp_path, config, name=f"replica{n}") for n in range(2)]
        try:
            for replica in replicas:
                replica.wait_ready(timeout_s=self.ready_timeout_s)
            app.wait_for(self.replica_messages, timeout_s=60)
            time.sleep(1)  # a double delivery would arrive by now
        finally:
            codes = [replica.stop() for replica in replicas]
        assert codes == [0, 0]
        delivered = Counter(r.event["data"] for r in app.received)
        assert sorted(delivered) == list(range(self.replica_messages))
        assert set(delivered.values()) == {1}
        assert app.max_in_progress > 2  # both replicas really worked at once

    def test_app_down_longer_than_the_retry_schedule_loses_nothing(
        self, tmp_path: Path, topology: Topology
    ) -> None:
        queue = topology.queue("down", lease_s=30)
        port, run = free_port(), uuid.uuid4().hex[:6]
        config = topology_config(topology, tmp_path, f"http://127.0.0.1:{port}", [queue],
                                 retry=APP_DOWN_RETRY, concurrency=self.app_down_concurrency,
                                 lease={"duration_s": 30})
        with RecordingApp(port=port) as app:
            sidecar = self.start(tmp_path, config)
            topology.publish(queue, body(f"warm-{run}"))
            app.wait_for(1)
        try:
            for n in range(self.app_down_messages):
                topology.publish(queue, body(f"{run}-{n}"))
            went_down = time.monotonic()
            wait_until(lambda: total(sidecar.metrics(), "priority_pubsub_app_up") == 0, 30)
            time.sleep(max(0.0, self.app_down_s - (time.monotonic() - went_down)))
            assert topology.dead_letters() == []
            with RecordingApp(port=port) as app:
                wait_until(lambda: total(sidecar.metrics(), SETTLED, outcome="ack")
                           >= self.app_down_messages + 1, self.app_down_delivered_timeout_s)
                seen = Counter(request.event["data"] for request in app.received)
                metrics = sidecar.metrics()
        finally:
            assert sidecar.stop() == 0
        assert set(seen) == {f"{run}-{n}" for n in range(self.app_down_messages)}
        assert topology.dead_letters() == []
        records = journal_records(tmp_path / "journal", releases=True)
        outcomes = Counter(record["outcome"] for record in records)
        assert outcomes["dead"] == outcomes["drop"] == 0, outcomes
        acked = Counter(r["message_id"] for r in records if r["outcome"] == "ack")
        assert len(acked) == self.app_down_messages + 1
        assert set(acked.values()) == {1}
        released = [r for r in records if r["outcome"] == "release"]
        assert released, "the outage was never noticed"
        assert all(r["reason"].startswith("app not reachable") for r in released), released
        assert all(r["http_status"] is None for r in released)
        # The pause bounds the cost: at most the messages in hand per outage.
        pauses = total(metrics, "priority_pubsub_app_pauses_total", cause="unreachable")
        assert pauses >= 1
        assert len(released) <= self.app_down_concurrency * pauses
        for outcome, count in outcomes.items():  # journal and metrics agree
            assert total(metrics, SETTLED, outcome=outcome) == count, outcome
        assert total(metrics, "priority_pubsub_app_up") == 1
        if self.counts_exactly:
            assert {r["attempt"] for r in records if r["outcome"] == "ack"} == {1}

    def test_batches_published_while_waiting_on_two_queues_all_arrive(
        self, tmp_path: Path, app: RecordingApp, topology: Topology
    ) -> None:
        """A wake-up on one queue cancels the waits on the others while the broker
        may be handing them messages; none of those may be lost (two replicas)."""
        run = self.run_batches_while_waiting(tmp_path, app, topology, replicas=2, concurrency=4)
        assert run.missing == [], f"{len(run.missing)} of {run.published} never arrived"
        assert run.unacked == []
        assert run.duplicated <= 2 * 4, run.duplicated  # at most what both replicas held

    def run_batches_while_waiting(
        self, directory: Path, app: RecordingApp, topology: Topology, *, replicas: int,
        concurrency: int, batches: int | None = None, batch_size: int | None = None,
    ) -> BatchedRun:
        """Publish ``batches`` x ``batch_size`` messages, alternating between two queues, while
        ``replicas`` sidecars run (lease 10 s, app answering in 30 ms); then wait until every
        one arrived or the broker had ample time to redeliver (a lost lease comes back after
        10 s), and account for them."""
        batches, batch_size = batches or self.waiting_batches, batch_size or self.waiting_batch_size
        published = batches * batch_size
        queues = [topology.queue("wait-high", lease_s=10), topology.queue("wait-low", lease_s=10)]
        app.behaviour = lambda _: Reply(delay_s=0.03)
        config = self.config(topology, directory, app, queues, concurrency=concurrency,
                             lease={"duration_s": 10})
        sidecars = [SidecarProcess(directory, config, name=f"waiter{n}") for n in range(replicas)]

        def all_arrived() -> bool:
            return len(app.received) >= published and len(
                {event["data"] for event in app.events()}) >= published

        try:
            for sidecar in sidecars:
                sidecar.wait_ready(timeout_s=self.ready_timeout_s)
            for n in range(published):
                topology.publish(queues[n % 2], body(n))
                if n % batch_size == batch_size - 1:
                    time.sleep(self.waiting_batch_gap_s)  # the sidecars go back to waiting
            with contextlib.suppress(AssertionError):  # what is missing is counted below
                wait_until(all_arrived, timeout_s=15)
            time.sleep(0.5)  # a duplicate would arrive by now
        finally:
            for sidecar in sidecars:  # all at once: each may let a waiting pull end first
                sidecar.terminate()
            # one SIGTERM each: a second one (``stop``) could hit a process past its handlers
            codes = [sidecar.wait(timeout_s=60) for sidecar in sidecars]
        assert codes == [0] * replicas
        events = app.events()
        acked = {r["message_id"] for r in journal_records(directory / "journal")
                 if r["outcome"] == "ack"}
        return BatchedRun(published, Counter(e["data"] for e in events),
                          sorted({e["data"] for e in events if e["id"] not in acked}))
