"""The app gate turns delivery outcomes into pauses and uncounted returns (fake clock and
probe; the HTTP channel's classification against a real closed port and a real 503)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from aiohttp import web

from priority_pubsub.app.channel.http import HttpAppChannel, classify
from priority_pubsub.app.gate import AppGate
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.settings.config import validate_config
from priority_pubsub.telemetry.metrics import Metrics
from tests.support.servers import free_port
from tests.unit.app.test_circuit import FakeClock


class ScriptedProbe:
    def __init__(self) -> None:
        self.answer: str | None = None

    async def check(self) -> str | None:
        return self.answer

    async def close(self) -> None:
        pass


def gate(clock: FakeClock, **config: Any) -> tuple[AppGate, ScriptedProbe, Metrics]:
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": 8,
                                "retry": {"max_delay_s": 5, "max_uncounted_returns": 2},
                                **config})
    probe, metrics = ScriptedProbe(), Metrics()
    return AppGate(settings, metrics, probe=probe, clock=clock), probe, metrics  # type: ignore[arg-type]


def message(message_id: str = "m1") -> Message:
    return Message(message_id, "q", 0, b"{}", {}, 1, now_ms(), Lease(None, now_ms() + 60_000))


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def test_nothing_is_received_before_the_first_probe_passes() -> None:
    subject, probe, metrics = gate(FakeClock())
    assert subject.capacity(0) == 0
    assert subject.blocked() == "app not reachable: waiting for the app to start"
    probe.answer = "ConnectionRefusedError"
    await subject.probe_once()
    assert subject.capacity(0) == 0
    probe.answer = None
    await subject.probe_once()
    assert subject.capacity(3) == 5
    assert metric(metrics, "priority_pubsub_app_up") == 1


@pytest.mark.parametrize("app", [{}, {"health": {"path": "/healthz", "interval_s": 3600}}],
                         ids=["start gate", "app.health"])
async def test_the_first_probe_runs_at_once_not_after_an_interval(
    app: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time to ready: the app is asked the moment the gate runs; the probe interval only
    spaces the probes after it (order of events, no wall clock)."""
    subject, probe, _ = gate(FakeClock(), app=app)
    events: list[str] = []
    probed = asyncio.Event()
    real_sleep = asyncio.sleep

    async def check() -> str | None:
        events.append("probe")
        probed.set()
        return None

    async def sleep(seconds: float, *args: Any) -> Any:
        events.append(f"sleep {seconds:g}")
        return await real_sleep(seconds, *args)

    monkeypatch.setattr(probe, "check", check)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    running = asyncio.create_task(subject.run())
    try:
        await asyncio.wait_for(probed.wait(), 30)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert events[0] == "probe"
    assert subject.health.up


async def test_an_unreachable_delivery_pauses_everything_and_is_returned_uncounted() -> None:
    subject, _, metrics = gate(FakeClock())
    await subject.probe_once()
    settled = subject.observe(message(), Outcome.release("app not reachable: refused"))
    assert settled == Outcome.release("app not reachable: refused", None, 0.0)
    assert subject.capacity(0) == 0
    assert metric(metrics, "priority_pubsub_app_up") == 0
    assert metric(metrics, "priority_pubsub_app_pauses_total", cause="unreachable") == 1
    subject.observe(message("m2"), Outcome.release("app not reachable: refused"))
    assert metric(metrics, "priority_pubsub_app_pauses_total", cause="unreachable") == 1
    await subject.probe_once()  # the probe passes: receiving resumes
    assert subject.capacity(0) == 8


async def test_uncounted_returns_are_capped_per_message_then_count() -> None:
    subject, _, _ = gate(FakeClock())
    await subject.probe_once()
    busy = Outcome.release("app busy: 503 with Retry-After 9s", 503, 9.0)
    first = subject.observe(message(), busy)
    assert first.kind is Kind.RELEASE
    assert first.delay_s == 5  # capped by retry.max_delay_s
    assert subject.observe(message(), busy).kind is Kind.RELEASE
    third = subject.observe(message(), busy)
    assert third.kind is Kind.RETRY
    assert third.reason == "app busy: 503 with Retry-After 9s (uncounted returns used up: counted)"
    assert subject.observe(message("other"), busy).kind is Kind.RELEASE


async def test_busy_pauses_for_retry_after_and_lowers_the_effective_concurrency() -> None:
    clock = FakeClock()
    subject, _, metrics = gate(clock)
    await subject.probe_once()
    subject.observe(message(), Outcome.release("app busy", 429, 2.0))
    assert subject.capacity(0) == 0
    assert subject.blocked() == "app busy: paused for 2.0s more"
    assert subject.reopens_in_s() == 2
    clock.advance(2)
    assert subject.capacity(0) == 4
    assert metric(metrics, "priority_pubsub_effective_concurrency") == 4
    for _ in range(4):
        subject.observe(message(), Outcome.ack(200))
    assert metric(metrics, "priority_pubsub_effective_concurrency") == 5


async def test_breaker_opens_on_consecutive_app_failures_and_half_opens_one() -> None:
    clock = FakeClock()
    subject, _, metrics = gate(clock, app={"circuit_breaker": {"consecutive_failures": 2,
                                                               "open_s": 10}})
    await subject.probe_once()
    subject.observe(message(), Outcome.retry("app answered RETRY", 200))  # the app's choice
    subject.observe(message(), Outcome.retry("app returned 500", 500))
    assert subject.capacity(0) == 8
    retry = subject.observe(message(), Outcome.retry("app did not answer within 3s"))
    assert retry.kind is Kind.RETRY  # the failure that trips it reached the app: it counts
    assert subject.capacity(0) == 0
    assert subject.blocked() == "circuit breaker open for 10.0s more"
    assert metric(metrics, "priority_pubsub_circuit_breaker_state") == 2
    clock.advance(10)
    assert subject.capacity(0) == 1
    assert subject.capacity(1) == 0
    subject.observe(message(), Outcome.ack(200))
    assert subject.capacity(0) == 8
    assert metric(metrics, "priority_pubsub_app_pauses_total", cause="circuit_breaker") == 1


