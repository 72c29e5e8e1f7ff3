"""Is the app there? The start gate and the health probe, as daprd does them.

Before the first receive the sidecar waits until the app is reachable (daprd's
``blockUntilAppIsReady``: a TCP connect to the app's port; with ``app.health.path``, an HTTP
GET on the app's host and port that must answer 2xx, as ``--app-health-check-path``; a
``grpc://`` app is asked ``AppCallbackHealthCheck.HealthCheck``, as daprd asks). Later,
a delivery that cannot connect, or ``threshold`` failed probes in a row, mark the app down
until a probe passes again. The log says so once when the state changes and then only every
``LOG_EVERY_S`` while it lasts, with any credentials in the URL masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

import aiohttp
from yarl import URL

from priority_pubsub.app.request import NOT_REACHABLE
from priority_pubsub.core.redaction import SecretUrl
from priority_pubsub.settings.config import AppConfig, HealthConfig
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
Clock = Callable[[], float]
LOG_EVERY_S = 30.0


def probe_url(app_url: str, path: str) -> URL:
    """The health path on the app's own host and port, not under ``app.url``'s path."""
    return URL(app_url).with_user(None).join(URL(path))


class Probe(Protocol):
    async def check(self) -> str | None:
        """None when the app passes; otherwise why not (one short line, no secrets)."""
        ...

    async def close(self) -> None: ...


def build_probe(app: AppConfig) -> Probe:
    """The app's probe: ``HealthCheck`` for a gRPC app, else a TCP connect or the HTTP path."""
    if app.is_grpc:
        return GrpcProbe(app.url.get_secret_value(), app.health_probe.timeout_s,
                         strict=app.health is not None)
    return AppProbe(app.url.get_secret_value(), app.health_probe)


class GrpcProbe:
    """daprd's ``AppCallbackHealthCheck`` for a gRPC app. ``strict`` (``app.health`` set): an
    app without that service is unhealthy, as daprd with app health checks on. Otherwise (the
    start gate alone) its UNIMPLEMENTED answer shows it is up: apps built with dapr-ext-grpc
    only serve ``HealthCheck`` when they register a health callback."""

    def __init__(self, app_url: str, timeout_s: float, *, strict: bool) -> None:
        self._app_url = app_url
        self._timeout_s = timeout_s
        self._strict = strict

    async def check(self) -> str | None:
        from priority_pubsub.app.channel.grpc import app_callback_health

        return await app_callback_health(self._app_url, self._timeout_s,
                                         unimplemented_ok=not self._strict)

    async def close(self) -> None:
        pass


class AppProbe:
    """One check of an HTTP app: a TCP connect, or an HTTP GET of the health path."""

    def __init__(self, app_url: str, config: HealthConfig) -> None:
        parsed = URL(app_url)
        self._host = parsed.host or "127.0.0.1"
        self._port = parsed.port or 80
        self._timeout_s = config.timeout_s
        self._url = probe_url(app_url, config.path) if config.path else None
        self._session: aiohttp.ClientSession | None = None

    async def check(self) -> str | None:
        """None when the app passes; otherwise why not (one short line, no secrets)."""
        try:
            if self._url is None:
                await self._connect()
                return None
            return await self._get(self._url)
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            return f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__

    async def _connect(self) -> None:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port), self._timeout_s
        )
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def _get(self, url: URL) -> str | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s)
            )
        async with self._session.get(url, allow_redirects=False) as response:
            await response.read()
            if 200 <= response.status < 300:
                return None
            return f"health check {url.path} answered {response.status}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class HealthState:
    """Up or down, from probes and deliveries; a pure state machine on an injected clock.

    Starts down (the start gate). ``threshold`` failed probes in a row take an up app down; a
    delivery that could not connect takes it down at once; one passing probe brings it up.
    """

    def __init__(self, threshold: int, clock: Clock = time.monotonic) -> None:
        self._threshold = threshold
        self._clock = clock
        self.up = False
        self.reason = f"{NOT_REACHABLE}: waiting for the app to start"
        self.since = clock()
        self.ever_up = False
        self._failures = 0

    def probe_passed(self) -> bool:
        """True when this brought the app up."""
        self._failures = 0
        if self.up:
            return False
        self.up, self.ever_up, self.since = True, True, self._clock()
        return True

    def probe_failed(self, problem: str) -> bool:
        """True when this took the app down."""
        self._failures += 1
        if not self.up:
            self.reason = f"{NOT_REACHABLE}: {problem}"
            return False
        if self._failures < self._threshold:
            return False
        return self.went_down(f"app unhealthy: {problem}")

    def went_down(self, reason: str) -> bool:
        """A delivery could not reach the app (or the probe threshold was crossed)."""
        if not self.up:
            return False
        self.up, self.reason, self.since = False, reason, self._clock()
        return True

    def down_for_s(self) -> float:
        return 0.0 if self.up else self._clock() - self.since


class OutageLog:
    """Logs a down app once, then every ``every_s`` while it stays down, then its return."""

    def __init__(self, url: SecretUrl, every_s: float = LOG_EVERY_S,
                 clock: Clock = time.monotonic) -> None:
        self._url = str(url)  # credentials masked
        self._every_s = every_s
        self._clock = clock
        self._last: float | None = None

    def down(self, state: HealthState) -> bool:
        """Log now if it is time; True when a line was written."""
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            return False
        first = self._last is None
        self._last = now
        if first and not state.ever_up:
            log.warning("waiting for the app before receiving", app=self._url,
                        reason=state.reason)
        elif first:
            log.warning("app down: deliveries paused", app=self._url, reason=state.reason)
        else:
            log.warning("app still down: deliveries paused" if state.ever_up
                        else "still waiting for the app before receiving", app=self._url,
                        reason=state.reason, down_for_s=round(state.down_for_s(), 1))
        return True

    def up(self, down_for_s: float, first: bool) -> None:
        self._last = None
        log.info("app reachable: receiving" if first else "app back: deliveries resumed",
                 app=self._url, waited_s=round(down_for_s, 1))
