"""RabbitMQ end to end: queues on the machine's RabbitMQ (unique names) or on a private
server -> the real ``priority-pubsub run`` subprocess (driver ``rabbitmq``) -> a real app."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from priority_pubsub.drivers.base import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from priority_pubsub.drivers.rabbitmq_wire import ATTEMPT_HEADER
from tests.e2e.helpers import assert_strict_with_a_late_high, journal_records, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.rabbitmq_admin import SyncRabbit
from tests.support.rabbitmq_server import PrivateRabbit
from tests.support.sidecar import SidecarProcess, cli, sidecar_config, start_sidecar, write_config
from tests.support.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.rabbitmq


def event(data: object, topic: str = "tasks") -> bytes:
    """A CloudEvent as Dapr's ``pubsub.rabbitmq`` publishes it (the message body)."""
    return json.dumps({"specversion": "1.0", "id": str(uuid.uuid4()), "source": "frontend",
                       "type": "com.dapr.event.sent", "topic": topic, "pubsubname": "rabbit",
                       "datacontenttype": "application/json", "data": data}).encode()


class Rabbit(SyncRabbit):
    def config(self, directory: Path, app_url: str, queues: list[str], dead: str,
               **overrides: Any) -> dict[str, Any]:
        driver = {"type": "rabbitmq", "url": overrides.pop("url", self.url),
                  **overrides.pop("driver", {})}
        defaults = {"dead_letter": {"queue": dead}, "lease": {"duration_s": 10}}
        return sidecar_config(directory, app_url, driver, queues, **{**defaults, **overrides})

    def declare(self, *queues: str) -> None:
        for queue in queues:
            self.run(self.admin.declare(queue))


@pytest.fixture
def rabbit(rabbitmq_url: str) -> Iterator[Rabbit]:
    topology = Rabbit(rabbitmq_url)
    yield topology
    topology.close()


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return 0


def test_strict_priority_with_a_late_high(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, low, dead = rabbit.name("high"), rabbit.name("low"), rabbit.name("dead")
    rabbit.declare(high, low)
    app.behaviour = lambda _: Reply(delay_s=0.3)
    for n in range(6):  # the low backlog is there first
        rabbit.publish(low, event(n))
    for n in range(4):
        rabbit.publish(high, event(n))
    sidecar = start_sidecar(tmp_path, rabbit.config(tmp_path, app.url, [high, low], dead))
    try:
        app.wait_for(6)
        rabbit.publish(high, event("late"))
        received = app.wait_for(11, timeout_s=30)
    finally:
        assert sidecar.stop() == 0
    assert_strict_with_a_late_high(received, high, low)


def test_weighted_shares_follow_weights(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    names = [rabbit.name(p) for p in ("high", "normal", "low")]
    dead = rabbit.name("dead")
    rabbit.declare(*names)
    for name in names:
        for _ in range(250):
            rabbit.publish(name, b"{}")
    config = rabbit.config(tmp_path, app.url, names, dead, concurrency=4,
                           scheduling="weighted", journal=None,
                           log={"level": "warning", "format": "json"})
    config["queues"] = [{"name": n, "weight": w} for n, w in zip(names, (6, 3, 1), strict=True)]
    sidecar = start_sidecar(tmp_path, config)
    try:
        received = app.wait_for(300, timeout_s=60)
    finally:
        assert sidecar.stop() == 0
    served = Counter(r.event["queue"] for r in received[:300])
    shares = [served[name] / 300 for name in names]
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.07), shares
    assert all(rabbit.count(name) > 0 for name in names)  # weights, not empties, decided


def test_task_three_times_the_lease_is_delivered_once(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    app.behaviour = lambda _: Reply(delay_s=6.5)
    rabbit.declare(high)
    rabbit.publish(high, event("long"))
    config = rabbit.config(tmp_path, app.url, [high], dead, lease={"duration_s": 2},
                           concurrency=2)
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
        time.sleep(2.5)
    finally:
        assert sidecar.stop() == 0
    assert len(app.received) == 1
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["attempt"], record["driver"]) == ("ack", 1, "rabbitmq")
    assert rabbit.count(high) == 0


def test_task_longer_than_the_servers_consumer_timeout_is_delivered_once(
    tmp_path: Path, app: RecordingApp, short_timeout_rabbit: PrivateRabbit
) -> None:
    """The private server closes any channel holding a delivery unacked for 3 s; the app
    works 9 s. The driver renews the delivery through its hold queue before that."""
    rabbit = Rabbit(short_timeout_rabbit.url)
    try:
        high, dead = rabbit.name("high"), rabbit.name("dead")
        rabbit.declare(high)
        app.behaviour = lambda _: Reply(delay_s=9)
        rabbit.publish(high, event("hour-long"))
        config = rabbit.config(tmp_path, app.url, [high], dead, lease={"duration_s": 1.5},
                               driver={"consumer_timeout_s": 3})
        sidecar = start_sidecar(tmp_path, config)
        try:
            app.wait_for(1)
            wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=20)
            time.sleep(2)
        finally:
            assert sidecar.stop() == 0
        assert len(app.received) == 1
        [record] = journal_records(tmp_path / "journal")
        assert (record["outcome"], record["attempt"]) == ("ack", 1)
        assert "delivery renewed before consumer_timeout" in sidecar.logs()
        assert rabbit.count(high) == 0
    finally:
        rabbit.close()


