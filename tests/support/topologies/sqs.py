"""The SQS topology on the session's moto server: queues, SNS topics subscribed to them
(Dapr's ``pubsub.aws.snssqs`` shape) and a dead-letter queue, named for one test."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import boto3

from priority_pubsub.drivers.sqs.driver import DEAD_LETTER_REASON
from tests.support.moto_server import MotoServer
from tests.support.topologies.base import DeadLetter

if TYPE_CHECKING:
    from types_boto3_sns import SNSClient
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import MessageTypeDef


class SqsTopology:
    """Admin clients (test side) and fresh queues; ``dead`` is the dead-letter queue."""

    driver_type: ClassVar[str] = "sqs"

    def __init__(self, server: MotoServer) -> None:
        self.server = server
        session = boto3.session.Session()
        self.sqs: SQSClient = session.client("sqs", endpoint_url=server.endpoint_url)
        self.sns: SNSClient = session.client("sns", endpoint_url=server.endpoint_url)
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self._dead: str | None = None

    @property
    def dead(self) -> str:
        if self._dead is None:
            self._dead = self.queue("dead")
        return self._dead

    def queue(self, suffix: str, lease_s: float = 2.0, **attributes: str) -> str:
        name = f"{self.prefix}-{suffix}"
        self.sqs.create_queue(QueueName=name, Attributes=attributes)  # type: ignore[arg-type]
        return name

    def url(self, name: str) -> str:
        return self.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None:
        message_attributes: Any = {
            k: {"DataType": "String", "StringValue": v} for k, v in (attributes or {}).items()
        }
        self.sqs.send_message(QueueUrl=self.url(queue), MessageBody=body.decode(),
                              MessageAttributes=message_attributes)

    def subscribe(self, queue: str, *, raw: bool = False) -> str:
        """An SNS topic with ``queue`` subscribed (raw delivery off: what Dapr sets up)."""
        topic_arn = self.sns.create_topic(Name=f"{queue}-topic")["TopicArn"]
        queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=self.url(queue), AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.sns.subscribe(
            TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn,
            Attributes={"RawMessageDelivery": "true" if raw else "false"},
        )
        return topic_arn

    def drain(self, queue: str, wait_s: int = 1) -> list[MessageTypeDef]:
        """Every message now in ``queue`` (received and deleted), with all attributes."""
        found: list[MessageTypeDef] = []
        while True:
            answer = self.sqs.receive_message(
                QueueUrl=self.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=wait_s,
                MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
            )
            if not answer.get("Messages"):
                return found
            for item in answer["Messages"]:
                found.append(item)
                self.sqs.delete_message(QueueUrl=self.url(queue),
                                        ReceiptHandle=item["ReceiptHandle"])

    def dead_letters(self) -> list[DeadLetter]:
        letters = []
        for item in self.drain(self.dead):
            attributes = {k: v.get("StringValue", "")
                          for k, v in item.get("MessageAttributes", {}).items()}
            letters.append(DeadLetter(item["Body"].encode(), attributes,
                                      attributes.get(DEAD_LETTER_REASON)))
        return letters

    def driver_options(self) -> dict[str, Any]:
        # short long polls keep shutdown quick: close() waits for running polls
        return {"type": self.driver_type, "endpoint_url": self.server.endpoint_url,
                "region": self.server.region, "wait_time_s": 2}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return {"queue": self.dead}

    def close(self) -> None:
        self.sqs.close()
        self.sns.close()


class ProvisionedSqsTopology(SqsTopology):
    """The same topology made by ``priority-pubsub provision`` alone: naming a
    queue or a topic re-provisions everything so far; nothing is created by hand."""

    def __init__(self, server: MotoServer) -> None:
        super().__init__(server)
        self._queues: list[str] = []
        self._sns_topics: dict[str, str] = {}
        self._lease_s = 2.0

    def queue(self, suffix: str, lease_s: float = 2.0, **attributes: str) -> str:
        name = f"{self.prefix}-{suffix}"
        if suffix != "dead":
            self._queues.append(name)
            self._lease_s = lease_s
        self._provision()
        return name

    def subscribe(self, queue: str, *, raw: bool = False) -> str:
        if raw:  # provision makes Dapr's topology only: raw delivery off
            return super().subscribe(queue, raw=raw)
        self._sns_topics[queue] = f"{queue}-topic"
        self._provision()
        [arn] = [t["TopicArn"] for t in self.sns.list_topics()["Topics"]
                 if t["TopicArn"].endswith(f":{queue}-topic")]
        return arn

    def _provision(self) -> None:
        from priority_pubsub.provision import Mode, provision_blocking
        from priority_pubsub.settings.config import validate_config

        if not self._queues:  # the dead-letter queue comes with the first queue
            return
        driver = {"type": "sqs", "endpoint_url": self.server.endpoint_url,
                  "region": self.server.region, "sns_topics": self._sns_topics}
        settings = validate_config({
            "driver": driver, "queues": [{"name": q} for q in self._queues],
            "lease": {"duration_s": max(1, round(self._lease_s))},
            "dead_letter": {"queue": f"{self.prefix}-dead"},
        })
        done = provision_blocking(settings, Mode(update=True))
        assert done.exit_code == 0, done.as_json()
