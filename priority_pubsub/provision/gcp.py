"""Pub/Sub topics and subscriptions with the dead-letter and retry policies the sidecar needs.

Pub/Sub counts delivery attempts only on subscriptions with a dead-letter policy; without one
every delivery is attempt 1 and ``retry.max_attempts`` cannot be enforced (the driver warns).
So every subscription gets one:

* topic: ``driver.topics[queue]``, default the topic of the queue's own name;
* ``ack_deadline_seconds`` = ``lease.duration_s`` (saves a modify_ack_deadline per pull);
* dead-letter policy to ``dead_letter.queue`` (default ``{subscription}-dead-letter``), with
  ``max_delivery_attempts`` = ``retry.max_attempts`` + ``RELEASE_MARGIN`` clamped to Pub/Sub's
  5..100, so the sidecar dead-letters first, with a reason;
* retry policy from ``retry.initial_delay_s`` / ``retry.max_delay_s`` (clamped to 0..600 s):
  what Pub/Sub applies when a lease simply runs out. Not on the emulator, whose retry policy
  loses messages (``names.EMULATOR_RETRY_POLICY_BUG``): there a subscription gets none, and
  ``--update`` removes one it has;
* the dead-letter topic, and a subscription of the same id on it: Pub/Sub discards messages
  published to a topic nobody subscribes to, and a dead letter must be kept.

A subscription's topic cannot be changed: a different one is drift even with ``--update``.
On real GCP, dead-lettering also needs the Pub/Sub service agent
(``service-PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com``) to hold
``roles/pubsub.publisher`` on the dead-letter topic and ``roles/pubsub.subscriber`` on each
subscription; ``provision`` says so (it cannot learn the project number from Pub/Sub alone).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.protobuf import duration_pb2, field_mask_pb2
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import DeadLetterPolicy, RetryPolicy, Subscription

from priority_pubsub.drivers.base import map_errors
from priority_pubsub.drivers.gcp_pubsub.names import (
    EMULATOR_RETRY_POLICY_BUG,
    map_error,
    on_emulator,
    resource_path,
)
from priority_pubsub.provision.plan import Action, Mode, Verb, decide, to_change

if TYPE_CHECKING:
    from priority_pubsub.settings.config import Settings

RELEASE_MARGIN = 5
MIN_DELIVERY_ATTEMPTS, MAX_DELIVERY_ATTEMPTS = 5, 100
MAX_BACKOFF_S = 600
SERVICE_AGENT_NOTE = (
    "real GCP: the Pub/Sub service agent (service-PROJECT_NUMBER@gcp-sa-pubsub.iam."
    "gserviceaccount.com) needs roles/pubsub.publisher on {topics} and roles/pubsub.subscriber "
    "on {subscriptions}, or dead-lettering fails silently; grant them with gcloud"
)


@dataclass(frozen=True)
class SubscriptionSpec:
    path: str
    topic: str
    ack_deadline_s: int
    dead_letter_topic: str
    max_delivery_attempts: int
    min_backoff_s: int | None
    max_backoff_s: int | None
    """Both None: no retry policy (the emulator's)."""


def specs_from_settings(settings: Settings) -> list[SubscriptionSpec]:
    options = settings.driver.options()
    project = options.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
    topics: dict[str, str] = options.get("topics") or {}
    retry = settings.retry
    attempts = min(MAX_DELIVERY_ATTEMPTS,
                   max(MIN_DELIVERY_ATTEMPTS, retry.max_attempts + RELEASE_MARGIN))
    backoff: tuple[int | None, int | None] = (None, None) if on_emulator() else (
        min(MAX_BACKOFF_S, math.ceil(retry.initial_delay_s)),
        min(MAX_BACKOFF_S, max(math.ceil(retry.max_delay_s), math.ceil(retry.initial_delay_s))),
    )
    specs = []
    for queue in settings.queue_names:
        path = resource_path(queue, "subscriptions", project)
        dead = settings.dead_letter.queue if settings.dead_letter else \
            f"{path.rsplit('/', 1)[-1]}-dead-letter"
        specs.append(SubscriptionSpec(
            path=path,
            topic=resource_path(topics.get(queue, path.rsplit("/", 1)[-1]), "topics", project),
            ack_deadline_s=min(600, max(10, math.ceil(settings.lease.duration_s))),
            dead_letter_topic=resource_path(dead, "topics", project),
            max_delivery_attempts=attempts,
            min_backoff_s=backoff[0],
            max_backoff_s=backoff[1],
        ))
    return specs


@dataclass
class PubSubProvisioner:
    publisher: PublisherClient
    subscriber: SubscriberClient
    mode: Mode = field(default_factory=Mode)
    actions: list[Action] = field(default_factory=list)
    _topics_seen: set[str] = field(default_factory=set)

    def run(self, specs: list[SubscriptionSpec]) -> list[Action]:
        for spec in specs:
            self._topic(spec.topic)
            self._topic(spec.dead_letter_topic)
            self._dead_letter_keeper(spec.dead_letter_topic)
            self._subscription(spec)
        return self.actions

    def _topic(self, path: str) -> None:
        if path in self._topics_seen:
            return
        self._topics_seen.add(path)
        try:
            self.publisher.get_topic(topic=path)
            current: dict[str, Any] | None = {}
        except gexc.NotFound:
            current = None
        except gexc.GoogleAPICallError as exc:
            raise map_error(exc, f"get_topic {path}") from exc
        rows = decide(f"pubsub topic {_short(path)}", current, {}, self.mode)
        self.actions += rows
        if current is None and not self.mode.dry_run:
            with _wrapped(f"create_topic {path}"):
                self.publisher.create_topic(name=path)

    def _dead_letter_keeper(self, topic: str) -> None:
        """A subscription named as the dead-letter topic, so its messages are kept."""
        path = topic.replace("/topics/", "/subscriptions/")
        if path in self._topics_seen:
            return
        self._topics_seen.add(path)
        current = self._get(path)
        wanted = {"topic": topic}
        rows = decide(f"pubsub subscription {_short(path)} (keeps dead letters)",
                      None if current is None else {"topic": current.topic}, wanted, self.mode)
        self.actions += [_topic_is_fixed(row) for row in rows]
        if current is None and not self.mode.dry_run:
            with _wrapped(f"create_subscription {path}"):
                self.subscriber.create_subscription(name=path, topic=topic)

    def _subscription(self, spec: SubscriptionSpec) -> None:
        wanted = {
            "topic": spec.topic,
            "ack_deadline_seconds": spec.ack_deadline_s,
            "dead_letter_topic": spec.dead_letter_topic,
            "max_delivery_attempts": spec.max_delivery_attempts,
            "retry_minimum_backoff_s": spec.min_backoff_s,
            "retry_maximum_backoff_s": spec.max_backoff_s,
        }
        found = self._get(spec.path)
        current = None if found is None else _settings_of(found)
        rows = [_topic_is_fixed(row) for row in
                decide(f"pubsub subscription {_short(spec.path)}", current, wanted, self.mode)]
        self.actions += rows
        if self.mode.dry_run:
            return
        if found is None:
            with _wrapped(f"create_subscription {spec.path}"):
                self.subscriber.create_subscription(request=_subscription(spec))
        elif changes := to_change(rows):
            paths = sorted({_MASK[name] for name in changes})
            with _wrapped(f"update_subscription {spec.path}"):
                self.subscriber.update_subscription(
                    subscription=_subscription(spec),
                    update_mask=field_mask_pb2.FieldMask(paths=paths))

    def _get(self, path: str) -> Subscription | None:
        try:
            return self.subscriber.get_subscription(subscription=path)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as exc:
            raise map_error(exc, f"get_subscription {path}") from exc


_MASK = {
    "ack_deadline_seconds": "ack_deadline_seconds",
    "dead_letter_topic": "dead_letter_policy",
    "max_delivery_attempts": "dead_letter_policy",
    "retry_minimum_backoff_s": "retry_policy",
    "retry_maximum_backoff_s": "retry_policy",
}


def _topic_is_fixed(row: Action) -> Action:
    """Pub/Sub cannot move a subscription to another topic: that stays drift."""
    if row.action is Verb.UPDATE and row.setting == "topic":
        return Action(row.resource, Verb.DRIFT, row.setting, row.current,
                      f"{row.wanted} (recreate the subscription: its topic cannot change)")
    return row


def _settings_of(found: Subscription) -> dict[str, Any]:
    policy, retry = found.dead_letter_policy, found.retry_policy
    return {
        "topic": found.topic,
        "ack_deadline_seconds": found.ack_deadline_seconds,
        "dead_letter_topic": policy.dead_letter_topic or None,
        "max_delivery_attempts": policy.max_delivery_attempts or None,
        "retry_minimum_backoff_s": _seconds(retry.minimum_backoff) if retry else None,
        "retry_maximum_backoff_s": _seconds(retry.maximum_backoff) if retry else None,
    }


def _seconds(value: Any) -> int | None:
    if value is None:
        return None
    total: float = value.total_seconds() if hasattr(value, "total_seconds") else value.seconds
    return round(total)


def _subscription(spec: SubscriptionSpec) -> Subscription:
    retry = None if spec.min_backoff_s is None or spec.max_backoff_s is None else RetryPolicy(
        minimum_backoff=duration_pb2.Duration(seconds=spec.min_backoff_s),
        maximum_backoff=duration_pb2.Duration(seconds=spec.max_backoff_s))
    return Subscription(
        name=spec.path, topic=spec.topic, ack_deadline_seconds=spec.ack_deadline_s,
        dead_letter_policy=DeadLetterPolicy(dead_letter_topic=spec.dead_letter_topic,
                                            max_delivery_attempts=spec.max_delivery_attempts),
        retry_policy=retry,
    )


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


_wrapped = functools.partial(map_errors, map_error, catch=(gexc.GoogleAPICallError,))
"""``with _wrapped(doing):`` around an admin call: its errors come out as ``map_error`` says."""


def provision_pubsub(settings: Settings, mode: Mode) -> tuple[list[Action], list[str]]:
    endpoint = settings.driver.options().get("endpoint")
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    publisher = PublisherClient(client_options=options)
    subscriber = SubscriberClient(client_options=options)
    specs = specs_from_settings(settings)
    try:
        actions = PubSubProvisioner(publisher, subscriber, mode).run(specs)
    finally:
        for client in (publisher, subscriber):
            close: Callable[[], None] = client.transport.close
            close()
    notes = []
    if on_emulator():
        notes.append(f"emulator: subscriptions get no retry policy: {EMULATOR_RETRY_POLICY_BUG}")
    else:
        notes.append(SERVICE_AGENT_NOTE.format(
            topics=", ".join(sorted({_short(s.dead_letter_topic) for s in specs})),
            subscriptions=", ".join(_short(s.path) for s in specs)))
    return actions, notes
