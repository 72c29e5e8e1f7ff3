"""A real gRPC app of the tests' own: Dapr's ``AppCallback`` service (the stubs the ``dapr``
package ships) on a free port, recording every ``OnTopicEvent`` with its metadata and
answering per topic as a test scripts it: a ``TopicEventResponse`` status, or a gRPC error
code (UNIMPLEMENTED, INTERNAL...), or no answer until the caller cancels the call
(``UNTIL_CANCELLED``, recorded in ``cancelled``); ``OnBulkTopicEvent`` recorded and answered
per entry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import grpc
from dapr.proto.runtime.v1 import appcallback_pb2, appcallback_pb2_grpc

from tests.support.servers import free_port

SUCCESS = appcallback_pb2.TopicEventResponse.SUCCESS
RETRY = appcallback_pb2.TopicEventResponse.RETRY
DROP = appcallback_pb2.TopicEventResponse.DROP
UNTIL_CANCELLED: Final = "until cancelled"


@dataclass(frozen=True)
class Call:
    request: appcallback_pb2.TopicEventRequest
    metadata: dict[str, str]
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Cancelled:
    """A call the caller cancelled before the app answered: when the app saw it end."""

    call: Call
    at: float


Answer = int | grpc.StatusCode | Literal["until cancelled"]
"""A ``TopicEventResponse`` status, the gRPC error code to fail the call with, or
``UNTIL_CANCELLED``: no answer while the call lasts."""


@dataclass
class GrpcApp:
    answer: Callable[[appcallback_pb2.TopicEventRequest], Answer] = lambda _: SUCCESS
    bulk_answer: Callable[[appcallback_pb2.TopicEventBulkRequestEntry], int | None] = (
        lambda _: SUCCESS)
    """A bulk entry's status, or None to leave the entry out of the answer."""
    bulk_calls: list[appcallback_pb2.TopicEventBulkRequest] = field(default_factory=list)
    bulk_metadata: list[dict[str, str]] = field(default_factory=list)
    """Each bulk call's gRPC metadata, as ``bulk_calls``."""
    subscriptions: list[appcallback_pb2.TopicSubscription] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    cancelled: list[Cancelled] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Any = None

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def __enter__(self) -> GrpcApp:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        appcallback_pb2_grpc.add_AppCallbackServicer_to_server(_Servicer(self), self._server)
        appcallback_pb2_grpc.add_AppCallbackHealthCheckServicer_to_server(
            _Health(), self._server)
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        self._server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.stop(grace=1).wait(5)

    def topics(self) -> list[str]:
        with self._lock:
            return [call.request.topic for call in self.calls]


class _Servicer(appcallback_pb2_grpc.AppCallbackServicer):
    def __init__(self, app: GrpcApp) -> None:
        self._app = app

    def ListTopicSubscriptions(self, request: Any, context: Any) -> Any:
        return appcallback_pb2.ListTopicSubscriptionsResponse(
            subscriptions=self._app.subscriptions)

    def OnTopicEvent(self, request: Any, context: Any) -> Any:
        metadata = {key: str(value) for key, value in context.invocation_metadata()}
        call = Call(request, metadata)
        with self._app._lock:
            self._app.calls.append(call)
        answer = self._app.answer(request)
        if answer == UNTIL_CANCELLED:
            while context.is_active():  # False once the caller cancelled the call
                time.sleep(0.01)
            with self._app._lock:
                self._app.cancelled.append(Cancelled(call, time.time()))
            return appcallback_pb2.TopicEventResponse()
        if isinstance(answer, grpc.StatusCode):
            context.abort(answer, f"scripted {answer.name} for topic {request.topic}")
        return appcallback_pb2.TopicEventResponse(status=answer)


    def OnBulkTopicEvent(self, request: Any, context: Any) -> Any:
        with self._app._lock:
            self._app.bulk_calls.append(request)
            self._app.bulk_metadata.append(
                {key: str(value) for key, value in context.invocation_metadata()})
        statuses = []
        for entry in request.entries:
            status = self._app.bulk_answer(entry)
            if status is not None:
                statuses.append(appcallback_pb2.TopicEventBulkResponseEntry(
                    entry_id=entry.entry_id, status=status))
        return appcallback_pb2.TopicEventBulkResponse(statuses=statuses)


class _Health(appcallback_pb2_grpc.AppCallbackHealthCheckServicer):
    def HealthCheck(self, request: Any, context: Any) -> Any:
        return appcallback_pb2.HealthCheckResponse()
