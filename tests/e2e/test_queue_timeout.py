"""A queue's own timeout end to end, with an HTTP and a gRPC app.

Concurrency 1, queues high (``timeout_s: 2``) and low, ``app.timeout_s`` 600. Two high
messages wait, then a low one; the app never answers the first high's first attempt. At the
queue's timeout the sidecar cancels the request (the app sees its connection closed or its
call cancelled) and frees the worker at once: the second high starts at most 3 s after the
timeout, before the hung one's retry (6 s later), and the hung one is retried as a counted
attempt with reason ``timeout``. The low one answers after 3 s, past high's timeout but
within the app's: it is acked (the timeout is per queue).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dapr.proto.runtime.v1 import appcallback_pb2

from tests.e2e.helpers import journal_records, publish, queue_rows, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.grpc_app import SUCCESS, UNTIL_CANCELLED, Answer, GrpcApp
from tests.support.sidecar import local_config, start_sidecar, write_config

HIGH_TIMEOUT_S = 2.0
RETRY_DELAY_S = 6.0
SLOW_LOW_S = 3.0
NEXT_WITHIN_S = 3.0
"""The issue's bound: the next high message starts at most this long after the timeout."""


@dataclass(frozen=True)
class Seen:
    """One request the app got: which message (its data's ``n``), which attempt, when."""

    name: str
    attempt: int
    at: float


@dataclass
class App:
    url: str
    seen: Callable[[], list[Seen]]
    cut_off: Callable[[], list[Seen]]
    """The requests whose connection closed (HTTP) or call was cancelled (gRPC), as the app
    saw them end (``at``)."""


def script(request: Seen) -> str:
    """What the app does: hang on the first attempt of "hung", take its time on "slow"."""
    if (request.name, request.attempt) == ("hung", 1):
        return "hang"
    return "slow" if request.name == "slow" else "answer"


@contextlib.contextmanager
def http_app() -> Iterator[App]:
    def seen(received: Received) -> Seen:
        event = received.event
        return Seen(event["data"]["n"], event["attempt"], received.at)

    def behaviour(received: Received) -> Reply:
        what = script(seen(received))
        return Reply(until_closed=what == "hang", delay_s=SLOW_LOW_S if what == "slow" else 0)

    with RecordingApp(behaviour=behaviour) as app:
        yield App(app.url, lambda: [seen(r) for r in list(app.received)],
                  lambda: [Seen(seen(c.request).name, seen(c.request).attempt, c.at)
                           for c in list(app.closed)])


@contextlib.contextmanager
def grpc_app() -> Iterator[App]:
    def seen(request: appcallback_pb2.TopicEventRequest, at: float) -> Seen:
        return Seen(json.loads(request.data)["n"], int(dict(request.extensions)["attempt"]), at)

    def answer(request: appcallback_pb2.TopicEventRequest) -> Answer:
        what = script(seen(request, 0))
        if what == "slow":
            time.sleep(SLOW_LOW_S)
        return UNTIL_CANCELLED if what == "hang" else SUCCESS

    with GrpcApp(answer=answer) as app:
        yield App(app.url, lambda: [seen(c.request, c.at) for c in list(app.calls)],
                  lambda: [seen(c.call.request, c.at) for c in list(app.cancelled)])


APPS = {"http": http_app, "grpc": grpc_app}


@pytest.mark.local
@pytest.mark.parametrize("channel", sorted(APPS))
def test_a_hung_high_task_frees_its_worker_at_the_queue_timeout(
    tmp_path: Path, channel: str
) -> None:
    with APPS[channel]() as app:
        config = local_config(
            tmp_path, app.url, concurrency=1,
            queues=[{"name": "high", "timeout_s": HIGH_TIMEOUT_S}, {"name": "low"}],
            app={"url": app.url, "timeout_s": 600},
            retry={"max_attempts": 3, "initial_delay_s": RETRY_DELAY_S,
                   "max_delay_s": RETRY_DELAY_S})
        config_path = write_config(tmp_path, config, "publish.yaml")
        ids = {name: publish(config_path, queue, json.dumps({"n": name}))[0]
               for name, queue in (("hung", "high"), ("next", "high"), ("slow", "low"))}
        sidecar = start_sidecar(tmp_path, config)
        try:
            wait_until(lambda: len(app.seen()) == 4, 60)
            wait_until(lambda: not any(queue_rows(tmp_path / "queues.db", q)
                                       for q in ("high", "low")), 20)
        finally:
            assert sidecar.stop() == 0
        seen = {(s.name, s.attempt): s for s in app.seen()}
        cut_off = app.cut_off()

    assert sorted(seen) == [("hung", 1), ("hung", 2), ("next", 1), ("slow", 1)]
    hung, retried, after = seen["hung", 1], seen["hung", 2], seen["next", 1]
    timed_out_at = hung.at + HIGH_TIMEOUT_S
    # the app saw the hung request go, at high's timeout (app.timeout_s is 600)
    assert [(c.name, c.attempt) for c in cut_off] == [("hung", 1)]
    assert timed_out_at - 0.5 <= cut_off[0].at <= timed_out_at + NEXT_WITHIN_S, (hung, cut_off)
    # the worker was freed at once: the next high started within the bound, before the retry
    assert timed_out_at - 0.5 <= after.at <= timed_out_at + NEXT_WITHIN_S, (hung, after)
    assert after.at < retried.at
    assert retried.at - cut_off[0].at >= RETRY_DELAY_S - 0.5  # retried with backoff
    by_id = {message_id: [r for r in journal_records(tmp_path / "journal")
                          if r["message_id"] == message_id] for message_id in ids.values()}
    assert [(r["outcome"], r["attempt"], r["reason"]) for r in by_id[ids["hung"]]] == [
        ("retry", 1, f"timeout: app did not answer within {HIGH_TIMEOUT_S:g}s"),
        ("ack", 2, None)]
    assert [(r["outcome"], r["attempt"]) for r in by_id[ids["next"]]] == [("ack", 1)]
    # 3 s, past high's timeout: a low message has the app's timeout
    assert [(r["outcome"], r["attempt"]) for r in by_id[ids["slow"]]] == [("ack", 1)]
