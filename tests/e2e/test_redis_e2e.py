"""Redis Streams end to end: entries laid out as daprd's ``pubsub.redis`` writes them
(``XADD topic * data <event> [metadata <json>]``) -> the real ``priority-pubsub run``
subprocess -> a real HTTP app. Ordinary tests use the machine's Redis with unique stream
names; the restart test runs a ``redis-server`` of its own on a free port."""

from __future__ import annotations

import base64
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
import redis

from tests.e2e.helpers import assert_strict_with_a_late_high, journal_records, wait_until
from tests.e2e.test_observability import samples
from tests.support.app import Received, RecordingApp, Reply
from tests.support.redis_server import OwnRedis, unique
from tests.support.sidecar import SidecarProcess, cli, sidecar_config, start_sidecar, write_config

pytestmark = pytest.mark.redis
GROUP = "priority-pubsub"


def dapr_event(data: Any, topic: str) -> bytes:
    """A CloudEvent as daprd publishes it (see /work/shared/samples)."""
    return json.dumps({
        "specversion": "1.0", "id": str(uuid.uuid4()), "source": "frontend",
        "type": "com.dapr.event.sent", "datacontenttype": "application/json", "data": data,
        "topic": topic, "pubsubname": "pubsub",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }).encode()


class Topology:
    """Fresh stream names on one Redis for one test, and what daprd would write there."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = unique("e2e")
        self.raw = redis.Redis.from_url(url)

    def stream(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def dapr_publish(self, stream: str, data: Any, metadata: dict[str, str] | None = None,
                     count: int = 1) -> None:
        with self.raw.pipeline(transaction=False) as pipe:
            for _ in range(count):
                fields: dict[str, Any] = {"data": dapr_event(data, stream)}
                if metadata is not None:
                    fields["metadata"] = json.dumps(metadata)
                pipe.xadd(stream, fields)
            pipe.execute()

    def pending(self, stream: str) -> int:
        return int(self.raw.xpending(stream, GROUP)["pending"])

    def unread(self, stream: str) -> int:
        for group in self.raw.xinfo_groups(stream):
            if group["name"] == GROUP.encode():
                return int(group["lag"] or 0) + int(group["pending"])
        return -1

    def letters(self, stream: str) -> list[dict[bytes, bytes]]:
        return [fields for _, fields in self.raw.xrange(stream)]

    def config(self, directory: Path, app_url: str, queues: list[str], dead: str,
               **overrides: Any) -> dict[str, Any]:
        driver = {"type": "redis", "url": self.url, "reclaim_interval_s": 0.5}
        return sidecar_config(directory, app_url, driver, queues,
                              **{"dead_letter": {"queue": dead}, **overrides})

    def close(self) -> None:
        keys = list(self.raw.scan_iter(match=f"*{self.prefix}*"))
        if keys:
            self.raw.delete(*keys)
        self.raw.close()


@pytest.fixture
def topo(redis_url: str) -> Iterator[Topology]:
    topology = Topology(redis_url)
    yield topology
    topology.close()


def test_dapr_entries_reach_the_app_unchanged(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, dead = topo.stream("high"), topo.stream("dead")
    topo.dapr_publish(high, {"job": "render-report"}, {"customer-tier": "gold"})
    published = json.loads(topo.letters(high)[0][b"data"])
    sidecar = start_sidecar(tmp_path, topo.config(tmp_path, app.url, [high], dead))
    try:
        [request] = app.wait_for(1)
        wait_until(lambda: topo.pending(high) == 0)
    finally:
        assert sidecar.stop() == 0
    event = request.event
    assert {k: event[k] for k in published} == published  # same id, data, traceparent...
    assert (event["queue"], event["priority"], event["attempt"]) == (high, 0, 1)
    assert request.headers["traceparent"] == published["traceparent"]
    assert request.headers["metadata.customer-tier"] == "gold"
    assert topo.unread(high) == 0


def test_strict_priority_across_two_streams(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, low, dead = topo.stream("high"), topo.stream("low"), topo.stream("dead")
    app.behaviour = lambda _: Reply(delay_s=0.3)
    for n in range(6):
        topo.dapr_publish(low, n)
    for n in range(4):
        topo.dapr_publish(high, n)
    config = topo.config(tmp_path, app.url, [high, low], dead, lease={"duration_s": 10})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(6)
        topo.dapr_publish(high, "late")
        received = app.wait_for(11, timeout_s=30)
    finally:
        assert sidecar.stop() == 0
    assert_strict_with_a_late_high(received, high, low)


def test_weighted_shares_follow_weights_under_saturation(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    names = [topo.stream(s) for s in ("high", "normal", "low")]
    for name in names:
        topo.dapr_publish(name, {}, count=700)
    config = topo.config(
        tmp_path, app.url, names, topo.stream("dead"), concurrency=4, scheduling="weighted",
        journal=None, log={"level": "warning", "format": "json"},
    )
    config["queues"] = [{"name": n, "weight": w} for n, w in zip(names, (6, 3, 1), strict=True)]
    sidecar = SidecarProcess(tmp_path, config)
    try:
        received = app.wait_for(600, timeout_s=90)
    finally:
        assert sidecar.stop() == 0
    served = Counter(r.event["queue"] for r in received[:600])
    shares = [served[name] / 600 for name in names]
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.05)
    assert all(topo.raw.xinfo_groups(n)[0]["lag"] > 0 for n in names)  # never ran dry


def test_task_three_times_the_lease_is_delivered_once(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, dead = topo.stream("high"), topo.stream("dead")
    app.behaviour = lambda _: Reply(delay_s=3.5)
    topo.dapr_publish(high, "long")
    config = topo.config(tmp_path, app.url, [high], dead, lease={"duration_s": 1})
    replica = start_sidecar(tmp_path, config, name="replica")  # would reclaim a lapsed lease
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 1, timeout_s=15)
        time.sleep(1.5)  # a lapsed lease would show up as a second delivery by now
        metrics = sidecar.metrics() + replica.metrics()
    finally:
        assert sidecar.stop() == 0
        assert replica.stop() == 0
    assert len(app.received) == 1
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["attempt"]) == ("ack", 1)
    extensions = samples(metrics, "priority_pubsub_lease_extensions_total")
    assert sum(extensions.values()) >= 6
    assert topo.pending(high) == 0


def _flaky_doomed_fatal(request: Received) -> Reply:
    data = request.event.get("data")
    if data == "flaky":
        return Reply(200 if request.event["attempt"] >= 3 else 503)
    if data == "fatal":
        return Reply(400)
    if data == "doomed":
        return Reply(503)
    return Reply(200)


def test_backoff_dead_letters_fatal_codes_and_bad_entries(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    """Retry = parked with a growing delay; max attempts and fatal codes -> the dead-letter
    stream with the reason; entries that are not Dapr's layout -> dead letter, never lost."""
    high, dead = topo.stream("high"), topo.stream("dead")
    app.behaviour = _flaky_doomed_fatal
    for data in ("flaky", "doomed", "fatal"):
        topo.dapr_publish(high, data, {"origin": "dapr"})
    topo.raw.xadd(high, {"body": b"legacy producer"})  # no data field
    topo.raw.xadd(high, {"data": b"{}", "metadata": b"\xff not utf-8"})
    topo.raw.xadd(high, {"data": b"\xff\xfe raw bytes"})  # binary data is data: delivered
    config = topo.config(tmp_path, app.url, [high], dead, concurrency=3,
                         retry={"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 8})
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 10, timeout_s=30)
        wait_until(lambda: topo.pending(high) == 0)
        assert sidecar.process.poll() is None  # never a crash
    finally:
        assert sidecar.stop() == 0

    by_data: dict[str, list[Received]] = {"flaky": [], "doomed": []}
    binary = []
    for request in app.received:
        if "data_base64" in request.event:
            binary.append(request)
        elif request.event["data"] in by_data:
            by_data[request.event["data"]].append(request)
    for data, requests in by_data.items():  # attempt = the pending entry's delivery count
        assert [r.event["attempt"] for r in requests] == [1, 2, 3], data
        gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
        for gap, delay in zip(gaps, (1, 2), strict=True):
            assert delay - 0.1 <= gap <= delay + 2.0, (data, gaps)
    [raw] = binary
    assert base64.b64decode(raw.event["data_base64"]) == b"\xff\xfe raw bytes"

    letters = topo.letters(dead)
    reasons = {}
    for letter in letters:
        metadata = json.loads(letter[b"metadata"])
        assert metadata["dead_letter_source"] == high
        data = letter.get(b"data")
        key = json.loads(data)["data"] if data and data.startswith(b'{"spec') else \
            letter.get(b"body", data)
        reasons[key if isinstance(key, str) else bytes(key)] = metadata["dead_letter_reason"]
    assert "max attempts (3) reached" in reasons["doomed"]
    assert "400" in reasons["fatal"]
    assert "no 'data' field" in reasons[b"legacy producer"]
    assert "'metadata' field is not UTF-8" in reasons[b"{}"]
    assert len(letters) == 4
    outcomes = Counter(r["outcome"] for r in journal_records(tmp_path / "journal"))
    assert outcomes == {"ack": 2, "retry": 4, "dead": 4}
    fatal = next(r for r in app.received if r.event.get("data") == "fatal")
    assert fatal.event["attempt"] == 1


def test_sigterm_returns_unfinished_messages_at_once(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, dead = topo.stream("high"), topo.stream("dead")
    app.behaviour = lambda _: Reply(delay_s=30)
    topo.dapr_publish(high, "busy")
    config = topo.config(tmp_path, app.url, [high], dead, lease={"duration_s": 60},
                         shutdown={"grace_s": 1})
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(1)
        sidecar.terminate()
        assert sidecar.wait(timeout_s=20) == 0
    finally:
        sidecar.stop()
    [record] = journal_records(tmp_path / "journal")
    assert record["outcome"] == "retry"
    app.behaviour = lambda _: Reply()
    started = time.monotonic()
    successor = start_sidecar(tmp_path, config, name="successor")
    try:
        requests = app.wait_for(2, timeout_s=15)  # now, not after the 60 s lease
        wait_until(lambda: topo.pending(high) == 0)
    finally:
        assert successor.stop() == 0
    assert time.monotonic() - started < 10
    assert requests[1].event["data"] == "busy"
    assert requests[1].event["attempt"] in (1, 2)  # 1 once shutdown releases uncounted


def test_two_replicas_share_the_group_without_double_delivery(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, dead = topo.stream("high"), topo.stream("dead")
    app.behaviour = lambda _: Reply(delay_s=0.05)
    topo.dapr_publish(high, {}, count=60)
    config = topo.config(tmp_path, app.url, [high], dead, concurrency=2, journal=None)
    replicas = [SidecarProcess(tmp_path, config, name=f"replica{n}") for n in range(2)]
    try:
        wait_until(lambda: topo.unread(high) == 0 and len(app.received) >= 60, timeout_s=40)
    finally:
        codes = [replica.stop() for replica in replicas]
    assert codes == [0, 0]
    delivered = Counter(r.event["id"] for r in app.received)
    assert len(delivered) == 60
    assert set(delivered.values()) == {1}
    assert app.max_in_progress > 2  # both replicas worked at once
    consumers = topo.raw.xinfo_consumers(high, GROUP)
    assert consumers == []  # each replica removed its (empty) consumer name on close


def test_publish_stats_requeue_and_metrics_on_redis(
    tmp_path: Path, app: RecordingApp, topo: Topology
) -> None:
    high, low, dead = topo.stream("high"), topo.stream("low"), topo.stream("dead")
    app.behaviour = lambda r: Reply(400 if r.event["data"] == {"kind": "poison"} else 200)
    config = topo.config(tmp_path, app.url, [high, low], dead)
    path = write_config(tmp_path, config)
    for queue, data in ((high, '{"kind": "ok"}'), (low, '{"kind": "poison"}')):
        done = cli("publish", queue, "--data", data, "--count", "2", "--attr", "k=v",
                   config=path)
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.split()) == 2  # the entry ids
    stats = json.loads(cli("stats", "--json", config=path).stdout)
    assert [(q["visible"], q["in_flight"], q["delayed"]) for q in stats["queues"]] == \
        [(2, 0, 0), (2, 0, 0)]
    sidecar = start_sidecar(tmp_path, config)
    try:
        app.wait_for(4)
        wait_until(lambda: len(topo.letters(dead)) == 2)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 4)
        metrics = sidecar.metrics()
    finally:
        assert sidecar.stop() == 0
    settled = samples(metrics, "priority_pubsub_messages_settled_total")
    outcomes = Counter({(dict(k)["queue"], dict(k)["outcome"]): int(v)
                        for k, v in settled.items() if v})
    assert outcomes == {(high, "ack"): 2, (low, "dead"): 2}
    stats = json.loads(cli("stats", "--json", config=path).stdout)
    assert stats["dead_letter"]["visible"] == 2
    moved = cli("requeue", "--from", dead, "--to", high, "--limit", "1", config=path)
    assert moved.returncode == 0, moved.stderr
    consumed = topo.raw.xinfo_groups(high)[0]["last-delivered-id"].decode()
    [(_, fields)] = topo.raw.xrange(high, min=f"({consumed}")
    metadata = json.loads(fields[b"metadata"])
    assert metadata["requeued_from"] == dead
    assert metadata["k"] == "v"
    assert "dead_letter_reason" not in metadata
    stats = json.loads(cli("stats", "--json", config=path).stdout)
    assert (stats["queues"][0]["visible"], stats["dead_letter"]["visible"]) == (1, 1)


def test_check_masks_the_password_in_the_url(tmp_path: Path, topo: Topology) -> None:
    config = topo.config(tmp_path, "http://127.0.0.1:9", [topo.stream("q")], topo.stream("d"))
    config["driver"]["url"] = "redis://app:pw-SECRET-42@127.0.0.1:1/0"
    shown = cli("check", "--offline", config=write_config(tmp_path, config))
    assert shown.returncode == 0, shown.stderr
    assert "pw-SECRET-42" not in shown.stdout + shown.stderr
    assert json.loads(shown.stdout)["driver"]["url"] == "redis://app:***@127.0.0.1:1/0"


def test_redis_restart_mid_run_flips_readiness_and_loses_nothing(
    tmp_path: Path, app: RecordingApp
) -> None:
    server = OwnRedis(tmp_path / "redis")
    server.start()
    topo = Topology(server.url)
    try:
        high, dead = topo.stream("high"), topo.stream("dead")
        app.behaviour = lambda _: Reply(delay_s=0.2)
        topo.dapr_publish(high, {}, count=30)
        published = {json.loads(f[b"data"])["id"] for f in topo.letters(high)}
        config = topo.config(tmp_path, app.url, [high], dead, concurrency=2,
                             lease={"duration_s": 5}, server={"depth_interval_s": 0.5})
        sidecar = start_sidecar(tmp_path, config)
        ready = f"{sidecar.ops_url}/readyz"
        try:
            app.wait_for(5)
            server.stop(kill=True)  # mid-run, with messages in the app's hands
            wait_until(lambda: httpx.get(ready, timeout=2).status_code == 503, timeout_s=15)
            time.sleep(1)
            server.start()
            wait_until(lambda: httpx.get(ready, timeout=2).status_code == 200, timeout_s=30)
            topo.raw = redis.Redis.from_url(server.url)
            wait_until(lambda: topo.unread(high) == 0, timeout_s=40)
            assert sidecar.process.poll() is None
        finally:
            assert sidecar.stop() == 0
        acked = {r["message_id"] for r in journal_records(tmp_path / "journal")
                 if r["outcome"] == "ack"}
        delivered = {r.event["id"] for r in app.received}
        assert delivered == published  # every message reached the app: none lost
        assert len(acked) == 30  # and every entry was acked in the end
    finally:
        topo.raw.close()
        server.stop()
