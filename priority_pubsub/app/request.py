"""How one message becomes one request to the app: the seam between the worker and the
two request builders — native (CloudEvent wrapping and the other conveniences of
``cloudevent.build_request``) and Dapr (``priority_pubsub.dapr.request_builder``: exactly
what daprd sends) — and, after it, the app channel that carries the request (HTTP, or gRPC's
``AppCallback``: ``priority_pubsub.app.channel``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from priority_pubsub.app.cloudevent import build_request, is_expired
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.transforms.base import Payload

NOT_REACHABLE = "app not reachable"


@dataclass(frozen=True, slots=True)
class Target:
    """What daprd's gRPC channel names besides the event: ``TopicEventRequest``'s
    ``pubsub_name``, ``topic`` and ``path`` (the route as written, "" for none)."""

    pubsub_name: str
    topic: str
    path: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    url: str
    request: AppRequest
    target: Target | None = None
    raw: bytes | None = None
    """The data as published, when the subscription has ``rawPayload``: daprd's bulk entries
    carry it (HTTP: base64 in ``event``; gRPC: ``bytes``), not the CloudEvent made of it."""
    content_type: str | None = None
    """The component's content type for the message, where it gives one (daprd's bulk
    entry ``contentType``: ``BulkMessageEntry.ContentType``)."""


class NeverSent(asyncio.CancelledError):
    """A cancelled ``deliver`` whose request had not left for the app (a bulk entry still in
    its filling batch): the caller hands the message back unseen, not as an attempt."""


class AppChannel(Protocol):
    """Carries one prepared request to the app and reads its answer: the HTTP channel or
    the gRPC ``AppCallback`` client. Every failure is an ``Outcome``, never an exception;
    cancelled, ``deliver`` raises ``NeverSent`` where it knows the app never got the request
    (else the cancellation as it is: the app may have it)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def deliver(self, prepared: Prepared) -> Outcome: ...


class RequestBuilder(Protocol):
    """Turns one message into the request its app channel sends, or into the outcome that
    settles it unsent (expired, no route): the one place native and Dapr mode differ in what
    the app receives."""

    def prepare(self, message: Message, payload: Payload) -> Prepared | Outcome:
        """The request to send, or the outcome when the message must not reach the app."""
        ...


@runtime_checkable
class DropHandler(Protocol):
    """A driver (wrapper) that settles a *drop* differently from a dead letter: daprd deletes
    a dropped message unless its subscription names a dead-letter topic."""

    async def drop(self, message: Message, reason: str) -> None: ...


class NativeRequestBuilder:
    """``app.url`` + the queue's ``route``; the body per ``app.delivery``
    (docs/app/contract.md). The routes follow a live reload."""

    def __init__(self, settings: Settings | LiveSettings) -> None:
        self._live = live = LiveSettings.of(settings)
        app = live.settings.app
        self._app_url = app.url.get_secret_value()
        self._routes: dict[str, str] = {}
        self._targets: dict[str, Target] = {}
        self._token = app.api_token.get_secret_value()
        self._delivery = app.delivery
        self._pubsub_name = app.pubsub_name
        self._learn_routes()
        live.on_change(self._learn_routes)

    def _learn_routes(self) -> None:
        """The configured queues' routes in force. A queue a reload removed keeps its own:
        its messages still in flight go where they were meant to."""
        for q in self._live.settings.queues:
            self._routes[q.name] = self._app_url + q.route
            self._targets[q.name] = Target(self._pubsub_name, q.name, q.route)

    def prepare(self, message: Message, payload: Payload) -> Prepared | Outcome:
        request = build_request(message, payload, delivery=self._delivery,
                                api_token=self._token, pubsub_name=self._pubsub_name)
        # the clock is read only for an event that has an expiration (few have)
        if (request.event is not None and "expiration" in request.event
                and is_expired(request.event, datetime.now(UTC))):
            return Outcome.drop("expired: CloudEvent expiration has passed")
        queue = message.queue
        if queue not in self._targets:  # added while running: a streamed topic's queue
            self._routes[queue] = self._routes.get(queue, "/")
            self._targets[queue] = Target(self._pubsub_name, queue, "/")
        return Prepared(self._routes[queue], request, self._targets[queue])
