"""SQS queues, their dead-letter wiring, and the SNS topics and subscriptions in front of them.

Used by ``priority-pubsub provision`` (native mode: ``spec_from_settings``) and by Dapr mode's
entity management (``priority_pubsub.dapr.snssqs``), so the two create the same things the
same way. Blocking boto3 calls: run it in a thread from async code.

What is wanted, and why:

* one queue per priority, ``VisibilityTimeout`` = ``lease.duration_s`` (the receive asks for it
  anyway; the queue's own value is what a consumer without the sidecar gets);
* with ``dead_letter.queue``: that queue, and on every priority queue a ``RedrivePolicy`` to it
  whose ``maxReceiveCount`` is ``retry.max_attempts`` + ``RELEASE_MARGIN``. SQS counts every
  receive, including the surplus a long poll catches and the sidecar releases unseen (see
  ``drivers/sqs/driver.py``), so the policy must leave room for those: the sidecar
  dead-letters first, with a reason, and the policy stays a safety net for messages no sidecar
  can settle;
* with ``driver.sns_topics: {queue: topic}``: the topic, a subscription of the queue with raw
  message delivery off (the body is SNS's envelope, as Dapr publishes) and a statement in the
  queue's policy that lets the topic send. Policies are merged, never replaced (as daprd
  does): other statements stay, and the topic is added to an existing statement of the same
  shape when there is one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from priority_pubsub.drivers.sqs.api import MAX_VISIBILITY_S, is_missing_queue, map_error, wrapped
from priority_pubsub.provision.plan import Action, Mode, Verb, decide, to_change

if TYPE_CHECKING:
    from types_boto3_sns import SNSClient
    from types_boto3_sqs import SQSClient

    from priority_pubsub.settings.config import Settings

RELEASE_MARGIN = 5
"""Receives beyond ``retry.max_attempts`` a RedrivePolicy allows: released surplus counts."""
MAX_RECEIVE_COUNT = 1000
"""SQS's ceiling for ``maxReceiveCount``."""
_POLICY_SID = "priority-pubsub-sns"


@dataclass(frozen=True)
class QueueSpec:
    name: str
    visibility_s: int | None = None
    """``VisibilityTimeout`` to manage, or None to leave the queue's own (Dapr mode)."""
    max_receive_count: int | None = None
    """With the spec's dead-letter queue: the RedrivePolicy's ``maxReceiveCount``."""
    topics: tuple[str, ...] = ()
    """SNS topics (names) this queue is subscribed to."""


@dataclass(frozen=True)
class SqsSpec:
    queues: tuple[QueueSpec, ...]
    dead_letter_queue: str | None = None


def spec_from_settings(settings: Settings) -> SqsSpec:
    """What the native config needs: see the module docstring."""
    options = settings.driver.options()
    sns_topics: Mapping[str, str] = options.get("sns_topics") or {}
    visibility_s = min(MAX_VISIBILITY_S, max(1, math.ceil(settings.lease.duration_s)))
    dead = settings.dead_letter.queue if settings.dead_letter else None
    receives = min(MAX_RECEIVE_COUNT, settings.retry.max_attempts + RELEASE_MARGIN)
    return SqsSpec(
        tuple(QueueSpec(name, visibility_s, receives if dead else None,
                        (sns_topics[name],) if name in sns_topics else ())
              for name in settings.queue_names),
        dead,
    )


