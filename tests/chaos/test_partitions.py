"""Network partitions: the sidecar (and its app) in one network namespace, the broker in
another, the link between them black-holed for 45 s mid-run (every packet dropped on both
ends: no RST, no error — calls just hang), then healed. Calls must time out instead of
hanging, readiness must turn within the receive timeout + 5 s, a settle that fails across the
cut is journaled (``settle_failed``), delivery must resume within 10 s of healing, and nothing
may be lost. A failed settle's message is then delivered again, or still waits in its queue,
or — when the call reached the broker and only its answer was lost in the cut — is gone as
the app asked (an ack after its 200); anything else fails the test. The timeline and these
counts are printed per broker.

Root and ``ip netns`` are needed (CI has both); elsewhere the tests skip saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.ledger import Accounting, account, drain_bodies, journal_by_message
from tests.support.app import RecordingApp, Reply
from tests.support.netns import Namespace, Partition, partition
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, write_config
from tests.support.topologies.base import Topology, topology_config

pytestmark = pytest.mark.chaos

CUT_S = 45.0
MESSAGES = 200
PUBLISH_GAP_S = 0.25
"""Publishing spans the whole run (~50 s): before, during and after the cut."""
RECEIVE_WAIT_S = 20.0
"""The dispatcher's idle wait (``dispatcher.IDLE_WAIT_S``): the receive timeout."""


@dataclass
class Broker:
    """A broker process in the broker namespace, and a topology reaching it from there."""

    topology: Topology
    process: subprocess.Popen[bytes]
    driver: dict[str, Any]
    """Driver options beyond the topology's (short call timeouts)."""


def _wait_listening(namespace: Namespace, port: int, timeout_s: float = 30) -> None:
    def probe() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(
                (namespace.address, port), timeout=0.5):
            return True
        return False

    deadline = time.monotonic() + timeout_s
    while not namespace.call(probe):
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on {namespace.address}:{port}")
        time.sleep(0.2)


