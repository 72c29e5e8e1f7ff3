"""Dapr resources directories and Dapr's publisher, for the Dapr drop-in tests.

``dapr_publish`` does what daprd's publish API does with ``pubsub.aws.snssqs``: it builds the
CloudEvent of components-contrib ``pubsub/envelope.go`` ``NewCloudEventsEnvelope`` (id,
specversion, datacontenttype, source = the publishing app id, type com.dapr.event.sent,
topic, pubsubname, traceid = traceparent, tracestate, time, data), serialises it as Go's
``json.Marshal`` does (keys sorted, compact), and sends it as the SNS message of the topic
named after the sanitised topic (``snssqs.go`` ``Publish``: no message attributes).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import yaml

from tests.support.moto_server import MotoServer

ACCOUNT = "123456789012"  # moto's default account


def write_resources(directory: Path, *documents: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for index, document in enumerate(documents):
        name = f"{index:02d}-{document['kind'].lower()}-{document['metadata']['name']}.yaml"
        (directory / name).write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def snssqs_component(name: str, moto: MotoServer, **metadata: str) -> dict[str, Any]:
    items = [{"name": "endpoint", "value": moto.endpoint_url},
             {"name": "region", "value": moto.region}]
    items += [{"name": key, "value": value} for key, value in metadata.items()]
    return {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": name},
            "spec": {"type": "pubsub.aws.snssqs", "version": "v1", "metadata": items}}


def subscription_v2(name: str, pubsub: str, topic: str, *, rules: list[dict[str, str]] = (),
                    default: str | None = None, dead_letter: str | None = None,
                    metadata: dict[str, str] | None = None) -> dict[str, Any]:
    routes: dict[str, Any] = {"rules": list(rules)}
    if default:
        routes["default"] = default
    spec: dict[str, Any] = {"pubsubname": pubsub, "topic": topic, "routes": routes}
    if dead_letter:
        spec["deadLetterTopic"] = dead_letter
    if metadata:
        spec["metadata"] = metadata
    return {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
            "metadata": {"name": name}, "spec": spec}


def dapr_event(data: Any, *, topic: str, pubsub: str, source: str = "checkout",
               **extra: str) -> bytes:
    """The CloudEvent daprd publishes; ``extra`` fields added (``baggage``: dapr #10385's)."""
    trace = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    event = {
        "id": str(uuid.uuid4()), "specversion": "1.0", "datacontenttype": "application/json",
        "source": source, "type": "com.dapr.event.sent", "topic": topic, "pubsubname": pubsub,
        "traceid": trace, "traceparent": trace, "tracestate": "",
        "time": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "data": data, **extra,
    }
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()


class Sns:
    """SNS on moto: topics by name, as the snssqs component names them."""

    def __init__(self, moto: MotoServer) -> None:
        session = boto3.session.Session()
        self.sns = session.client("sns", endpoint_url=moto.endpoint_url, region_name=moto.region)
        self.sqs = session.client("sqs", endpoint_url=moto.endpoint_url, region_name=moto.region)
        self.region = moto.region

    def arn(self, topic: str) -> str:
        return str(self.sns.create_topic(Name=topic)["TopicArn"])

    def publish(self, topic: str, body: bytes) -> None:
        self.sns.publish(TopicArn=self.arn(topic), Message=body.decode())

    def tap(self, topic: str) -> str:
        """A fresh queue subscribed to ``topic`` (to see what reaches a dead-letter topic)."""
        name = f"tap-{uuid.uuid4().hex[:10]}"
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.sns.subscribe(TopicArn=self.arn(topic), Protocol="sqs", Endpoint=queue_arn)
        return str(url)

    def messages(self, url: str, expect: int, timeout_s: float = 20) -> list[dict[str, Any]]:
        """SNS notifications in the queue at ``url`` (received and deleted)."""
        import time

        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < expect and time.monotonic() < deadline:
            answer = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                              WaitTimeSeconds=1)
            for item in answer.get("Messages", []):
                found.append(json.loads(item["Body"]))
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=item["ReceiptHandle"])
        return found

    def visible(self, queue: str) -> int:
        url = self.sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"])

    def close(self) -> None:
        self.sns.close()
        self.sqs.close()


def dapr_config(directory: Path, resources: Path, app_id: str, app_url: str,
                **overrides: Any) -> dict[str, Any]:
    """A sidecar config in Dapr mode: no queues, no driver type (they come from Dapr)."""
    config: dict[str, Any] = {
        "dapr": {"resources_path": str(resources), "app_id": app_id, "subscribe_timeout_s": 30},
        "driver": {"wait_time_s": 1, "close_wait_s": 2},
        "app": {"url": app_url, "timeout_s": 30},
        "concurrency": 2,
        "shutdown": {"grace_s": 2},
        "server": {"host": "127.0.0.1", "port": 0},
        "journal": {"path": str(directory / "journal"), "rotate_mb": 64},
        "log": {"level": "info", "format": "json"},
    }
    config.update(overrides)
    return config