def test_backoff_then_dead_letter_with_reason(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    app.behaviour = lambda _: Reply(503)
    rabbit.publish(high, event("doomed"), {"origin": "frontend"})
    config = rabbit.config(tmp_path, app.url, [high], dead,
                           retry={"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 8})
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 3, timeout_s=25)
    finally:
        assert sidecar.stop() == 0
    assert [r.event["attempt"] for r in app.received] == [1, 2, 3]
    gaps = [b.at - a.at for a, b in itertools.pairwise(app.received)]
    for gap, delay in zip(gaps, (1, 2), strict=True):  # the delay queues' TTLs
        assert delay - 0.1 <= gap <= delay + 2.5, gaps
    [letter] = rabbit.drain(dead, wait_s=2)
    assert "max attempts (3) reached" in letter.headers[DEAD_LETTER_REASON]
    assert letter.headers["origin"] == "frontend"
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == [
        "retry", "retry", "dead"]
    assert rabbit.count(high) == 0


def test_fatal_code_is_dead_lettered_at_once(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    app.behaviour = lambda _: Reply(422)
    published = event("invalid")
    rabbit.publish(high, published, {"origin": "frontend"})
    sidecar = start_sidecar(tmp_path, rabbit.config(tmp_path, app.url, [high], dead))
    try:
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=15)
    finally:
        assert sidecar.stop() == 0
    [letter] = rabbit.drain(dead, wait_s=2)
    assert letter.body == published
    assert letter.headers["origin"] == "frontend"
    assert letter.headers[DEAD_LETTER_SOURCE] == high
    assert "422" in letter.headers[DEAD_LETTER_REASON]
    assert len(app.received) == 1
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == ["dead"]


def test_bad_input_is_dead_lettered_with_a_reason_never_lost(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    rabbit.publish(high, b"bad-attempt", {ATTEMPT_HEADER: "banana"})
    rabbit.publish(high, b"bad-header", {"blob": bytearray(b"\xff\xfe")})
    rabbit.publish(high, b"\xff\xfe not utf-8", content_type="application/octet-stream")
    rabbit.publish(high, event("fine"))
    sidecar = start_sidecar(tmp_path, rabbit.config(tmp_path, app.url, [high], dead))
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 4, timeout_s=15)
        assert sidecar.process.poll() is None  # never a crash
    finally:
        assert sidecar.stop() == 0
    letters = {g.body: g.headers[DEAD_LETTER_REASON] for g in rabbit.drain(dead, wait_s=2)}
    assert set(letters) == {b"bad-attempt", b"bad-header"}
    assert "malformed message: header x-priority-pubsub-attempt" in letters[b"bad-attempt"]
    assert "malformed message: header 'blob' is not UTF-8" in letters[b"bad-header"]
    # the non-UTF-8 body is a body like any other: delivered, as data_base64
    delivered = [r.event for r in app.received]
    assert any(e.get("data_base64") for e in delivered)
    assert any(e.get("data") == "fine" for e in delivered)
    assert rabbit.count(high) == 0


def test_sigterm_returns_unfinished_messages_at_once(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    app.behaviour = lambda _: Reply(delay_s=30)
    rabbit.publish(high, event("busy"))
    config = rabbit.config(tmp_path, app.url, [high], dead, lease={"duration_s": 60},
                           shutdown={"grace_s": 1})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        sidecar.terminate()
        stopped = time.monotonic()
        assert sidecar.wait(timeout_s=20) == 0
    finally:
        sidecar.stop()
    [item] = rabbit.drain(high, wait_s=5)
    assert time.monotonic() - stopped < 15
    assert item.headers[ATTEMPT_HEADER] == 2  # a returned attempt counts
    [record] = journal_records(tmp_path / "journal")
    assert record["outcome"] == "retry"


def test_two_replicas_share_a_queue_without_double_delivery(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    app.behaviour = lambda _: Reply(delay_s=0.05)
    for n in range(60):
        rabbit.publish(high, event(n))
    config = rabbit.config(tmp_path, app.url, [high], dead, concurrency=2, journal=None)
    replicas = [SidecarProcess(tmp_path, config, name=f"replica{n}") for n in range(2)]
    try:
        wait_until(lambda: len(app.received) >= 60 and rabbit.count(high) == 0, timeout_s=40)
        time.sleep(1)
    finally:
        codes = [replica.stop() for replica in replicas]
    assert codes == [0, 0]
    delivered = Counter(r.event["data"] for r in app.received)
    assert sorted(delivered) == list(range(60))
    assert set(delivered.values()) == {1}
    assert app.max_in_progress > 2  # both replicas really worked at once


def test_connection_dropped_mid_run_reconnects_and_loses_nothing(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit, rabbitmq_url: str
) -> None:
    """All traffic goes through a TCP proxy the test cuts for 3 s mid-run: readiness turns
    503, then 200 again after the sidecar reconnects, and every message is served (those in
    hand at the cut come back and are delivered again)."""
    high, dead = rabbit.name("high"), rabbit.name("dead")
    rabbit.declare(high)
    app.behaviour = lambda _: Reply(delay_s=0.3)
    for n in range(20):
        rabbit.publish(high, event(n))
    with tcp_proxy("127.0.0.1", 5672) as proxy:
        url = rabbitmq_url.replace("127.0.0.1:5672", f"127.0.0.1:{proxy.port}")
        config = rabbit.config(tmp_path, app.url, [high], dead, url=url, concurrency=2)
        sidecar = start_sidecar(tmp_path, config)
        try:
            app.wait_for(4)
            proxy.cut()
            wait_until(lambda: _status(f"{sidecar.ops_url}/readyz") == 503, timeout_s=10)
            time.sleep(3)
            assert _status(f"{sidecar.ops_url}/readyz") == 503
            proxy.restore()
            wait_until(lambda: _status(f"{sidecar.ops_url}/readyz") == 200, timeout_s=30)
            wait_until(lambda: {r.event["data"] for r in app.received} == set(range(20))
                       and rabbit.count(high) == 0, timeout_s=40)
            time.sleep(1)
        finally:
            assert sidecar.stop() == 0
    assert "driver unreachable" in sidecar.logs() or "receive failed" in sidecar.logs()
    acked = [r for r in journal_records(tmp_path / "journal") if r["outcome"] == "ack"]
    assert len({r["message_id"] for r in acked}) == 20


def test_publish_stats_requeue_and_metrics(
    tmp_path: Path, app: RecordingApp, rabbit: Rabbit
) -> None:
    high, low, dead = rabbit.name("high"), rabbit.name("low"), rabbit.name("dead")
    config = rabbit.config(tmp_path, app.url, [high, low], dead)
    path = write_config(tmp_path, config)
    published = cli("publish", high, "--data", '{"n": 1}', "--attr", "tier=gold",
                    "--count", "3", config=path)
    assert published.returncode == 0, published.stderr
    assert len(published.stdout.split()) == 3
    stats = cli("stats", "--json", config=path)
    assert stats.returncode == 0, stats.stderr
    report = json.loads(stats.stdout)
    assert report["driver"] == "rabbitmq"
    assert [(q["name"], q["visible"]) for q in report["queues"]] == [(high, 3), (low, 0)]
    assert report["dead_letter"]["visible"] == 0
    check = cli("check", config=path)  # reaches the broker; the URL never shows in full
    assert "guest:guest" not in check.stdout + check.stderr
    app.behaviour = lambda r: Reply(200) if "metadata.requeued_from" in r.headers else Reply(422)
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 3, timeout_s=15)
        moved = cli("requeue", "--from", dead, "--to", high, config=path)
        assert moved.returncode == 0, moved.stderr
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 6, timeout_s=15)
        metrics = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == ["dead"] * 3 + [
        "ack"] * 3
    deliveries = [r for r in app.received if r.body]  # not ``check``'s probe
    assert len(deliveries) == 6
    assert all(r.headers["metadata.tier"] == "gold" for r in deliveries)
    for outcome in ("ack", "dead"):
        labels = f'outcome="{outcome}",priority="0",queue="{high}"'
        assert f"priority_pubsub_messages_settled_total{{{labels}}} 3.0" in metrics
    assert rabbit.count(dead) == 0
    assert rabbit.count(high) == 0