@contextlib.contextmanager
def serving(cut: Partition, argv: list[str], port: int,
            **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` run in the broker namespace until it listens on ``port``; killed after."""
    process = subprocess.Popen(cut.broker.command(*argv), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, **popen)
    try:
        _wait_listening(cut.broker, port, timeout_s=120)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            if popen.get("start_new_session"):
                os.killpg(process.pid, signal.SIGKILL)  # its whole group (Erlang's children)
            else:
                process.kill()
        process.wait(10)


@contextlib.contextmanager
def redis_in(cut: Partition, directory: Path) -> Iterator[Broker]:
    from tests.support.topologies.redis import RedisTopology

    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", cut.broker.address,
            "--protected-mode", "no", "--save", "", "--appendonly", "yes",
            "--dir", str(directory)]
    with serving(cut, argv, port) as process:
        url = f"redis://{cut.broker.address}:{port}/0"
        topology = cut.broker.call(lambda: RedisTopology(url))
        yield Broker(topology, process, {"call_timeout_s": 5, "connect_timeout_s": 3,
                                         "reclaim_interval_s": 1})


@contextlib.contextmanager
def sqs_in(cut: Partition, directory: Path) -> Iterator[Broker]:
    import sys

    from tests.support.moto_server import CREDENTIALS, MotoServer
    from tests.support.topologies.sqs import SqsTopology

    port = free_port()
    argv = [sys.executable, "-m", "tests.support.moto_atomic_receive", "-H",
            cut.broker.address, "-p", str(port)]
    with serving(cut, argv, port) as process, pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        endpoint = f"http://{cut.broker.address}:{port}"
        topology = cut.broker.call(lambda: SqsTopology(MotoServer(endpoint)))
        yield Broker(topology, process, {"connect_timeout_s": 3, "wait_time_s": 2})


@contextlib.contextmanager
def rabbitmq_in(cut: Partition, directory: Path) -> Iterator[Broker]:
    """A private rabbitmq-server in the broker namespace, listening on its address."""
    from tests.support.rabbitmq_server import PrivateRabbit, server_binary
    from tests.support.servers import skip_or_fail
    from tests.support.topologies.rabbitmq import RabbitTopology

    binary = server_binary()
    if binary is None:
        skip_or_fail("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    assert binary is not None
    server = PrivateRabbit(directory, consumer_timeout_ms=1_800_000, port=free_port(),
                           dist_port=free_port())
    environment = server._environment()
    config = (directory / "rabbitmq.conf").read_text().replace(
        f"127.0.0.1:{server.port}", f"{cut.broker.address}:{server.port}")
    (directory / "rabbitmq.conf").write_text(config)
    environment["RABBITMQ_NODE_IP_ADDRESS"] = cut.broker.address
    with serving(cut, [binary], server.port, env=environment,
                 start_new_session=True) as process:  # the Erlang VM and its children
        url = f"amqp://guest:guest@{cut.broker.address}:{server.port}/"
        topology = cut.broker.call(lambda: RabbitTopology(url))
        yield Broker(topology, process, {"connect_timeout_s": 3, "call_timeout_s": 5})


BROKERS = [
    pytest.param(redis_in, marks=pytest.mark.redis, id="redis"),
    pytest.param(sqs_in, marks=pytest.mark.sqs, id="sqs"),
    pytest.param(rabbitmq_in, marks=pytest.mark.rabbitmq, id="rabbitmq"),
]


@pytest.fixture
def cut() -> Iterator[Partition]:
    with partition() as made:
        yield made


def _status(namespace: Namespace, url: str) -> int:
    def get() -> int:
        try:
            return httpx.get(url, timeout=3).status_code
        except httpx.HTTPError:
            return 0
    return namespace.call(get)


def _publish_throughout(broker_ns: Namespace, topology: Topology, queues: list[str],
                        published: list[str]) -> None:
    for n in range(MESSAGES):
        broker_ns.call(lambda n=n: topology.publish(queues[n % 2], json.dumps(n).encode()))
        published.append(str(n))
        time.sleep(PUBLISH_GAP_S)


def _first_after(app: RecordingApp, moment: float) -> float | None:
    return min((r.at for r in app.received if r.at > moment), default=None)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("start_broker", BROKERS)
def test_link_black_holed_45_s_then_healed(
    tmp_path: Path, cut: Partition, report: list[Accounting],
    start_broker: Callable[[Partition, Path], contextlib.AbstractContextManager[Broker]],
) -> None:
    with start_broker(cut, tmp_path) as broker:
        topology = broker.topology
        app: RecordingApp = cut.side.call(RecordingApp().__enter__)
        try:
            app.behaviour = lambda _: Reply(delay_s=0.3)
            queues = cut.broker.call(lambda: [topology.queue("high", lease_s=10),
                                              topology.queue("low", lease_s=10)])
            config = cut.broker.call(lambda: topology_config(  # may create queues (SQS)
                topology, tmp_path, app.url, queues, concurrency=4, lease={"duration_s": 10},
                shutdown={"grace_s": 5},
                retry={"max_attempts": 10, "initial_delay_s": 0.2, "max_delay_s": 1}))
            config["driver"].update(broker.driver)
            timeline, published = _run_with_a_cut(cut, topology, queues, config, app,
                                                  tmp_path)
            waiting = cut.broker.call(lambda: {str(json.loads(b)) for b in drain_bodies(
                write_config(tmp_path, config), queues)})
            dead = cut.broker.call(lambda: {str(json.loads(d.body))
                                            for d in topology.dead_letters()})
            events = app.events()
        finally:
            cut.side.call(lambda: app.__exit__(None, None, None))
            with contextlib.suppress(Exception):
                cut.broker.call(topology.close)  # type: ignore[attr-defined]

    seen = Counter(str(event["data"]) for event in events)
    fates = _failed_settles(journal_by_message(tmp_path / "journal"), events, waiting)
    line = "  ".join(f"{name} {value}" for name, value in timeline.items())
    counts = ", ".join(f"{fate} {len(ids)}" for fate, ids in fates.items() if ids) or "none"
    result = account(f"partition {CUT_S:g} s, {topology.driver_type}", published, seen,
                     waiting, dead, note=f"{line}; settles failed: {counts}")
    report.append(result)
    print(f"partition timeline ({topology.driver_type}): {line}")
    assert result.lost == 0
    assert result.dead == 0
    assert not fates["unexplained"], fates["unexplained"]
    assert timeline["readiness 503 after cut s"] <= RECEIVE_WAIT_S + 5
    assert timeline["delivering after heal s"] <= 10
    assert timeline["ready after heal s"] <= 10 + RECEIVE_WAIT_S


def _failed_settles(records: dict[str, list[dict[str, object]]], events: list[dict[str, Any]],
                    waiting: set[str]) -> dict[str, dict[str, list[str]]]:
    """What became of each message whose settle failed across the cut, by fate.

    ``came again``: a later attempt was acked. ``waiting``: its lease ran out and it still
    waits in its queue. ``never at the app``: a release of a message the app never saw (the
    ledger finds its body delivered or waiting, or counts it lost). ``answer lost``: the
    failed settle was an ack of a message the app saw, and the broker holds it no more: the
    call reached the broker and only its answer was lost in the cut, so the broker did what
    was asked and the journal says what the sidecar could know (a CI run saw two such acks
    on SQS). ``unexplained``: anything else, such as a retry whose message is gone; each
    fate maps ids to their journal records, for the failure message.
    """
    data_of = {str(event["id"]): str(event["data"]) for event in events}
    fates: dict[str, dict[str, list[str]]] = {
        "came again": {}, "waiting": {}, "answer lost": {}, "never at the app": {},
        "unexplained": {}}
    for message_id, found in records.items():
        outcomes = [str(record["outcome"]) for record in found]
        if "settle_failed" not in outcomes:
            continue
        failed = outcomes.index("settle_failed")
        if "ack" in outcomes[failed + 1:]:
            fate = "came again"
        elif message_id not in data_of:
            fate = "never at the app"  # a release: the ledger finds its body (lost == 0)
        elif data_of[message_id] in waiting:
            fate = "waiting"
        elif str(found[failed]["reason"]).startswith("ack"):
            fate = "answer lost"
        else:
            fate = "unexplained"
        fates[fate][message_id] = [json.dumps(record) for record in found]
    return fates


def _run_with_a_cut(cut: Partition, topology: Topology, queues: list[str],
                    config: dict[str, Any], app: RecordingApp, directory: Path
                    ) -> tuple[dict[str, float], list[str]]:
    published: list[str] = []
    publisher = threading.Thread(target=_publish_throughout,
                                 args=(cut.broker, topology, queues, published))
    sidecar = SidecarProcess(directory, config, prefix=tuple(cut.side.command()))
    readyz = f"{sidecar.ops_url}/readyz"
    timeline: dict[str, float] = {}
    try:
        _until(lambda: _status(cut.side, readyz) == 200, 60, sidecar)
        publisher.start()
        _until(lambda: len(app.received) >= 30, 60, sidecar)
        cut.black_hole()
        cut_at = time.monotonic()
        _until(lambda: _status(cut.side, readyz) != 200, 60, sidecar)
        timeline["readiness 503 after cut s"] = round(time.monotonic() - cut_at, 1)
        time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_at)))
        assert sidecar.process.poll() is None, sidecar.logs()[-3000:]
        cut.heal()
        healed_at = time.monotonic()
        healed_wall = time.time()
        _until(lambda: _first_after(app, healed_wall) is not None, 60, sidecar)
        first = _first_after(app, healed_wall)
        assert first is not None
        timeline["delivering after heal s"] = round(first - healed_wall, 1)
        _until(lambda: _status(cut.side, readyz) == 200, 90, sidecar)
        timeline["ready after heal s"] = round(time.monotonic() - healed_at, 1)
        publisher.join()
        with contextlib.suppress(AssertionError):  # what is missing is accounted after
            _until(lambda: len({str(e["data"]) for e in app.events()}) >= MESSAGES, 90,
                   sidecar)
    finally:
        cut.heal()
        publisher.join()
        assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    return timeline, published


def _until(condition: Callable[[], bool], timeout_s: float, sidecar: SidecarProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s:\n{sidecar.logs()[-3000:]}")
        time.sleep(0.2)
