"""Starting and stopping the publish API next to the sidecar (``publish_api:`` present)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.publish_api.service import ComponentSink, PublishService, QueueSink, Sink
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.publish_api import PublishApiConfig
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from priority_pubsub.dapr.plan import DaprPlan

log = get_logger("priority_pubsub.publish_api")


def build_service(settings: Settings, plan: DaprPlan | None) -> PublishService:
    api = settings.publish_api
    assert api is not None
    if plan is None:
        from priority_pubsub.drivers.registry import build_driver

        sink: Sink = QueueSink(build_driver(settings), settings.queue_names)
        return PublishService(settings.app.pubsub_name, api.app_id, sink)
    entities = plan.kind.entities(plan.component, settings.driver.options())
    if entities is None:
        raise ConfigError(f"publish_api: publishing through {plan.component.type} is not "
                          "supported yet (pubsub.aws.snssqs and pubsub.redis are); remove "
                          "publish_api or keep daprd for publishing")
    return PublishService(plan.component.name, api.app_id or plan.app_id,
                          ComponentSink(entities))


@contextlib.asynccontextmanager
async def serving(settings: Settings, plan: DaprPlan | None = None) -> AsyncIterator[None]:
    """Serve the API for the duration of the block (nothing when ``publish_api`` is off)."""
    api = settings.publish_api
    if api is None:
        yield
        return
    service = build_service(settings, plan)
    runner = None
    grpc_server = None
    try:
        await service.start()
        runner = await _start_http(service, api)
        if api.grpc_port is not None:
            from priority_pubsub.settings.grpc_address import require_grpc_extra

            require_grpc_extra("publish_api.grpc_port (grpc_port: null serves HTTP only)")
            from priority_pubsub.publish_api.grpc import start_server

            grpc_server, _ = await start_server(
                service, api.host, api.grpc_port, api.api_token.get_secret_value(),
                api.max_body_bytes)
        log.info("publish API listening", host=api.host, http_port=api.http_port,
                 grpc_port=api.grpc_port, pubsub=service.pubsub_name)
        yield
    finally:
        if grpc_server is not None:
            await grpc_server.stop(grace=5)
        if runner is not None:
            await runner.cleanup()
        await service.close()


async def _start_http(service: PublishService, api: PublishApiConfig) -> web.AppRunner:
    from priority_pubsub.publish_api.http import build_app

    app = build_app(service, api.api_token.get_secret_value(), api.max_body_bytes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, api.host, api.http_port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
