"""The app's programmatic subscriptions: ``GET {app}/dapr/subscribe`` at start, as daprd
asks (dapr ``pkg/runtime/pubsub/subscriptions.go`` ``GetSubscriptionsHTTP``: header
``dapr-app-id``; 200 -> the JSON list, an empty body is none; 404 -> none; any other status
is logged and means none). daprd first waits for the app's port; so does this: connection
errors are retried until ``timeout_s``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from priority_pubsub.core.backoff import Backoff
from priority_pubsub.core.errors import ConfigError, PriorityPubsubError
from priority_pubsub.dapr.subscriptions import APP_SOURCE, Subscription, from_app
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
SUBSCRIBE_PATH = "/dapr/subscribe"


class AppNotAnswering(PriorityPubsubError):
    """The app did not answer ``GET /dapr/subscribe`` in time (exit 1, not a config error)."""


def app_subscriptions(app_url: str, app_id: str, timeout_s: float) -> list[Subscription]:
    """The app's programmatic subscriptions over its channel: HTTP ``GET /dapr/subscribe``,
    or gRPC ``ListTopicSubscriptions`` for a ``grpc://`` app."""
    if app_url.startswith("grpc://"):
        from priority_pubsub.app.channel.grpc import list_topic_subscriptions

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
