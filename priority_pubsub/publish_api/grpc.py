"""daprd's gRPC publish API (``pkg/api/grpc/grpc.go``): ``Dapr.PublishEvent``,
``BulkPublishEventAlpha1`` and ``BulkPublishEvent`` on the service Dapr publishes (the
``dapr`` package's stubs); every other ``Dapr`` method answers UNIMPLEMENTED. The token is
checked as ``pkg/api/grpc/auth.go`` checks it; a request over ``max_body_bytes`` is refused
by gRPC itself (RESOURCE_EXHAUSTED), as daprd's ``--max-body-size`` does.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from google.protobuf import any_pb2, empty_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from priority_pubsub.publish_api import errors
from priority_pubsub.publish_api.envelope import Trace
from priority_pubsub.publish_api.service import BulkEntry, PublishService, require_unique_ids

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.pubsub_pb2 import (
        BulkPublishRequest,
        BulkPublishResponse,
        PublishEventRequest,
    )


class PublishServicer(dapr_pb2_grpc.DaprServicer):
    def __init__(self, service: PublishService, api_token: str) -> None:
        self._service = service
        self._token = api_token

    async def PublishEvent(
        self, request: PublishEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> empty_pb2.Empty:
        await self._authenticate(context)
        try:
            await self._service.publish(
                request.pubsub_name, request.topic, request.data, request.data_content_type,
                dict(request.metadata), _trace(context), grpc=True)
        except errors.DaprError as exc:
            await _abort(context, exc)
        return empty_pb2.Empty()

    async def BulkPublishEventAlpha1(
        self, request: BulkPublishRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> BulkPublishResponse:
        return await self._bulk(request, context)

    async def BulkPublishEvent(
        self, request: BulkPublishRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> BulkPublishResponse:
        return await self._bulk(request, context)

    async def _bulk(self, request: BulkPublishRequest,
                    context: grpc.aio.ServicerContext[Any, Any]) -> BulkPublishResponse:
        from dapr.proto.runtime.v1.pubsub_pb2 import BulkPublishResponse

        await self._authenticate(context)
        service, topic, metadata = self._service, request.topic, dict(request.metadata)
        try:
            raw = service.check(request.pubsub_name, topic, metadata, grpc=True)
            require_unique_ids(service, topic, [entry.entry_id for entry in request.entries])
            entries = [BulkEntry(e.entry_id, e.event, e.content_type, dict(e.metadata) or None)
                       for e in request.entries]
            failed = await service.publish_bulk(topic, entries, metadata, _trace(context), raw)
            if failed:
                raise errors.publish_failed(service.pubsub_name, topic, failed[0][1])
        except errors.DaprError as exc:
            await _abort(context, exc)
        return BulkPublishResponse()

    async def _authenticate(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self._token:
            return
        given = [value for key, value in context.invocation_metadata() or ()
                 if key == "dapr-api-token"]
        if not given:
            await _abort(context, errors.unauthenticated("missing api token in request metadata"))
        if not hmac.compare_digest(str(given[0]).encode(), self._token.encode()):
            await _abort(context, errors.unauthenticated("authentication error: api token "
                                                         "mismatch"))


def _trace(context: grpc.aio.ServicerContext[Any, Any]) -> Trace:
    found = {key: str(value) for key, value in context.invocation_metadata() or ()}
    return Trace(found.get("traceparent", ""), found.get("tracestate", ""))


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: errors.DaprError
                 ) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(grpc_status(exc)))
    raise AssertionError("abort_with_status returns only by raising")


def grpc_status(exc: errors.DaprError) -> status_pb2.Status:
    """The error as daprd's gRPC status: code, message, ``ResourceInfo`` and ``ErrorInfo``."""
    details = []
    if exc.resource is not None:
        info = error_details_pb2.ResourceInfo(resource_type="pubsub",
                                              resource_name=exc.resource,
                                              description=exc.message)
        details.append(_packed(info))
    details.append(_packed(error_details_pb2.ErrorInfo(
        reason=exc.reason, domain=errors.DOMAIN, metadata=dict(exc.metadata or {}))))
    code = grpc.StatusCode[exc.grpc_code].value[0]
    return status_pb2.Status(code=code, message=exc.message, details=details)


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


async def start_server(service: PublishService, host: str, port: int, api_token: str,
                       max_body_bytes: int) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_body_bytes)])
    dapr_pb2_grpc.add_DaprServicer_to_server(PublishServicer(service, api_token), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (gRPC publish API)")
    await server.start()
    return server, bound