@dataclass
class SqsProvisioner:
    """Reads, plans and (unless a dry run) applies an ``SqsSpec``; see the module docstring."""

    sqs: SQSClient
    sns: SNSClient
    mode: Mode = field(default_factory=Mode)
    actions: list[Action] = field(default_factory=list)
    _queue_arns: dict[str, str] = field(default_factory=dict)
    _queue_urls: dict[str, str] = field(default_factory=dict)
    _topic_arns: dict[str, str] | None = None

    def run(self, spec: SqsSpec) -> list[Action]:
        if spec.dead_letter_queue:
            self._queue(QueueSpec(spec.dead_letter_queue), None)
        for queue in spec.queues:
            self._queue(queue, spec.dead_letter_queue)
            for topic in queue.topics:
                self._subscription(queue.name, topic)
            if queue.topics:
                self._policy(queue.name, queue.topics)
        return self.actions

    # -- queues ----------------------------------------------------------------------------

    def _queue(self, queue: QueueSpec, dead_letter_queue: str | None) -> None:
        wanted: dict[str, Any] = {}
        if queue.visibility_s is not None:
            wanted["VisibilityTimeout"] = str(queue.visibility_s)
        if dead_letter_queue and queue.max_receive_count:
            wanted["RedrivePolicy"] = {"deadLetterTargetArn": self._arn_or_placeholder(
                dead_letter_queue), "maxReceiveCount": queue.max_receive_count}
        resource = f"sqs queue {queue.name}"
        current = self._queue_attributes(queue.name)
        rows = decide(resource, current, wanted, self.mode)
        self.actions += rows
        if self.mode.dry_run:
            return
        if rows[0].action is Verb.CREATE:
            with wrapped(f"CreateQueue {queue.name!r}"):
                self.sqs.create_queue(QueueName=queue.name, Attributes=_as_sqs(wanted))
            self._queue_attributes(queue.name)  # learn its ARN
        elif changes := to_change(rows):
            if current and "Policy" in current:  # moto forgets a Policy not sent along
                changes = {"Policy": current["Policy"], **changes}
            with wrapped(f"SetQueueAttributes {queue.name!r}"):
                self.sqs.set_queue_attributes(QueueUrl=self._url(queue.name),
                                              Attributes=_as_sqs(changes))

    def _queue_attributes(self, name: str) -> dict[str, Any] | None:
        try:
            url = self._url(name)
        except _Missing:
            return None
        with wrapped(f"GetQueueAttributes {name!r}"):
            found = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        attributes: dict[str, Any] = {str(k): v for k, v in found.get("Attributes", {}).items()}
        self._queue_arns[name] = attributes["QueueArn"]
        if "RedrivePolicy" in attributes:
            policy = json.loads(attributes["RedrivePolicy"])
            attributes["RedrivePolicy"] = {
                "deadLetterTargetArn": policy.get("deadLetterTargetArn"),
                "maxReceiveCount": int(policy.get("maxReceiveCount", 0)),
            }
        return attributes

    def _url(self, name: str) -> str:
        if name not in self._queue_urls:
            try:
                self._queue_urls[name] = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except botocore.exceptions.ClientError as exc:
                if is_missing_queue(exc):
                    raise _Missing(name) from None
                raise map_error(exc, f"GetQueueUrl {name!r}") from exc
            except botocore.exceptions.BotoCoreError as exc:
                raise map_error(exc, f"GetQueueUrl {name!r}") from exc
        return self._queue_urls[name]

    def _arn_or_placeholder(self, queue: str) -> str:
        return self._queue_arns.get(queue) or f"(ARN of sqs queue {queue}, once created)"

    # -- SNS -------------------------------------------------------------------------------

    def _topic(self, name: str) -> str | None:
        """The topic's ARN, creating it unless a dry run; None when it is (still) missing."""
        arns = self._known_topics()
        rows = decide(f"sns topic {name}", {} if name in arns else None, {}, self.mode)
        if not any(a.resource == rows[0].resource for a in self.actions):
            self.actions += rows
        if name not in arns and not self.mode.dry_run:
            with wrapped(f"SNS CreateTopic {name!r}"):
                arns[name] = self.sns.create_topic(Name=name)["TopicArn"]
        return arns.get(name)

    def _known_topics(self) -> dict[str, str]:
        if self._topic_arns is None:
            self._topic_arns = {}
            with wrapped("SNS ListTopics"):
                for page in self.sns.get_paginator("list_topics").paginate():
                    for topic in page.get("Topics", []):
                        arn = topic["TopicArn"]
                        self._topic_arns[arn.rsplit(":", 1)[-1]] = arn
        return self._topic_arns

    def _subscription(self, queue: str, topic: str) -> None:
        topic_arn = self._topic(topic)
        queue_arn = self._queue_arns.get(queue)
        resource = f"sns subscription {topic} -> sqs queue {queue}"
        wanted = {"RawMessageDelivery": "false"}
        current = self._find_subscription(topic_arn, queue_arn)
        rows = decide(resource, None if current is None else current[1], wanted, self.mode)
        self.actions += rows
        if self.mode.dry_run or topic_arn is None or queue_arn is None:
            return
        if current is None:
            with wrapped(f"SNS Subscribe {topic!r}"):
                self.sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn,
                                   Attributes=wanted)
        elif changes := to_change(rows):
            with wrapped(f"SNS SetSubscriptionAttributes {topic!r}"):
                for name, value in changes.items():
                    self.sns.set_subscription_attributes(
                        SubscriptionArn=current[0], AttributeName=name, AttributeValue=value)

    def _find_subscription(self, topic_arn: str | None, queue_arn: str | None
                           ) -> tuple[str, dict[str, Any]] | None:
        if topic_arn is None or queue_arn is None:
            return None
        with wrapped("SNS ListSubscriptionsByTopic"):
            pages = self.sns.get_paginator("list_subscriptions_by_topic").paginate(
                TopicArn=topic_arn)
            for page in pages:
                for sub in page.get("Subscriptions", []):
                    if sub.get("Protocol") == "sqs" and sub.get("Endpoint") == queue_arn:
                        arn = sub["SubscriptionArn"]
                        found = self.sns.get_subscription_attributes(SubscriptionArn=arn)
                        attributes = found.get("Attributes", {})
                        return arn, {"RawMessageDelivery":
                                     attributes.get("RawMessageDelivery", "false")}
        return None

    def _policy(self, queue: str, topics: tuple[str, ...]) -> None:
        """Each topic may send to the queue: missing statements are added (merged)."""
        queue_arn = self._queue_arns.get(queue)
        policy = self._current_policy(queue) if queue_arn else {}
        allowed = _allowed_topics(policy, queue_arn or "")
        missing: list[str] = []
        for topic in topics:
            arn = self._known_topics().get(topic)
            resource = f"sqs queue {queue} policy: sns topic {topic} may send"
            rows = decide(resource, {} if arn and arn in allowed else None, {}, self.mode)
            self.actions += rows
            if rows[0].action is Verb.CREATE and arn:
                missing.append(arn)
        if missing and queue_arn and not self.mode.dry_run:
            merged = merge_policy(policy, queue_arn, missing)
            with wrapped(f"SetQueueAttributes Policy {queue!r}"):
                self.sqs.set_queue_attributes(QueueUrl=self._url(queue),
                                              Attributes={"Policy": json.dumps(merged)})

    def _current_policy(self, queue: str) -> dict[str, Any]:
        with wrapped(f"GetQueueAttributes Policy {queue!r}"):
            found = self.sqs.get_queue_attributes(QueueUrl=self._url(queue),
                                                  AttributeNames=["Policy"])
        text = found.get("Attributes", {}).get("Policy")
        return json.loads(text) if text else {}


