"""daprd's gRPC publish API (``pkg/api/grpc/grpc.go``): ``Dapr.PublishEvent``,
``BulkPublishEventAlpha1`` and ``BulkPublishEvent``, ``GetMetadata``, ``SetMetadata`` and
``Shutdown`` on the service Dapr publishes (the ``dapr`` package's stubs); every other ``Dapr``
method answers UNIMPLEMENTED. The token is checked as ``pkg/api/grpc/auth.go`` checks it, then
``baggage`` metadata as daprd's tracing interceptor checks it (``core.baggage``:
INVALID_ARGUMENT ``invalid baggage header: ...``); a request over ``max_body_bytes`` is refused
by gRPC itself (RESOURCE_EXHAUSTED), as daprd's ``--max-body-size`` does.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from google.protobuf import any_pb2, empty_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from priority_pubsub.app.channel.streams import Stream, StreamHub, TopicRefused
from priority_pubsub.core import baggage
from priority_pubsub.publish_api import errors
from priority_pubsub.publish_api.envelope import Trace
from priority_pubsub.publish_api.metadata import SidecarMetadata
from priority_pubsub.publish_api.service import BulkEntry, PublishService, require_unique_ids

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.dapr_pb2 import ShutdownRequest
    from dapr.proto.runtime.v1.metadata_pb2 import (
        GetMetadataRequest,
        GetMetadataResponse,
        SetMetadataRequest,
    )
    from dapr.proto.runtime.v1.pubsub_pb2 import (
        BulkPublishRequest,
        BulkPublishResponse,
        PublishEventRequest,
        SubscribeTopicEventsRequestAlpha1,
        SubscribeTopicEventsRequestInitialAlpha1,
        SubscribeTopicEventsResponseAlpha1,
    )


class PublishServicer(dapr_pb2_grpc.DaprServicer):
    def __init__(self, service: PublishService, api_token: str, metadata: SidecarMetadata,
                 shutdown: Callable[[], None], streams: StreamHub | None = None) -> None:
        self._service = service
        self._token = api_token
        self._metadata = metadata
        self._shutdown = shutdown
        self._streams = streams

    async def SubscribeTopicEventsAlpha1(
        self, request_iterator: AsyncIterator[SubscribeTopicEventsRequestAlpha1],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[SubscribeTopicEventsResponseAlpha1]:
        """A streaming subscription (``app_channel.streams``): the initial request names the
        topic; ``initial_response``, then each event, answered on the same stream."""
        from dapr.proto.runtime.v1.pubsub_pb2 import (
            SubscribeTopicEventsResponseAlpha1,
            SubscribeTopicEventsResponseInitialAlpha1,
        )

        await self._admit(context)
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("initial_request"):
            await _abort(context, errors.streaming("the first message must be an initial "
                                                   "request", "INVALID_ARGUMENT"))
        hub = await self._hub_for(first.initial_request, context)
        stream = hub.open(first.initial_request.topic, first.initial_request.dead_letter_topic)
        answers = asyncio.create_task(_read_answers(request_iterator, stream))
        answers.add_done_callback(lambda _: hub.close(stream))
        try:
            yield SubscribeTopicEventsResponseAlpha1(
                initial_response=SubscribeTopicEventsResponseInitialAlpha1())
            while (event := await stream.outgoing.get()) is not None:
                yield SubscribeTopicEventsResponseAlpha1(event_message=event)
        finally:
            hub.close(stream)
            answers.cancel()
            await asyncio.gather(answers, return_exceptions=True)

    async def _hub_for(self, initial: SubscribeTopicEventsRequestInitialAlpha1,
                       context: grpc.aio.ServicerContext[Any, Any]) -> StreamHub:
        hub = self._streams
        if hub is None or initial.pubsub_name != hub.pubsub_name:
            await _abort(context, errors.streaming(
                f"pubsub {initial.pubsub_name} not found", "INVALID_ARGUMENT"))
        if not initial.topic:
            await _abort(context, errors.streaming("topic is required", "INVALID_ARGUMENT"))
        try:
            await hub.add_topic(initial.topic)  # known at start: nothing to do
        except TopicRefused as exc:
            await _abort(context, errors.streaming(str(exc), exc.code))
        return hub

    async def GetMetadata(self, request: GetMetadataRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> GetMetadataResponse:
        await self._admit(context)
        return self._metadata.as_proto()

    async def SetMetadata(self, request: SetMetadataRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> empty_pb2.Empty:
        await self._admit(context)
        self._metadata.set(request.key, request.value)
        return empty_pb2.Empty()

    async def Shutdown(self, request: ShutdownRequest,
                       context: grpc.aio.ServicerContext[Any, Any]) -> empty_pb2.Empty:
        await self._admit(context)
        self._shutdown()
        return empty_pb2.Empty()

    async def PublishEvent(
        self, request: PublishEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> empty_pb2.Empty:
        await self._admit(context)
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

        await self._admit(context)
        service, topic, metadata = self._service, request.topic, dict(request.metadata)
        try:
            raw = service.check(request.pubsub_name, topic, metadata, grpc=True)
            require_unique_ids(service, topic, [entry.entry_id for entry in request.entries])
            entries = [BulkEntry(e.entry_id, e.event, e.content_type, dict(e.metadata) or None)
                       for e in request.entries]
            failed = await service.publish_bulk(topic, entries, metadata, _trace(context), raw)
            if failed:
                raise errors.bulk_publish_failed(service.pubsub_name, topic, failed)
        except errors.DaprError as exc:
            await _abort(context, exc)
        return BulkPublishResponse()

    async def _admit(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """daprd's interceptors, in its order: the API token, then the baggage."""
        await self._authenticate(context)
        try:
            baggage.members(_baggage(context))
        except baggage.BaggageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"invalid baggage header: {exc}")

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


async def _read_answers(requests: AsyncIterator[SubscribeTopicEventsRequestAlpha1],
                        stream: Stream) -> None:
    """The app's answers, until it closes its side (then its stream closes)."""
    from priority_pubsub.app.channel.grpc import status_outcome

    async for request in requests:
        if request.HasField("event_processed"):
            processed = request.event_processed
            stream.answer(processed.id, status_outcome(processed.status.status))


def _trace(context: grpc.aio.ServicerContext[Any, Any]) -> Trace:
    found = {key: str(value) for key, value in context.invocation_metadata() or ()}
    return Trace(found.get("traceparent", ""), found.get("tracestate", ""), _baggage(context))


def _baggage(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    return baggage.joined(str(value) for key, value in context.invocation_metadata() or ()
                          if key == baggage.HEADER)


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


async def start_server(servicer: PublishServicer, host: str, port: int, max_body_bytes: int
                       ) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_body_bytes),
                                      ("grpc.max_metadata_size", baggage.HEADER_ROOM)])
    dapr_pb2_grpc.add_DaprServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (gRPC publish API)")
    await server.start()
    return server, bound