async def test_threshold_failed_probes_take_the_app_down() -> None:
    subject, probe, metrics = gate(FakeClock(), app={"health": {"path": "/healthz",
                                                                "threshold": 2}})
    await subject.probe_once()
    probe.answer = "health check /healthz answered 500"
    await subject.probe_once()
    assert subject.capacity(0) == 8
    await subject.probe_once()
    assert subject.blocked() == "app unhealthy: health check /healthz answered 500"
    assert metric(metrics, "priority_pubsub_app_pauses_total", cause="unhealthy") == 1


@pytest.mark.parametrize(("status", "retry_after", "kind"), [
    (503, "2", Kind.RELEASE), (429, "1", Kind.RELEASE), (503, None, Kind.RETRY),
    (500, "2", Kind.RETRY), (429, "later", Kind.RETRY),
])
def test_only_429_or_503_with_retry_after_is_a_not_now(
    status: int, retry_after: str | None, kind: Kind
) -> None:
    assert classify(status, b"", (400,), retry_after=retry_after).kind is kind


async def test_a_closed_port_is_a_connect_phase_failure_but_a_reset_is_an_attempt() -> None:
    settings = validate_config({"queues": [{"name": "q"}], "app": {"timeout_s": 2}})
    channel = HttpAppChannel(settings.app)
    await channel.start()
    request = AppRequest(b"{}", {}, None)

    async def reset(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.abort()  # the request arrived; the answer never comes
        return web.Response()

    app = web.Application()
    app.router.add_post("/", reset)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        refused = await channel.post(f"http://127.0.0.1:{free_port()}/", request)
        assert refused.kind is Kind.RELEASE
        assert refused.http_status is None
        assert refused.reason is not None
        assert refused.reason.startswith("app not reachable: ClientConnectorError")
        port = runner.addresses[0][1]
        after_send = await channel.post(f"http://127.0.0.1:{port}/", request)
        assert after_send.kind is Kind.RETRY
    finally:
        await channel.close()
        await runner.cleanup()


async def test_a_pause_that_ended_before_the_wait_began_does_not_strand_the_receiver() -> None:
    clock = FakeClock()
    subject, _, _ = gate(clock)
    await subject.probe_once()
    subject.observe(message(), Outcome.release("app busy", 503, 2.0))
    assert subject.blocked() is not None  # the receiver sees the pause ...
    clock.advance(2)  # ... and it ends before the receiver's wait starts
    await asyncio.wait_for(subject.wait_for_change(True), 1)  # returns at once
    assert subject.capacity(0) == 4


class TickingClock(FakeClock):
    """Moves on by ``tick`` at every read once started: time passes between two reads."""

    def __init__(self) -> None:
        super().__init__()
        self.tick = 0.0

    def __call__(self) -> float:
        now = self.now
        self.now += self.tick
        return now


async def test_a_pause_ending_between_the_gates_own_reads_does_not_strand_the_receiver() -> None:
    clock = TickingClock()
    subject, _, _ = gate(clock)
    await subject.probe_once()
    subject.observe(message(), Outcome.release("app busy", 503, 2.0))
    # the timer that wakes the receiver fires at the pause's deadline: the first read still
    # sees the pause, the next one sees it over
    clock.advance(2 - 0.0005)
    clock.tick = 0.001
    await asyncio.wait_for(subject.wait_for_change(True), 1)
    clock.tick = 0.0
    assert subject.blocked() is None


class RecordingReceiver:
    def __init__(self) -> None:
        self.paused = False

    def pause(self, reason: str) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


async def test_a_pause_ending_just_after_the_receivers_were_told_still_resumes_them() -> None:
    clock = TickingClock()
    subject, _, _ = gate(clock)
    await subject.probe_once()
    receiver = RecordingReceiver()
    subject.attach(receiver)
    subject.observe(message(), Outcome.release("app busy", 503, 2.0))
    assert receiver.paused
    clock.advance(2 - 0.05)  # the gate's timer is set for the last 50 ms of the pause ...
    timer = asyncio.create_task(subject.run())
    try:
        await asyncio.sleep(0.01)
        # ... and fires at the deadline: the receivers are told "paused" on one read of the
        # clock, the pause is over on the next one
        clock.advance(0.05 - 0.0005)
        clock.tick = 0.001
        await asyncio.sleep(0.3)
        assert not receiver.paused
    finally:
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer


def test_daprd_app_health_flags_become_app_health_in_daprd_units() -> None:
    from priority_pubsub.dapr.flags import DaprdFlags

    raw: dict[str, Any] = {"app": {"url": "http://127.0.0.1:3000"}}
    flags = DaprdFlags(health={"--enable-app-health-check": True,
                               "--app-health-probe-interval": 2,
                               "--app-health-probe-timeout": 250, "--app-health-threshold": 4})
    assert flags.apply(raw) == []
    settings = validate_config({"queues": [{"name": "q"}], **raw})
    assert settings.app.health is not None
    assert settings.app.health.path == "/healthz"  # daprd's default path
    assert settings.app.health.interval_s == 2
    assert settings.app.health.timeout_s == 0.25  # daprd's timeout is in milliseconds
    assert settings.app.health.threshold == 4
    ignored = DaprdFlags(health={"--app-health-check-path": "/ready"})
    assert ignored.apply({}) == [
        "--app-health-check-path has no effect without --enable-app-health-check (as in daprd)"]
