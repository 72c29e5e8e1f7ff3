"""The gRPC app channel: daprd's ``AppCallback`` service, as ``--app-protocol grpc`` uses it.

Delivery (dapr ``pkg/runtime/subscription/postman/grpc/grpc.go`` ``Deliver``):
``OnTopicEvent`` with the ``TopicEventRequest`` of ``envelope.topic_event_request``; the
answer's status SUCCESS acks (an empty answer is SUCCESS: proto3's default), RETRY and any
unknown status retry, DROP drops; a gRPC error retries, except UNIMPLEMENTED, which daprd
treats as done: it returns success, so the message is acked and never dead-lettered (logged
as a warning and journaled with its reason). UNAVAILABLE because the channel could not
connect (the call never reached the app) is a release, as the HTTP channel's connect-phase
failure: the app health gate pauses receiving and the message is not counted.

A call has no deadline of its own: the worker cancels it at its queue's timeout
(``delivery.cancel``), and the app sees the call cancelled.

Start-up's ``ListTopicSubscriptions`` is Dapr mode's discovery (``dapr.discovery``). Health
(``AppCallbackHealthCheck.HealthCheck``): for the app health gate. Stubs are the ones Dapr
publishes (the ``dapr`` package); nothing hand-encoded.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from priority_pubsub.app.channel.bulk import Batch, entry_outcome
from priority_pubsub.app.channel.envelope import (
    EnvelopeError,
    grpc_metadata,
    topic_event_bulk_request,
    topic_event_request,
)
from priority_pubsub.app.request import NOT_REACHABLE, Prepared
from priority_pubsub.core import baggage
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.settings.config import AppConfig
from priority_pubsub.settings.grpc_address import grpc_target
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    import grpc
    from dapr.proto.runtime.v1.appcallback_pb2_grpc import AppCallbackStub

log = get_logger("priority_pubsub.delivery")
_OPTIONS = (
    ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
    # after an outage the app is used again as soon as the health gate opens, not after
    # gRPC's default reconnect backoff (up to 120 s, failing calls fast meanwhile)
    ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
_CONNECT_FAILURES = ("failed to connect to all addresses", "dns resolution failed")
"""UNAVAILABLE details of gRPC core when no connection was made (nothing was sent)."""


class GrpcAppChannel:
    """One HTTP/2 connection to the app, shared by every worker (gRPC multiplexes calls)."""

    def __init__(self, app: AppConfig) -> None:
        self._target = grpc_target(app.url.get_secret_value())
        self._channel: grpc.aio.Channel | None = None
        self._stub: AppCallbackStub | None = None

    async def start(self) -> None:
        import grpc
        from dapr.proto.runtime.v1.appcallback_pb2_grpc import AppCallbackStub

        self._channel = grpc.aio.insecure_channel(self._target, options=_OPTIONS)
        self._stub = AppCallbackStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    async def deliver(self, prepared: Prepared) -> Outcome:
        import grpc

        assert self._stub is not None, "start() first"
        try:
            request = topic_event_request(prepared)
        except EnvelopeError as exc:
            return Outcome.retry(f"error returned from app while processing pub/sub event: {exc}")
        try:
            answer = await self._stub.OnTopicEvent(
                request, metadata=grpc_metadata(prepared.request.headers))
        except grpc.aio.AioRpcError as exc:
            return self._rpc_error(exc, request.id)
        return status_outcome(answer.status)

    async def deliver_bulk(self, batch: Batch) -> dict[str, Outcome] | Outcome:
        """A batch as ``TopicEventBulkRequest``: ``AppCallback.OnBulkTopicEvent``, and
        ``AppCallbackAlpha.OnBulkTopicEventAlpha1`` for an app without it (older SDKs)."""
        import grpc
        from dapr.proto.runtime.v1.appcallback_pb2_grpc import AppCallbackAlphaStub

        assert self._stub is not None, "start() first"
        assert self._channel is not None
        try:
            request = topic_event_bulk_request(batch)
        except EnvelopeError as exc:
            return Outcome.retry(f"error returned from app while processing pub/sub event: {exc}")
        headers = batch.entries[0].prepared.request.headers
        # one entry's baggage is not the batch's: each entry carries its own in its metadata
        metadata = grpc_metadata({k: v for k, v in headers.items() if k != baggage.HEADER})
        try:
            try:
                answer = await self._stub.OnBulkTopicEvent(request, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                answer = await AppCallbackAlphaStub(self._channel).OnBulkTopicEventAlpha1(
                    request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            return self._rpc_error(exc, request.id)
        return {entry.entry_id: _bulk_status(entry.status, entry.entry_id)
                for entry in answer.statuses}

    def _rpc_error(self, exc: grpc.aio.AioRpcError, event_id: str) -> Outcome:
        import grpc

        code = exc.code()
        if code is grpc.StatusCode.UNIMPLEMENTED:
            reason = f"app answered UNIMPLEMENTED (acked, as daprd does): {exc.details()}"
            log.warning("non-retriable error returned from app: acked", event_id=event_id,
                        reason=reason[:300])
            return Outcome(Kind.ACK, None, reason[:300])
        if code is grpc.StatusCode.UNAVAILABLE and _never_connected(exc):
            return Outcome.release(f"{NOT_REACHABLE}: gRPC UNAVAILABLE: {exc.details()}"[:300])
        return Outcome.retry(f"app returned gRPC {code.name}: {exc.details()}"[:300])


def _never_connected(exc: grpc.aio.AioRpcError) -> bool:
    """The call failed before any connection to the app (refused, DNS): an UNAVAILABLE the
    app itself answered, or a connection lost mid-call, is an ordinary failure."""
    details = (exc.details() or "").lower()
    return any(marker in details for marker in _CONNECT_FAILURES)


def status_outcome(status: int) -> Outcome:
    """``TopicEventResponse.status`` as daprd reads it."""
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventResponse

    if status == TopicEventResponse.SUCCESS:
        return Outcome.ack()
    if status == TopicEventResponse.RETRY:
        return Outcome.retry("app answered RETRY")
    if status == TopicEventResponse.DROP:
        return Outcome.drop("app answered DROP")
    return Outcome.retry(f"app answered unknown status {status}")


def _bulk_status(status: int, entry_id: str) -> Outcome:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventResponse

    names: dict[int, str] = {TopicEventResponse.SUCCESS: "SUCCESS",
                             TopicEventResponse.RETRY: "RETRY", TopicEventResponse.DROP: "DROP"}
    return entry_outcome(names.get(int(status), str(status)), entry_id)


async def app_callback_health(
    app_url: str, timeout_s: float, *, unimplemented_ok: bool = False
) -> str | None:
    """daprd's health probe for gRPC apps (``AppCallbackHealthCheck.HealthCheck``): None when
    the app answers, else why not. For the app health gate. ``unimplemented_ok``: an app that
    answers UNIMPLEMENTED (no health service) counts as up: it is listening."""
    import grpc
    from dapr.proto.runtime.v1.appcallback_pb2_grpc import AppCallbackHealthCheckStub
    from google.protobuf.empty_pb2 import Empty

    async with grpc.aio.insecure_channel(grpc_target(app_url)) as channel:
        try:
            await asyncio.wait_for(
                AppCallbackHealthCheckStub(channel).HealthCheck(Empty()), timeout_s)
        except grpc.aio.AioRpcError as exc:
            if unimplemented_ok and exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                return None
            return f"app health check failed: {exc.code().name}: {exc.details()}"
        except TimeoutError:
            return f"app health check did not answer within {timeout_s:g}s"
    return None
