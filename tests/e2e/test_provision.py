"""``priority-pubsub provision`` (the real CLI) against moto server and Google's Pub/Sub
emulator: the plan on an empty account, creation, the idempotent second run, drift, policy
merging, ``run --provision``, and Pub/Sub subscriptions that count delivery attempts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import PubsubMessage

from priority_pubsub.provision.aws import RELEASE_MARGIN
from tests.e2e.helpers import journal_records, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.gcp_pubsub_emulator import PROJECT, Emulator
from tests.support.moto_server import MotoServer
from tests.support.sidecar import cli, sidecar_config, start_sidecar, write_config

if TYPE_CHECKING:
    from types_boto3_sns import SNSClient
    from types_boto3_sqs import SQSClient


def provision(config: Path, *flags: str) -> tuple[int, str]:
    result = cli("provision", *flags, config=config)
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, result.stdout


def actions(config: Path, *flags: str) -> tuple[int, list[dict[str, Any]]]:
    code, out = provision(config, "--json", *flags)
    return code, json.loads(out)["actions"]


# -- SQS / SNS on moto ----------------------------------------------------------------------


class Aws:
    def __init__(self, server: MotoServer) -> None:
        self.server = server
        session = boto3.session.Session()
        self.sqs: SQSClient = session.client("sqs", endpoint_url=server.endpoint_url)
        self.sns: SNSClient = session.client("sns", endpoint_url=server.endpoint_url)
        self.prefix = f"p{uuid.uuid4().hex[:10]}"

    def names(self) -> tuple[str, str, str]:
        return f"{self.prefix}-high", f"{self.prefix}-low", f"{self.prefix}-dead"

    def config(self, directory: Path, app_url: str = "http://127.0.0.1:9/x",
               **overrides: Any) -> dict[str, Any]:
        high, low, dead = self.names()
        driver = {"type": "sqs", "endpoint_url": self.server.endpoint_url,
                  "region": self.server.region, "wait_time_s": 2,
                  "sns_topics": {high: f"{high}-topic"}}
        defaults: dict[str, Any] = {"dead_letter": {"queue": dead},
                                    "retry": {"max_attempts": 4, "initial_delay_s": 1,
                                              "max_delay_s": 4},
                                    "lease": {"duration_s": 30}, "transforms": ["sns_envelope"]}
        return sidecar_config(directory, app_url, driver, [high, low],
                              **{**defaults, **overrides})

    def attributes(self, queue: str) -> dict[str, str]:
        url = self.sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        return {str(k): v for k, v in self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["All"])["Attributes"].items()}

    def topic_arn(self, name: str) -> str:
        [arn] = [t["TopicArn"] for t in self.sns.list_topics()["Topics"]
                 if t["TopicArn"].endswith(f":{name}")]
        return arn

    def close(self) -> None:
        self.sqs.close()
        self.sns.close()


@pytest.fixture
def aws(moto_server: MotoServer) -> Iterator[Aws]:
    client = Aws(moto_server)
    yield client
    client.close()


@pytest.mark.sqs
def test_plan_create_then_nothing_to_do(tmp_path: Path, aws: Aws) -> None:
    high, low, dead = aws.names()
    config = write_config(tmp_path, aws.config(tmp_path))

    code, table = provision(config, "--dry-run")  # an account without any of these
    assert code == 3
    assert "would create 6" in table
    for name in (high, low, dead, f"{high}-topic"):
        assert name in table
    code, planned = actions(config, "--dry-run")
    assert code == 3
    assert {a["action"] for a in planned} == {"create"}
    assert {a["resource"] for a in planned} == {
        f"sqs queue {dead}", f"sqs queue {high}", f"sqs queue {low}",
        f"sns topic {high}-topic", f"sns subscription {high}-topic -> sqs queue {high}",
        f"sqs queue {high} policy: sns topic {high}-topic may send"}
    with pytest.raises(Exception, match=r"NonExistentQueue|QueueDoesNotExist"):
        aws.attributes(high)  # a dry run changes nothing

    code, out = provision(config)
    assert code == 0, out
    assert "created 6" in out
    for queue in (high, low):
        found = aws.attributes(queue)
        assert found["VisibilityTimeout"] == "30"
        redrive = json.loads(found["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"] == aws.attributes(dead)["QueueArn"]
        assert int(redrive["maxReceiveCount"]) == 4 + RELEASE_MARGIN
    topic = aws.topic_arn(f"{high}-topic")
    [sub] = aws.sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert sub["Endpoint"] == aws.attributes(high)["QueueArn"]
    raw = aws.sns.get_subscription_attributes(SubscriptionArn=sub["SubscriptionArn"])
    assert raw["Attributes"].get("RawMessageDelivery", "false") == "false"
    policy = json.loads(aws.attributes(high)["Policy"])
    assert [s["Condition"]["ArnEquals"]["aws:SourceArn"] for s in policy["Statement"]] == \
        [[topic]]

    code, out = provision(config)  # idempotent: a second run changes nothing and says so
    assert code == 0
    assert "nothing to do" in out
    code, checked = actions(config, "--dry-run")
    assert code == 0
    assert {a["action"] for a in checked} == {"ok"}
    assert len(aws.sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]) == 1


@pytest.mark.sqs
def test_drift_is_reported_left_alone_or_updated(tmp_path: Path, aws: Aws) -> None:
    high, _, _ = aws.names()
    config = write_config(tmp_path, aws.config(tmp_path))
    assert provision(config)[0] == 0
    url = aws.sqs.get_queue_url(QueueName=high)["QueueUrl"]
    # moto drops a queue's Policy on any SetQueueAttributes without one (SQS keeps it)
    aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={
        "VisibilityTimeout": "7", "Policy": aws.attributes(high)["Policy"]})

    code, found = actions(config, "--dry-run")
    assert code == 3
    drifts = [a for a in found if a["action"] != "ok"]
    assert len(drifts) == 1, drifts
    [drift] = drifts
    assert drift == {"resource": f"sqs queue {high}", "action": "drift",
                     "setting": "VisibilityTimeout", "current": "7", "wanted": "30"}
    code, found = actions(config)  # not fixed without --update: still drift, exit 3
    assert code == 3
    assert aws.attributes(high)["VisibilityTimeout"] == "7"
    code, found = actions(config, "--dry-run", "--update")
    assert code == 3
    assert [a["action"] for a in found if a["action"] != "ok"] == ["update"]
    code, found = actions(config, "--update")
    assert code == 0
    assert aws.attributes(high)["VisibilityTimeout"] == "30"
    assert actions(config, "--dry-run")[0] == 0


@pytest.mark.sqs
def test_queue_policy_is_merged_not_replaced(tmp_path: Path, aws: Aws) -> None:
    high, _, _ = aws.names()
    url = aws.sqs.create_queue(QueueName=high)["QueueUrl"]
    arn = aws.attributes(high)["QueueArn"]
    other = {"Sid": "ops-may-read", "Effect": "Allow",
             "Principal": {"AWS": "arn:aws:iam::123456789012:role/ops"},
             "Action": "sqs:ReceiveMessage", "Resource": arn}
    older_topic = "arn:aws:sns:us-east-1:123456789012:older-topic"
    sns_statement = {"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
                     "Action": "sqs:SendMessage", "Resource": arn,
                     "Condition": {"ArnEquals": {"aws:SourceArn": older_topic}}}
    aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(
        {"Version": "2012-10-17", "Statement": [other, sns_statement]})})
    config = write_config(tmp_path, aws.config(tmp_path))

    assert provision(config, "--update")[0] == 0
    policy = json.loads(aws.attributes(high)["Policy"])
    assert policy["Statement"][0] == other  # someone else's statement kept as it was
    assert policy["Statement"][1]["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        older_topic, aws.topic_arn(f"{high}-topic")]  # our topic joins the SNS statement
    assert len(policy["Statement"]) == 2


@pytest.mark.sqs
def test_run_with_provision_creates_and_delivers(
    tmp_path: Path, app: RecordingApp, aws: Aws
) -> None:
    high, _, _ = aws.names()
    config = aws.config(tmp_path, app.url, transforms=[])
    sidecar = start_sidecar(tmp_path, config, args=("--provision",))
    try:
        url = aws.sqs.get_queue_url(QueueName=high)["QueueUrl"]
        aws.sqs.send_message(QueueUrl=url, MessageBody='{"job": 1}')
        [request] = app.wait_for(1)
    finally:
        assert sidecar.stop() == 0
    assert request.event["data"] == {"job": 1}
    assert '"provision"' in sidecar.logs()
    assert actions(write_config(tmp_path, config, "check.yaml"), "--dry-run")[0] == 0


# -- Pub/Sub on the emulator ----------------------------------------------------------------


@pytest.mark.gcp_pubsub
def test_provisioned_subscriptions_count_attempts_so_max_attempts_holds(
    tmp_path: Path, app: RecordingApp, gcp_pubsub_emulator: Emulator
) -> None:
    uid = uuid.uuid4().hex[:10]
    high, dead = f"high-{uid}", f"dead-{uid}"
    driver = {"type": "gcp_pubsub", "project": PROJECT, "topics": {high: f"t-{high}"}}
    config = sidecar_config(tmp_path, app.url, driver, [high], dead_letter={"queue": dead},
                            lease={"duration_s": 10},
                            retry={"max_attempts": 3, "initial_delay_s": 1, "max_delay_s": 2})
    path = write_config(tmp_path, config)
    code, planned = actions(path, "--dry-run")
    assert code == 3
    [sub] = [a for a in planned if a["resource"] == f"pubsub subscription {high}"]
    assert sub["action"] == "create"
    assert sub["wanted"]["dead_letter_topic"] == f"projects/{PROJECT}/topics/{dead}"
    assert sub["wanted"]["max_delivery_attempts"] == 3 + RELEASE_MARGIN
    assert provision(path)[0] == 0
    code, checked = actions(path)
    assert code == 0
    assert {a["action"] for a in checked} == {"ok"}

    publisher, subscriber = PublisherClient(), SubscriberClient()
    try:
        publisher.publish(topic=f"projects/{PROJECT}/topics/t-{high}",
                          messages=[PubsubMessage(data=b'{"job": "doomed"}')])
        app.behaviour = lambda _: Reply(503)
        sidecar = start_sidecar(tmp_path, config)
        try:
            wait_until(lambda: len(journal_records(tmp_path / "journal")) == 3, timeout_s=40)
        finally:
            assert sidecar.stop() == 0
        answer = subscriber.pull(subscription=f"projects/{PROJECT}/subscriptions/{dead}",
                                 max_messages=10, timeout=10)
    finally:
        for client in (publisher, subscriber):
            close: Callable[[], None] = client.transport.close
            close()
    assert [r.event["attempt"] for r in app.received] == [1, 2, 3]  # Pub/Sub's own count
    assert "without a dead-letter policy" not in sidecar.logs()
    [letter] = answer.received_messages
    assert "max attempts (3) reached" in letter.message.attributes["dead_letter_reason"]
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == \
        ["retry", "retry", "dead"]


@pytest.mark.gcp_pubsub
def test_the_emulator_gets_no_retry_policy_and_one_it_has_is_drift_and_removed(
    tmp_path: Path, app: RecordingApp, gcp_pubsub_emulator: Emulator
) -> None:
    """The emulator's retry policy stops a subscription redelivering for good:
    provision makes none there, reports one a subscription has, ``--update`` removes it,
    and the driver warns about it at start. Google's service gets its policy (unit test)."""
    from google.pubsub_v1.types import RetryPolicy, Subscription

    uid = uuid.uuid4().hex[:10]
    fresh, old = f"fresh-{uid}", f"old-{uid}"
    config = sidecar_config(tmp_path, app.url, {"type": "gcp_pubsub", "project": PROJECT},
                            [fresh, old], lease={"duration_s": 10})
    path = write_config(tmp_path, config)
    publisher, subscriber = PublisherClient(), SubscriberClient()
    try:
        publisher.create_topic(name=f"projects/{PROJECT}/topics/{old}")
        subscriber.create_subscription(request=Subscription(
            name=f"projects/{PROJECT}/subscriptions/{old}",
            topic=f"projects/{PROJECT}/topics/{old}", ack_deadline_seconds=10,
            retry_policy=RetryPolicy()))
        code, planned = actions(path)
        rows = {(a["resource"], a["setting"]): a for a in planned}
        assert code == 3
        assert rows[(f"pubsub subscription {old}", "retry_minimum_backoff_s")]["action"] == \
            "drift"
        assert "emulator: subscriptions get no retry policy" in provision(path)[1]
        sidecar = start_sidecar(tmp_path, config, name="warned")
        assert sidecar.stop() == 0
        assert "retry policy can stop a subscription redelivering" in sidecar.logs()
        assert provision(path, "--update")[0] == 0
        for name in (fresh, old):
            found = subscriber.get_subscription(
                subscription=f"projects/{PROJECT}/subscriptions/{name}")
            assert "retry_policy" not in found, name
    finally:
        for client in (publisher, subscriber):
            close: Callable[[], None] = client.transport.close
            close()
    sidecar = start_sidecar(tmp_path, config, name="quiet")
    assert sidecar.stop() == 0
    assert "retry policy can stop" not in sidecar.logs()
