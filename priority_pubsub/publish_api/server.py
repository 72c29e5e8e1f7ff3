"""Starting and stopping the publish API next to the sidecar (``publish_api:`` present)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from priority_pubsub.app.channel.streams import StreamHub
from priority_pubsub.core import baggage
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.publish_api.metadata import SidecarMetadata, describe
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
    entities = plan.entities(settings.driver.options())
    if entities is None:
        raise ConfigError(f"publish_api: publishing through {plan.component.type} is not "
                          "supported yet (pubsub.aws.snssqs and pubsub.redis are); remove "
                          "publish_api or keep daprd for publishing")
    return PublishService(plan.component.name, api.app_id or plan.app_id,
                          ComponentSink(entities))


def stream_hub(settings: Settings, plan: DaprPlan | None) -> StreamHub | None:
    """A sidecar with no app to push to serves its topics to streaming subscriptions (the
    publish API's gRPC port): native mode each queue as its own topic, Dapr mode the planned
    topics, and any other topic a stream names (its queue made then, the lowest). None when
    there is an app to push to, no gRPC port, or no topic known and no way to add one."""
    if settings.app.push or settings.publish_api is None or settings.publish_api.grpc_port is None:
        return None
    if plan is None:
        queues = {name: name for name in settings.queue_names}
        pubsub = settings.app.pubsub_name
    else:
        queues = {topic: queue.name for queue in plan.queues for topic in queue.topics}
        pubsub = plan.component.name
    if not queues and not _takes_queues_later(settings):
        return None  # nothing to stream: publisher-only, no driver connection
    return StreamHub(pubsub, queues)  # a topic unknown at start gets its queue then


def _takes_queues_later(settings: Settings) -> bool:
    """Whether the driver can take a queue not configured at start (``QueueAdder``)."""
    from priority_pubsub.drivers.registry import adds_queues

    return adds_queues(settings.driver.type)


async def until_stopped(block_s: float = 0) -> None:
    """A publisher-only sidecar (no app to push to) serves its API until SIGTERM/SIGINT,
    then ``block_s`` more (daprd's ``--dapr-block-shutdown-duration``: no app to report
    itself unhealthy, so the whole duration)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("publisher-only: no app to deliver to; serving the API until stopped")
    await stop.wait()
    await asyncio.sleep(block_s)
    log.info("stopped")


def stop_as_sigterm() -> None:
    """``/v1.0/shutdown`` and ``Shutdown``: the sidecar stops exactly as on SIGTERM (drain,
    return what is unfinished), the API answering first, as daprd's does."""
    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)


@contextlib.asynccontextmanager
async def serving(settings: Settings, plan: DaprPlan | None = None,
                  shutdown: Callable[[], None] = stop_as_sigterm,
                  streams: StreamHub | None = None) -> AsyncIterator[None]:
    """Serve the API for the duration of the block (nothing when ``publish_api`` is off);
    with ``streams`` also streaming subscriptions on the gRPC port."""
    api = settings.publish_api
    if api is None:
        yield
        return
    service = build_service(settings, plan)
    if streams is not None and isinstance(service.sink, QueueSink):
        service.sink.also(lambda: streams.queues.values())  # queues made for streams
    metadata = describe(settings, plan, service.app_id, streams)
    runner = None
    grpc_server = None
    try:
        await service.start()
        runner = await _start_http(service, api, metadata, shutdown)
        if api.grpc_port is not None:
            from priority_pubsub.settings.grpc_address import require_grpc_extra

            require_grpc_extra("publish_api.grpc_port (grpc_port: null serves HTTP only)")
            from priority_pubsub.publish_api.grpc import PublishServicer, start_server

            servicer = PublishServicer(service, api.api_token.get_secret_value(), metadata,
                                       shutdown, streams)
            grpc_server, _ = await start_server(servicer, api.host, api.grpc_port,
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


async def _start_http(service: PublishService, api: PublishApiConfig,
                      metadata: SidecarMetadata, shutdown: Callable[[], None]
                      ) -> web.AppRunner:
    from priority_pubsub.publish_api.http import build_app

    app = build_app(service, api.api_token.get_secret_value(), api.max_body_bytes, metadata,
                    shutdown)
    runner = web.AppRunner(app, access_log=None, max_field_size=baggage.HEADER_ROOM)
    await runner.setup()
    try:
        await web.TCPSite(runner, api.host, api.http_port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
