"""daprd's HTTP publish API (``pkg/api/http/http.go``): ``POST|PUT /v1.0/publish/{pubsubname}/
{topic}``, bulk ``/v1.0-alpha1/publish/bulk/...`` (and ``/v1.0/publish/bulk/...``),
``GET /v1.0/healthz`` and ``/v1.0/healthz/outbound`` (the SDKs poll the latter before their
first call), ``GET /v1.0/metadata`` (``metadata``), ``PUT /v1.0/metadata/{key}`` and
``POST /v1.0/shutdown`` (stops the sidecar as SIGTERM does). ``dapr-api-token`` checked as
daprd's middleware does (health exempt); bodies over ``max_body_bytes`` refused as daprd's
limited reader refuses them (500, "stream too large"). A ``baggage`` header is checked as
daprd's tracing middleware checks it (``core.baggage``; health exempt, ahead of the token):
400 ``invalid baggage header: ...`` as text. Every other Dapr API answers 404.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from priority_pubsub.core import baggage
from priority_pubsub.publish_api import errors
from priority_pubsub.publish_api.envelope import EnvelopeError, Trace, bulk_entry_bytes
from priority_pubsub.publish_api.metadata import SidecarMetadata
from priority_pubsub.publish_api.service import (
    BulkEntry,
    PublishService,
    first_values,
    require_unique_ids,
)

STREAM_TOO_LARGE = "stream too large"
"""dapr/kit ``streams.ErrStreamTooLarge``."""
_HEALTH_PATHS = ("/v1.0/healthz", "/v1.0/healthz/outbound")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(service: PublishService, api_token: str, max_body_bytes: int,
              metadata: SidecarMetadata, shutdown: Callable[[], None]) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes,
                          middlewares=[_baggage_middleware, _token_middleware(api_token)])
    # coroutine functions: aiohttp deprecates plain functions (lambdas) as handlers
    async def health(_: web.Request) -> web.Response:
        return await _health(service)

    async def read_metadata(_: web.Request) -> web.Response:
        return await _metadata(metadata)

    async def shut_down(_: web.Request) -> web.Response:
        return await _shutdown(shutdown)

    app.router.add_get("/v1.0/healthz", health)
    app.router.add_get("/v1.0/healthz/outbound", health)
    app.router.add_get("/v1.0/metadata", read_metadata)
    app.router.add_put("/v1.0/metadata/{key}", _set_metadata(metadata))
    app.router.add_post("/v1.0/shutdown", shut_down)
    bulk = _bulk_handler(service)
    single = _publish_handler(service, max_body_bytes)
    for method in ("POST", "PUT"):
        for prefix in ("/v1.0-alpha1/publish/bulk", "/v1.0/publish/bulk"):
            app.router.add_route(method, prefix + "/{pubsubname}/{topic:.*}", bulk)
        app.router.add_route(method, "/v1.0/publish/{pubsubname}/{topic:.*}", single)
    return app


def _token_middleware(token: str) -> Any:
    @web.middleware
    async def check(request: web.Request, handler: _Handler) -> web.StreamResponse:
        exempt = _is_health(request)
        given = request.headers.get("dapr-api-token", "")
        if token and not exempt and not hmac.compare_digest(given.encode(), token.encode()):
            return _text(401, errors.INVALID_TOKEN_TEXT)
        return await handler(request)

    return check


@web.middleware
async def _baggage_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """daprd's ``HTTPTraceMiddleware``: a call whose baggage OpenTelemetry cannot parse is
    refused before anything else reads it (``http.Error``: the reason as text)."""
    if not _is_health(request):
        try:
            baggage.members(_baggage(request))
        except baggage.BaggageError as exc:
            return _text(400, f"invalid baggage header: {exc}\n")
    return await handler(request)


def _is_health(request: web.Request) -> bool:
    return request.method == "GET" and request.path.rstrip("/") in _HEALTH_PATHS


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain", charset="utf-8")


async def _health(service: PublishService) -> web.Response:
    if service.ready:
        return web.Response(status=204)
    body = {"errorCode": "ERR_HEALTH_NOT_READY", "message": "dapr is not ready"}
    return web.json_response(body, status=500)


async def _metadata(metadata: SidecarMetadata) -> web.Response:
    return web.json_response(metadata.as_json())


def _set_metadata(metadata: SidecarMetadata) -> _Handler:
    async def put(request: web.Request) -> web.Response:
        metadata.set(request.match_info["key"], (await request.read()).decode(errors="replace"))
        return web.Response(status=204)

    return put


async def _shutdown(shutdown: Callable[[], None]) -> web.Response:
    """daprd answers 204 and then shuts down as on SIGTERM (``pkg/api/http/shutdown.go``)."""
    shutdown()
    return web.Response(status=204)


def _error(exc: errors.DaprError) -> web.Response:
    return web.Response(status=exc.http_status, body=exc.http_body(),
                        content_type="application/json")


def _trace(request: web.Request) -> Trace:
    return Trace(request.headers.get("traceparent", ""), request.headers.get("tracestate", ""),
                 _baggage(request))


def _baggage(request: web.Request) -> str:
    return baggage.joined(request.headers.getall(baggage.HEADER, ()))


def _publish_handler(service: PublishService, max_body_bytes: int) -> _Handler:
    async def publish(request: web.Request) -> web.Response:
        pubsub, topic = request.match_info["pubsubname"], request.match_info["topic"]
        metadata = first_values(request.query.items())
        try:
            service.check(pubsub, topic, metadata)
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise errors.publish_failed(pubsub, topic, STREAM_TOO_LARGE) from None
            await service.publish(pubsub, topic, body, request.headers.get("Content-Type", ""),
                                  metadata, _trace(request))
        except errors.DaprError as exc:
            return _error(exc)
        return web.Response(status=204)

    return publish


def _bulk_handler(service: PublishService) -> _Handler:
    async def publish_bulk(request: web.Request) -> web.Response:
        pubsub, topic = request.match_info["pubsubname"], request.match_info["topic"]
        metadata = first_values(request.query.items())
        try:
            raw = service.check(pubsub, topic, metadata)
            try:
                incoming = json.loads(await request.read())
            except web.HTTPRequestEntityTooLarge:
                raise errors.unmarshal_events(pubsub, topic, service.app_id,
                                              STREAM_TOO_LARGE) from None
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise errors.unmarshal_events(pubsub, topic, service.app_id, str(exc)) from None
            except RecursionError:
                raise errors.unmarshal_events(pubsub, topic, service.app_id,
                                              "exceeded max depth") from None
            entries = _bulk_entries(service, topic, incoming)
            failed = await service.publish_bulk(topic, entries, metadata, _trace(request), raw)
        except errors.DaprError as exc:
            return _error(exc)
        if not failed:
            return web.Response(status=204)
        body = {"failedEntries": [{"entryId": entry_id, "error": error}
                                  for entry_id, error in failed],
                "errorCode": "ERR_PUBSUB_PUBLISH_MESSAGE"}
        return web.json_response(body, status=500)

    return publish_bulk


def _bulk_entries(service: PublishService, topic: str, incoming: Any) -> list[BulkEntry]:
    pubsub = service.pubsub_name
    if not isinstance(incoming, list) or not all(isinstance(e, dict) for e in incoming):
        raise errors.unmarshal_events(pubsub, topic, service.app_id,
                                      "json: cannot unmarshal into a list of entries")
    entries = []
    for item in incoming:
        content_type = str(item.get("contentType") or "")
        try:
            data = bulk_entry_bytes(item.get("event"), content_type)
        except EnvelopeError as exc:
            raise errors.marshal_envelope(pubsub, topic, service.app_id, str(exc)) from None
        metadata = item.get("metadata")
        entries.append(BulkEntry(str(item.get("entryId") or ""), data, content_type,
                                 {str(k): str(v) for k, v in metadata.items()}
                                 if isinstance(metadata, dict) else None))
        require_unique_ids(service, topic, [e.entry_id for e in entries])
    return entries
