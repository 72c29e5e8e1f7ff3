"""Dapr's ``pubsub.aws.snssqs`` component, read and served the way it works.

Sources (components-contrib ``pubsub/aws/snssqs/``): ``metadata.go`` (defaults:
messageVisibilityTimeout 10 s, messageRetryLimit 10; ``consumerID`` names the queue),
``snssqs.go`` (``callHandler``: the SQS body is SNS's Notification, ``Message`` is handed on
unchanged and the topic is the last ``:`` part of ``TopicArn``, sanitised; no message
metadata is passed on; ``validateMessage``: without a dead-letters queue a message received
``messageRetryLimit`` times is deleted unprocessed, so it is delivered at most
``messageRetryLimit - 1`` times; with ``sqsDeadLettersQueueName`` SQS moves it after
``messageReceiveLimit`` receives; a failed message is not deleted and comes back when its
visibility timeout ends; ``Subscribe``: topic, queue and SNS->SQS subscription created
unless ``disableEntityManagement``; ``Publish``: the data as the SNS message).

daprd reads every topic of an app from one queue named after the consumer id; in the
``per-topic`` layout each topic gets ``{consumerID}-{topic}`` so priorities can work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from priority_pubsub.core.errors import DriverError, TransformError
from priority_pubsub.dapr.components import ComponentContext, ComponentKind, Mapped, Unwrapped
from priority_pubsub.dapr.naming import aws_sanitized, per_topic_queue
from priority_pubsub.provision.plan import Mode
from priority_pubsub.transforms.base import Payload

if TYPE_CHECKING:
    from types_boto3_sns import SNSClient
    from types_boto3_sqs import SQSClient

    from priority_pubsub.provision.aws import SqsSpec

DEFAULT_VISIBILITY_S = 10
DEFAULT_RETRY_LIMIT = 10
_HONOURED = frozenset({
    "consumerID", "region", "awsRegion", "endpoint", "accessKey", "secretKey", "sessionToken",
    "messageVisibilityTimeout", "messageRetryLimit", "sqsDeadLettersQueueName",
    "messageReceiveLimit", "messageWaitTimeSeconds", "disableEntityManagement",
})


class SnsSqs(ComponentKind):
    type = "pubsub.aws.snssqs"
    driver = "sqs"

    def map(self, component: ComponentContext) -> Mapped:
        md = component.metadata
        driver: dict[str, Any] = {"type": self.driver}
        region = md.get("region") or md.get("awsRegion")
        if region:
            driver["region"] = region
        if md.get("endpoint"):
            driver["endpoint_url"] = md["endpoint"]
        if md.get("messageWaitTimeSeconds"):
            driver["wait_time_s"] = int(md["messageWaitTimeSeconds"])
        visibility_s = float(md.get("messageVisibilityTimeout") or DEFAULT_VISIBILITY_S)
        settings: dict[str, Any] = {
            # daprd does not delete a failed message: it comes back after its visibility
            # timeout, every time (no backoff).
            "retry": {"initial_delay_s": visibility_s, "max_delay_s": visibility_s},
            "lease": {"duration_s": max(visibility_s, 1.0)},
        }
        dead_letters = md.get("sqsDeadLettersQueueName")
        if dead_letters:
            settings["dead_letter"] = {"queue": aws_sanitized(dead_letters)}
            settings["retry"]["max_attempts"] = int(md.get("messageReceiveLimit") or 1)
        else:
            limit = int(md.get("messageRetryLimit") or DEFAULT_RETRY_LIMIT)
            settings["retry"]["max_attempts"] = max(1, limit - 1)
        return Mapped(driver, settings, _HONOURED, _credentials(md))

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return aws_sanitized(per_topic_queue(component.consumer_id, topic))

    def shared_queue(self, component: ComponentContext) -> str:
        return aws_sanitized(component.consumer_id)

    def topic_key(self, topic: str) -> str:
        return aws_sanitized(topic)

    def entities(self, component: ComponentContext, driver: Mapping[str, Any]
                 ) -> SnsSqsEntities:
        endpoint = driver.get("endpoint_url")  # validated options: a SecretUrl
        if isinstance(endpoint, SecretStr):
            endpoint = endpoint.get_secret_value()
        return SnsSqsEntities(driver.get("region"), endpoint,
                              manage=not component.flag("disableEntityManagement"))

    def unwrap(self, component: ComponentContext, payload: Payload) -> Unwrapped:
        try:
            envelope = json.loads(payload.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TransformError(f"SQS body is not SNS's JSON notification: {exc}") from None
        if not isinstance(envelope, dict) or not isinstance(envelope.get("Message"), str) \
                or not isinstance(envelope.get("TopicArn"), str):
            raise TransformError("SQS body is not an SNS notification (Message and TopicArn "
                                 "required, as for Dapr's snssqs component)")
        topic_key = envelope["TopicArn"].rsplit(":", 1)[-1]
        return Unwrapped(envelope["Message"].encode("utf-8"), topic_key, {}, None)


def _credentials(md: dict[str, str] | Any) -> dict[str, str]:
    """The component's own keys, ahead of the SDK's default chain (as daprd uses them)."""
    if not (md.get("accessKey") and md.get("secretKey")):
        return {}
    environment = {"AWS_ACCESS_KEY_ID": md["accessKey"], "AWS_SECRET_ACCESS_KEY": md["secretKey"]}
    if md.get("sessionToken"):
        environment["AWS_SESSION_TOKEN"] = md["sessionToken"]
    return environment


@dataclass
class SnsSqsEntities:
    """Topics, queues and subscriptions as the component creates them at start, through the
    same provisioning code as ``priority-pubsub provision`` (``priority_pubsub.provision.aws``:
    queue policies merged, not replaced, as daprd does), and dead-letter topic publishing.
    Blocking boto3 calls: run once before the sidecar receives."""

    region: str | None
    endpoint_url: str | None
    manage: bool = True
    _topic_arns: dict[str, str] = field(default_factory=dict)

    def _clients(self) -> tuple[SQSClient, SNSClient]:
        import boto3

        session = boto3.session.Session()
        return (session.client("sqs", region_name=self.region, endpoint_url=self.endpoint_url),
                session.client("sns", region_name=self.region, endpoint_url=self.endpoint_url))

    def ensure(self, queues: Iterable[tuple[str, tuple[str, ...]]],
               dead_letter_queue: str | None) -> None:
        """Each queue subscribed to its topics (raw delivery off, as daprd subscribes)."""
        if not self.manage:
            return
        from priority_pubsub.provision.aws import provision_sqs

        provision_sqs(entity_spec(queues, dead_letter_queue), Mode(),
                      region=self.region, endpoint_url=self.endpoint_url)

    def publish(self, topic: str, data: bytes) -> None:
        """Dapr's ``Publish``: the data as the SNS message of the (sanitised) topic."""
        sqs, sns = self._clients()
        try:
            sns.publish(TopicArn=self._topic_arn(sns, topic), Message=data.decode("utf-8"))
        finally:
            sqs.close()
            sns.close()

    def _topic_arn(self, sns: SNSClient, topic: str) -> str:
        name = aws_sanitized(topic)
        if name not in self._topic_arns:
            if self.manage:
                self._topic_arns[name] = sns.create_topic(Name=name)["TopicArn"]
            else:
                self._topic_arns[name] = _find_topic(sns, name)
        return self._topic_arns[name]


def entity_spec(queues: Iterable[tuple[str, tuple[str, ...]]], dead_letter_queue: str | None
                ) -> SqsSpec:
    """What daprd's snssqs creates: queues (their attributes left as they are), the
    dead-letters queue, one sanitised topic per subscribed topic, subscriptions, policies."""
    from priority_pubsub.provision.aws import QueueSpec, SqsSpec

    return SqsSpec(tuple(QueueSpec(queue, topics=tuple(aws_sanitized(t) for t in topics))
                         for queue, topics in queues), dead_letter_queue)


def _find_topic(sns: SNSClient, name: str) -> str:
    for page in sns.get_paginator("list_topics").paginate():
        for topic in page.get("Topics", []):
            if topic["TopicArn"].rsplit(":", 1)[-1] == name:
                return topic["TopicArn"]
    raise DriverError(f"SNS topic {name} does not exist (disableEntityManagement is set)")
