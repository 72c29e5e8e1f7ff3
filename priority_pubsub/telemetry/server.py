"""The sidecar's own small HTTP server: liveness, readiness and Prometheus metrics (and the
monitor's routes, added by the monitor).

It is given the three callables it serves, not the sidecar (FastStream's ping factory style):
whether the event loop stalled, why the sidecar is not ready, and the metrics text; with
``shutdown.mode: finish`` a fourth, ``drain``, served as ``GET /drain``.

``GET /drain`` is the app container's preStop hook: the kubelet sends no secret, so it takes
no token, and it can start only the stop a SIGTERM starts (the receiver takes nothing new, what
is in flight finishes, the process exits 0). ``?wait=true`` answers 200 once nothing is in
flight (the hook blocks, so the app gets its SIGTERM only after its tasks); without it, 202 at
once. Anyone who can reach the ops port can call it, as anyone can read ``/metrics`` there
(docs/operations/fleet.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from priority_pubsub.settings.config import ServerConfig
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)


class OpsServer:
    def __init__(
        self,
        config: ServerConfig,
        *,
        stalled: Callable[[], bool],
        readiness_problem: Callable[[], Awaitable[str | None]],
        render_metrics: Callable[[], bytes],
        more_routes: Callable[[web.Application], None] | None = None,
        drain: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._config = config
        self._stalled = stalled
        self._readiness_problem = readiness_problem
        self._render_metrics = render_metrics
        self._more_routes = more_routes
        """Adds the routes of other parts (the monitor's ``/monitor`` and ``/api/v1/``)."""
        self._drain = drain
        """Starts the stop and returns once nothing is in flight; None: no ``/drain``."""
        self._draining: asyncio.Future[None] | None = None
        """A drain ``/drain`` without ``wait`` started (kept: a task nobody holds may vanish)."""
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._config.metrics:
            app.router.add_get("/metrics", self._metrics)
        if self._drain is not None:
            app.router.add_get("/drain", self._drain_route)
        if self._more_routes is not None:
            self._more_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        config = self._config
        site = web.TCPSite(self._runner, config.host, config.port)
        await site.start()
        addresses = self._runner.addresses
        self.port = int(addresses[0][1]) if addresses else config.port
        log.info("ops server listening", host=config.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        if self._stalled():
            return web.json_response({"status": "event loop stalled"}, status=503)
        return web.json_response({"status": "alive"})

    async def _readyz(self, _: web.Request) -> web.Response:
        problem = await self._readiness_problem()
        if problem:
            return web.json_response({"status": "not ready", "reason": problem}, status=503)
        return web.json_response({"status": "ready"})

    async def _drain_route(self, request: web.Request) -> web.Response:
        assert self._drain is not None
        log.info("drain requested on the ops server", client=request.remote,
                 wait=request.query.get("wait") == "true")
        if request.query.get("wait") != "true":
            if self._draining is None:
                self._draining = asyncio.ensure_future(self._drain())
            return web.json_response({"status": "draining"}, status=202)
        await self._drain()
        return web.json_response({"status": "drained"})

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self._render_metrics(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})
