"""The broker goes away and comes back (SQS on moto server, killed with SIGKILL).

The sidecar must report not-ready within seconds, never exit, and deliver again once the
broker is back. moto keeps its queues in memory, so the restart starts empty: the queues are
created again (same names, same URLs) and the accounting covers what was published before
the kill (all settled by then) and after the restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.chaos.ledger import Accounting, account
from tests.chaos.outage import broker_outage
from tests.e2e.helpers import wait_until
from tests.support.app import RecordingApp
from tests.support.moto_server import MotoServer, running_moto_server
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, sidecar_config

pytestmark = [pytest.mark.chaos, pytest.mark.sqs]

QUEUES = ["chaos-high", "chaos-low"]
BATCH = 30
DOWN_S = 8.0


class RestartableMoto:
    """A moto server on a port fixed for its whole life, so clients keep their URLs; one
    client for the test's sends and reads (a boto3 client per call cost seconds of CPU each
    on a loaded machine, inside the test's deadlines), which reconnects after a restart."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._stack = contextlib.ExitStack()
        self._server: MotoServer | None = None
        self._sqs: Any = None
        self._urls: dict[str, str] = {}

    def start(self) -> None:
        self._server = self._stack.enter_context(running_moto_server(port=self.port))
        if self._sqs is None:
            self._sqs = boto3.session.Session().client("sqs", endpoint_url=self.endpoint_url)
        for name in [*QUEUES, "chaos-dead"]:
            self._urls[name] = self._sqs.create_queue(QueueName=name)["QueueUrl"]

    def kill_9(self) -> None:
        assert self._server is not None
        os.kill(self._server.pid, signal.SIGKILL)
        self._stack.close()  # reaps it
        self._stack = contextlib.ExitStack()

    def close(self) -> None:
        self._stack.close()
        if self._sqs is not None:
            self._sqs.close()

    def send(self, queue: str, body: str) -> str:
        return str(self._sqs.send_message(QueueUrl=self._urls[queue], MessageBody=body)[
            "MessageId"])

    def depth(self, queue: str) -> int:
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._urls[queue],
                                                    AttributeNames=["All"])
        values = attributes["Attributes"]
        return int(values["ApproximateNumberOfMessages"]) + int(
            values["ApproximateNumberOfMessagesNotVisible"])


@pytest.fixture
def moto(moto_server: MotoServer) -> Iterator[RestartableMoto]:
    """Its own server (the session's ``moto_server`` supplies the fake credentials)."""
    server = RestartableMoto()
    server.start()
    yield server
    server.close()


READY_S = 30.0
SETTLED_S = 30.0
TURN_S = 10.0
REDELIVERED_S = 60.0
MOTO_START_S = 30.0  # running_moto_server's own wait


# The test's own waits bound it, each failing with what it waited for: their sum, not the
# suite's 120 s, which cut it mid-phase on a loaded machine (moto's restart and its sends
# there take tens of seconds).
@pytest.mark.timeout(READY_S + 2 * SETTLED_S + TURN_S + DOWN_S + MOTO_START_S + REDELIVERED_S
                     + 2 * SETTLED_S)
def test_sqs_broker_killed_and_restarted(
    tmp_path: Path, app: RecordingApp, moto: RestartableMoto, report: list[Accounting]
) -> None:
    driver = {"type": "sqs", "region": "us-east-1", "endpoint_url": moto.endpoint_url,
              "wait_time_s": 2, "connect_timeout_s": 1}
    config = sidecar_config(tmp_path, app.url, driver, QUEUES, concurrency=4,
                            dead_letter={"queue": "chaos-dead"})
    sidecar = SidecarProcess(tmp_path, config)
    published: list[str] = []
    try:
        sidecar.wait_ready(timeout_s=READY_S)
        published += [moto.send(QUEUES[n % 2], f'{{"n": {n}}}') for n in range(BATCH)]
        wait_until(lambda: len(app.received) >= BATCH, timeout_s=SETTLED_S)
        wait_until(lambda: sum(moto.depth(q) for q in QUEUES) == 0, timeout_s=SETTLED_S)

        not_ready_after_s, restarted = broker_outage(sidecar, moto.kill_9, moto.start, DOWN_S,
                                                     turn_timeout_s=TURN_S)
        published += [moto.send(QUEUES[n % 2], f'{{"n": {n}}}') for n in range(BATCH, 2 * BATCH)]
        wait_until(lambda: len(app.received) >= 2 * BATCH, timeout_s=REDELIVERED_S)
        resumed_after_s = time.monotonic() - restarted
        wait_until(lambda: sum(moto.depth(q) for q in QUEUES) == 0, timeout_s=SETTLED_S)
        wait_until(lambda: sidecar.ready_status() == 200, timeout_s=SETTLED_S)
    finally:
        assert sidecar.stop() == 0

    seen = Counter(r.event["id"] for r in app.received)
    assert moto.depth("chaos-dead") == 0  # (what reached it before the kill died with moto)
    result = account("SQS (moto) killed 8 s, restarted", published, seen, set(), set(),
                     note=f"not ready after {not_ready_after_s:.1f} s, "
                          f"delivering {resumed_after_s:.1f} s after restart")
    report.append(result)
    assert result.lost == 0
    assert result.delivered == result.acked == 2 * BATCH
    assert result.dead == 0
    assert not_ready_after_s < 5
