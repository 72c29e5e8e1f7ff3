"""The app gate: whether deliveries may start now and how many, from the app's own signals.

It composes the health state (start gate, pause while down), the circuit breaker and the
backpressure limiter, feeds them from delivery outcomes, runs the probe, and answers three
questions: may a delivery start now (``blocked``), how many may run (``capacity``), and what
a finished delivery means for the message (``observe``). It acts on the answers through the
receiver's own ``pause()``/``resume()`` (``attach``): paused the moment the gate closes,
resumed when it opens (a probe passed, a timed block ended). Messages the app never took (not
reachable, paused, busy) become releases: returned at once or after the app's Retry-After,
not counted as attempts, up to ``retry.max_uncounted_returns`` per message.

What it reads of the settings follows a live reload (``settings.live``): the limiter's
ceiling is ``concurrency`` (grown at once when it was not backed off, shrunk at once), the
uncounted returns' cap and the longest "not now" delay are the retry policy in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from priority_pubsub.app.backpressure import AimdLimiter
from priority_pubsub.app.circuit import BreakerState, CircuitBreaker
from priority_pubsub.app.health import HealthState, OutageLog, Probe, build_probe
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics

Clock = Callable[[], float]
REMEMBERED_MESSAGES = 100_000


class Pausable(Protocol):
    """What the gate drives: ``receiver.Receiver``."""

    def pause(self, reason: str) -> None: ...

    def resume(self) -> None: ...


class UncountedReturns:
    """How often each message was handed back uncounted, in this process (bounded LRU).

    The broker keeps the attempt count; this only caps the uncounted returns so that no
    message cycles forever. A restart forgets it, which at worst allows another round.
    """

    def __init__(self, cap: int, remembered: int = REMEMBERED_MESSAGES) -> None:
        self.cap = cap
        """Uncounted returns one message may have (the retry policy in force)."""
        self._remembered = remembered
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def allow(self, message: Message) -> bool:
        """Count one more uncounted return; False once the cap is used up."""
        key = (message.queue, message.id)
        count = self._counts.pop(key, 0) + 1
        self._counts[key] = count
        if len(self._counts) > self._remembered:
            self._counts.popitem(last=False)
        return count <= self.cap


class _NoApp:
    """The probe of a sidecar with no app to push to (its apps stream): always passes."""

    async def check(self) -> str | None:
        return None

    async def close(self) -> None:
        """Nothing to close."""


NO_APP = _NoApp()


class AppGate:
    def __init__(
        self,
        settings: Settings | LiveSettings,
        metrics: Metrics,
        *,
        probe: Probe | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._live = live = LiveSettings.of(settings)
        settings = live.settings
        app = settings.app
        self._health_config = app.health_probe
        self._periodic = app.health is not None
        self._probe = probe or build_probe(app)
        self._learns = app.push
        """Without an app to push to there is nothing to learn from outcomes (a stream that
        closes is not the app going down)."""
        self._metrics = metrics
        self.health = HealthState(self._health_config.threshold, clock)
        self.breaker = (
            CircuitBreaker(app.circuit_breaker.consecutive_failures,
                           app.circuit_breaker.open_s, clock)
            if app.circuit_breaker else None
        )
        self.limiter = AimdLimiter(settings.concurrency, clock)
        self.uncounted = UncountedReturns(settings.retry.max_uncounted_returns)
        self._outage = OutageLog(app.url, clock=clock)
        self._changed = asyncio.Event()
        self._went_down = asyncio.Event()
        self._receivers: list[Pausable] = []
        live.on_change(self._settings_changed)
        metrics.app_up.set_function(lambda: float(self.health.up))
        metrics.effective_concurrency.set_function(lambda: float(self.limiter.limit))
        metrics.circuit_breaker_state.set_function(
            lambda: float(self.breaker.state if self.breaker else BreakerState.CLOSED)
        )

    def _settings_changed(self) -> None:
        """A reload: the ceiling and the cap in force (the receivers look again by
        themselves)."""
        settings = self._live.settings
        self.limiter.resize(settings.concurrency)
        self.uncounted.cap = settings.retry.max_uncounted_returns

    def attach(self, receiver: Pausable) -> None:
        """Pause and resume ``receiver`` as the gate closes and opens (paused now if closed:
        nothing is received before the app is reachable)."""
        self._receivers.append(receiver)
        self._apply()

    def _apply(self) -> bool:
        """Pause or resume the receivers as the gate stands now; whether it is closed."""
        reason = self.blocked()
        for receiver in self._receivers:
            if reason is not None:
                receiver.pause(reason)
            else:
                receiver.resume()
        return reason is not None

    # -- the questions -------------------------------------------------------------------

    def blocked(self) -> str | None:
        """Why no delivery may start now, or None."""
        if not self.health.up:
            return self.health.reason
        if self.breaker is not None and self.breaker.permits() == 0:
            return f"circuit breaker open for {self.breaker.closes_in_s():.1f}s more"
        if (paused_s := self.limiter.paused_for_s()) > 0:
            return f"app busy: paused for {paused_s:.1f}s more"
        return None

    def capacity(self, in_flight: int) -> int:
        """How many more deliveries may start now."""
        if self.blocked() is not None:
            return 0
        limit = self.limiter.limit
        if self.breaker is not None and (permits := self.breaker.permits()) is not None:
            limit = min(limit, permits)
        return max(0, limit - in_flight)

    def reopens_in_s(self) -> float | None:
        """When a timed block ends by itself (pause over, breaker half-open), else None."""
        waits = [self.limiter.paused_for_s()]
        if self.breaker is not None:
            waits.append(self.breaker.closes_in_s())
        due = max(waits)
        return due if due > 0 else None

    async def wait_for_change(self, was_blocked: bool) -> None:
        """Until the gate opens or closes (or a timed block may have ended).

        ``was_blocked`` is what the caller last saw: if that changed before this coroutine
        began to run (a pause may end in between), it returns at once instead of waiting for
        a notification that already happened."""
        changed = self._changed
        # when a timed block ends is read before whether it holds: the clock only moves on,
        # so a block seen after this read was already running when it was taken. Read the
        # other way round, a pause ending between the two reads left a block with no end
        # time, and the receivers stayed paused for good (a timer fires at its deadline).
        reopens_in_s = self.reopens_in_s()
        if (self.blocked() is not None) != was_blocked:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), reopens_in_s)

    # -- feeding it ----------------------------------------------------------------------

    def observe(self, message: Message, outcome: Outcome) -> Outcome:
        """Learn from one finished delivery; the outcome to settle (a release may become a
        counted retry once the message used up its uncounted returns)."""
        if outcome.kind is Kind.RELEASE:
            if self._learns:
                self._observe_release(outcome)
            return self.settle_release(message, outcome)
        if not self._learns:
            return outcome
        if outcome.kind is Kind.RETRY and _app_failed(outcome):
            if self.breaker is not None and self.breaker.record_failure():
                self._paused("circuit_breaker")
        else:
            if self.breaker is not None:
                self.breaker.record_success()
            self.limiter.on_success()
        return outcome

    def settle_release(self, message: Message, outcome: Outcome) -> Outcome:
        """A release within the message's cap, else a counted retry with the reason."""
        if self.uncounted.allow(message):
            delay = min(outcome.delay_s or 0.0, self._live.settings.retry.max_delay_s)
            return Outcome.release(outcome.reason or "released", outcome.http_status, delay)
        return Outcome.retry(f"{outcome.reason} (uncounted returns used up: counted)",
                             outcome.http_status)

    def _observe_release(self, outcome: Outcome) -> None:
        if outcome.http_status is None:  # the request never reached the app
            if self.health.went_down(outcome.reason or "app not reachable"):
                self._paused("unreachable")
                self._went_down.set()
            return
        was_paused = self.limiter.paused_for_s() > 0
        self.limiter.on_busy(min(outcome.delay_s or 0.0,
                                 self._live.settings.retry.max_delay_s))
        if not was_paused:
            self._paused("busy")

    def _paused(self, cause: str) -> None:
        self._metrics.app_pauses.labels(cause).inc()
        self._notify()

    def _notify(self) -> None:
        self._apply()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- probing -------------------------------------------------------------------------

    async def run(self) -> None:
        """Probe the app (always while it is down; while it is up only with ``app.health``)
        and open the gate when a timed block (busy pause, open breaker) ends."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._probe_loop(), name="app-probe")
            group.create_task(self._reopen_loop(), name="app-gate-timer")

    async def _reopen_loop(self) -> None:
        # what the receivers were told is what the wait starts from: asking the gate again
        # could find a pause over that the receivers still obey, and wait for nothing
        while True:
            closed = self._apply()
            await self.wait_for_change(closed)

    async def _probe_loop(self) -> None:
        try:
            while True:
                if self.health.up and not self._periodic:
                    self._went_down.clear()
                    await self._went_down.wait()
                    await asyncio.sleep(self._health_config.interval_s)
                    continue
                await self.probe_once()
                await asyncio.sleep(self._health_config.interval_s)
        finally:
            await self._probe.close()

    async def probe_once(self) -> None:
        problem = await self._probe.check()
        if problem is None:
            first = not self.health.ever_up
            down_for_s = self.health.down_for_s()
            if self.health.probe_passed():
                self._outage.up(down_for_s, first)
                self._notify()
            return
        if self.health.probe_failed(problem):
            self._paused("unhealthy")
        if not self.health.up:
            self._outage.down(self.health)


def _app_failed(outcome: Outcome) -> bool:
    """A retriable failure of the app itself (5xx, timeout, reset): what trips the breaker.
    A 2xx "RETRY" answer is the app's decision, not a failure."""
    return outcome.http_status is None or outcome.http_status >= 500