class _Missing(Exception):
    """A queue that does not exist (yet)."""


def _as_sqs(attributes: Mapping[str, Any]) -> dict[Any, str]:
    """Wanted settings as SQS attribute strings (keys typed loosely: the stubs name every
    attribute as a literal)."""
    return {name: value if isinstance(value, str) else json.dumps(value)
            for name, value in attributes.items()}


def _is_sns_send(statement: Mapping[str, Any], queue_arn: str) -> bool:
    principal = statement.get("Principal")
    service = principal.get("Service") if isinstance(principal, dict) else None
    return (statement.get("Effect") == "Allow" and service == "sns.amazonaws.com"
            and statement.get("Action") in ("sqs:SendMessage", ["sqs:SendMessage"])
            and statement.get("Resource") == queue_arn)


def _source_arns(statement: Mapping[str, Any]) -> list[str]:
    condition = statement.get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn", [])
    return [condition] if isinstance(condition, str) else list(condition)


def _allowed_topics(policy: Mapping[str, Any], queue_arn: str) -> set[str]:
    return {arn for statement in policy.get("Statement", [])
            if _is_sns_send(statement, queue_arn) for arn in _source_arns(statement)}


def merge_policy(policy: Mapping[str, Any], queue_arn: str, topic_arns: list[str]
                 ) -> dict[str, Any]:
    """``policy`` with ``topic_arns`` allowed to send to the queue; nothing removed.

    The topics join the first statement of the same shape (Allow, SNS, sqs:SendMessage on
    this queue, an ``aws:SourceArn`` condition); without one, a statement is appended."""
    merged: dict[str, Any] = {"Version": "2012-10-17", **policy}
    statements = [dict(s) for s in merged.get("Statement", [])]
    for statement in statements:
        if _is_sns_send(statement, queue_arn) and _source_arns(statement):
            arns = _source_arns(statement)
            statement["Condition"] = {**statement["Condition"], "ArnEquals": {
                **statement["Condition"]["ArnEquals"],
                "aws:SourceArn": arns + [a for a in topic_arns if a not in arns]}}
            break
    else:
        statements.append({
            "Sid": _POLICY_SID, "Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage", "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": list(topic_arns)}},
        })
    merged["Statement"] = statements
    return merged


@contextmanager
def aws_clients(region: str | None, endpoint_url: str | None
                ) -> Iterator[tuple[SQSClient, SNSClient]]:
    """Short-lived SQS and SNS clients from the standard AWS chain."""
    import boto3

    with wrapped("create clients"):
        session = boto3.session.Session()
        sqs = session.client("sqs", region_name=region, endpoint_url=endpoint_url)
        sns = session.client("sns", region_name=region, endpoint_url=endpoint_url)
    try:
        yield sqs, sns
    finally:
        sqs.close()
        sns.close()


def provision_sqs(spec: SqsSpec, mode: Mode, *, region: str | None,
                  endpoint_url: str | None) -> list[Action]:
    with aws_clients(region, endpoint_url) as (sqs, sns):
        return SqsProvisioner(sqs, sns, mode).run(spec)
