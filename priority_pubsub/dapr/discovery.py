"""The app's programmatic subscriptions, asked at start as daprd asks.

HTTP (dapr ``pkg/runtime/pubsub/subscriptions.go`` ``GetSubscriptionsHTTP``): ``GET
{app}/dapr/subscribe`` with header ``dapr-app-id``; 200 -> the JSON list, an empty body is
none; 404 -> none; any other status is logged and means none. daprd first waits for the
app's port; so does this: connection errors are retried until ``timeout_s``.

gRPC (``GetSubscriptionsGRPC``): ``ListTopicSubscriptions``; UNIMPLEMENTED means none; a
subscription without routes gets daprd's default rule, path "".
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from priority_pubsub.core.backoff import Backoff
from priority_pubsub.core.errors import ConfigError, PriorityPubsubError
from priority_pubsub.dapr.routing import Rule
from priority_pubsub.dapr.subscriptions import APP_SOURCE, Subscription, from_app
from priority_pubsub.settings.grpc_address import grpc_target
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicSubscription

log = get_logger(__name__)
SUBSCRIBE_PATH = "/dapr/subscribe"
LIST_SOURCE = "ListTopicSubscriptions"


class AppNotAnswering(PriorityPubsubError):
    """The app did not answer ``GET /dapr/subscribe`` in time (exit 1, not a config error)."""


def app_subscriptions(app_url: str, app_id: str, timeout_s: float) -> list[Subscription]:
    """The app's programmatic subscriptions over its channel: HTTP ``GET /dapr/subscribe``,
    or gRPC ``ListTopicSubscriptions`` for a ``grpc://`` app."""
    if app_url.startswith("grpc://"):
        return list_topic_subscriptions(app_url, timeout_s)
    return fetch_app_subscriptions(app_url, app_id, timeout_s)


def fetch_app_subscriptions(app_url: str, app_id: str, timeout_s: float) -> list[Subscription]:
    url = app_url.rstrip("/") + SUBSCRIBE_PATH
    request = urllib.request.Request(url, headers={
        "dapr-app-id": app_id, "Content-Type": "application/json"})
    deadline = time.monotonic() + timeout_s
    backoff = Backoff(initial_s=0.1, max_s=2.0)
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                body = answer.read()
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                log.error("app returned an error from the subscription endpoint",
                          status=exc.code, url=url)
            return []
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() + backoff.next_s() > deadline:
                raise AppNotAnswering(f"the app did not answer GET {url} within "
                                      f"{timeout_s:g}s ({exc})") from None
            time.sleep(backoff.failed())
    if not body.strip():
        return []
    try:
        items = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{APP_SOURCE}: the app's answer is not JSON: {exc}") from None
    return from_app(items)


def list_topic_subscriptions(app_url: str, timeout_s: float) -> list[Subscription]:
    """The app's subscriptions, asked at start as daprd asks (blocking; before the loop)."""
    import grpc
    from dapr.proto.runtime.v1.appcallback_pb2_grpc import AppCallbackStub
    from google.protobuf.empty_pb2 import Empty

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(grpc_target(app_url)) as channel:
        stub = AppCallbackStub(channel)
        while True:
            try:
                answer = stub.ListTopicSubscriptions(Empty(), timeout=5, wait_for_ready=True)
                break
            except grpc.RpcError as exc:
                code = exc.code()
                if code is grpc.StatusCode.UNIMPLEMENTED:
                    log.info("gRPC app does not implement ListTopicSubscriptions")
                    return []
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    log.error("app returned an error from ListTopicSubscriptions",
                              code=code.name, details=exc.details())
                    return []
                if time.monotonic() > deadline:
                    raise AppNotAnswering(
                        f"the app did not answer {LIST_SOURCE} at {app_url} within "
                        f"{timeout_s:g}s ({code.name})") from None
    return subscriptions_from_grpc(list(answer.subscriptions))


def subscriptions_from_grpc(found: list[TopicSubscription]) -> list[Subscription]:
    """``TopicSubscription`` messages as subscriptions; no routes -> daprd's default ""."""
    items: list[dict[str, Any]] = []
    for sub in found:
        item: dict[str, Any] = {
            "pubsubname": sub.pubsub_name, "topic": sub.topic, "metadata": dict(sub.metadata),
            "deadLetterTopic": sub.dead_letter_topic,
            "routes": {"rules": [{"match": r.match, "path": r.path} for r in sub.routes.rules],
                       "default": sub.routes.default},
        }
        if sub.HasField("bulk_subscribe"):
            bulk = sub.bulk_subscribe
            item["bulkSubscribe"] = {"enabled": bulk.enabled,
                                     "maxMessagesCount": bulk.max_messages_count or None,
                                     "maxAwaitDurationMs": bulk.max_await_duration_ms or None}
        items.append(item)
    default = Rule("", "")
    subscriptions = []
    for subscription in from_app(items):
        source = subscription.source.replace(APP_SOURCE, LIST_SOURCE)
        if subscription.rules:
            subscriptions.append(dataclasses.replace(subscription, source=source))
        else:
            subscriptions.append(dataclasses.replace(
                subscription, rules=(default,), compiled_rules=(default.compiled(),),
                source=source))
    return subscriptions
