"""The ``s3_claim_check`` transform on moto server (SQS + S3), interoperating both ways with
AWS's own ``amazon-sqs-extended-client`` (PyPI 1.0.1): its pointer format is the reference
(``sqs_extended_client/client.py``: ``ExtendedPayloadSize`` attribute, body
``["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName", "s3Key"}]``)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from priority_pubsub.core.outcome import Outcome
from priority_pubsub.transforms.base import Payload
from priority_pubsub.transforms.s3_claim_check import ClaimCheckOptions, S3ClaimCheck
from tests.e2e.helpers import journal_records, wait_until
from tests.support.app import RecordingApp, Reply
from tests.support.moto_server import MotoServer, running_moto_server
from tests.support.servers import free_port
from tests.support.sidecar import (
    SidecarProcess,
    cli,
    sidecar_config,
    start_sidecar,
    write_config,
)

pytestmark = pytest.mark.sqs
FIVE_MB = 5 * 1024 * 1024


def extended_session() -> Any:
    """AWS's ``SQSExtendedClientSession``. Importing the package replaces ``boto3.Session``
    process-wide (its ``__init__``): the originals are put back so no other test's boto3
    clients turn into extended ones."""
    saved = (boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION)
    try:
        from sqs_extended_client.client import SQSExtendedClientSession
    finally:
        boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION = saved  # type: ignore[misc]
    return SQSExtendedClientSession()


class Bench:
    """A queue, a dead-letter queue and a bucket on moto; AWS's extended client on them."""

    def __init__(self, server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
        # AWS's client makes its S3 client without an endpoint: the standard variable
        # reaches moto, as it does for the sidecar (no endpoint_url in the transform options).
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint_url)
        self.server = server
        uid = uuid.uuid4().hex[:10]
        self.queue, self.dead, self.bucket = f"cc-{uid}", f"cc-{uid}-dead", f"cc-{uid}"
        self.sqs = boto3.client("sqs", endpoint_url=server.endpoint_url)
        self.s3 = boto3.client("s3", endpoint_url=server.endpoint_url)
        self.s3.create_bucket(Bucket=self.bucket)
        self.url = self.sqs.create_queue(QueueName=self.queue)["QueueUrl"]
        self.dead_url = self.sqs.create_queue(QueueName=self.dead)["QueueUrl"]

    def aws_client(self) -> Any:
        client = extended_session().client("sqs", endpoint_url=self.server.endpoint_url)
        client.large_payload_support = self.bucket
        return client

    def config(self, directory: Path, app_url: str, **transform: Any) -> dict[str, Any]:
        driver = {"type": "sqs", "endpoint_url": self.server.endpoint_url,
                  "region": self.server.region, "wait_time_s": 2}
        entry = {"name": "s3_claim_check", "bucket": self.bucket, **transform}
        return sidecar_config(directory, app_url, driver, [self.queue], transforms=[entry],
                              dead_letter={"queue": self.dead}, app={"url": app_url,
                                                                    "timeout_s": 30,
                                                                    "delivery": "raw"})

    def objects(self) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=self.bucket).get("Contents", [])]

    def dead_letters(self) -> list[dict[str, Any]]:
        answer = self.sqs.receive_message(QueueUrl=self.dead_url, MaxNumberOfMessages=10,
                                          WaitTimeSeconds=2, MessageAttributeNames=["All"])
        return list(answer.get("Messages", []))


@pytest.fixture
def bench(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Bench:
    return Bench(moto_server, monkeypatch)


def big_body() -> str:
    return json.dumps({"job": "render", "blob": "x" * FIVE_MB})


def test_aws_client_sends_5mb_app_gets_it_whole_object_deleted_after_ack(
    tmp_path: Path, app: RecordingApp, bench: Bench
) -> None:
    body = big_body()
    bench.aws_client().send_message(QueueUrl=bench.url, MessageBody=body)
    [key] = bench.objects()
    sidecar = start_sidecar(tmp_path, bench.config(tmp_path, app.url))
    try:
        [request] = app.wait_for(1, timeout_s=30)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=10)
        wait_until(lambda: bench.objects() == [], timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    assert hashlib.sha256(request.body).hexdigest() == hashlib.sha256(body.encode()).hexdigest()
    assert "metadata.ExtendedPayloadSize" not in request.headers  # consumed, as AWS's does
    [record] = journal_records(tmp_path / "journal")
    assert record["outcome"] == "ack"
    assert key not in bench.objects()  # deleted after the ack, as AWS's Java client does


def test_publish_offloads_5mb_and_aws_client_reads_it(tmp_path: Path, bench: Bench) -> None:
    body = big_body()
    payload = tmp_path / "big.json"
    payload.write_text(body)
    config = write_config(tmp_path, bench.config(tmp_path, "http://127.0.0.1:9/x"))
    result = cli("publish", bench.queue, "--file", str(payload), config=config)
    assert result.returncode == 0, result.stderr
    assert len(bench.objects()) == 1
    answer = bench.aws_client().receive_message(QueueUrl=bench.url, WaitTimeSeconds=2,
                                                MessageAttributeNames=["All"])
    [message] = answer["Messages"]
    assert message["Body"] == body


def test_small_bodies_are_not_offloaded(tmp_path: Path, app: RecordingApp, bench: Bench
                                        ) -> None:
    config = write_config(tmp_path, bench.config(tmp_path, app.url))
    assert cli("publish", bench.queue, "--data", '{"small": 1}', config=config).returncode == 0
    assert bench.objects() == []
    [raw] = bench.sqs.receive_message(QueueUrl=bench.url, WaitTimeSeconds=2)["Messages"]
    assert raw["Body"] == '{"small": 1}'


def test_dead_letter_keeps_the_object_and_stays_readable(
    tmp_path: Path, app: RecordingApp, bench: Bench
) -> None:
    body = big_body()
    bench.aws_client().send_message(QueueUrl=bench.url, MessageBody=body)
    [key] = bench.objects()
    app.behaviour = lambda _: Reply(400)  # fatal: dead at once
    sidecar = start_sidecar(tmp_path, bench.config(tmp_path, app.url))
    try:
        app.wait_for(1, timeout_s=30)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    assert bench.objects() == [key]  # kept
    answer = bench.aws_client().receive_message(QueueUrl=bench.dead_url, WaitTimeSeconds=2,
                                                MessageAttributeNames=["All"])
    [letter] = answer["Messages"]
    assert letter["Body"] == body  # the pointer was dead-lettered: AWS's client reads it
    assert "400" in letter["MessageAttributes"]["dead_letter_reason"]["StringValue"]


def _pointer(bucket: str, key: str) -> str:
    return json.dumps(["software.amazon.payloadoffloading.PayloadS3Pointer",
                       {"s3BucketName": bucket, "s3Key": key}])


def test_bad_pointers_are_dead_lettered_with_the_reason(
    tmp_path: Path, app: RecordingApp, bench: Bench
) -> None:
    size = {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": "10"}}
    bad = {
        "missing": _pointer(bench.bucket, "no-such-key"),
        "malformed": '["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3Key": 1}]',
        "not-json": "plain text with the size attribute",
        "no-bucket": _pointer(f"absent-{uuid.uuid4().hex[:8]}", "k"),
    }
    for label, pointer in bad.items():
        bench.sqs.send_message(QueueUrl=bench.url, MessageBody=pointer, MessageAttributes={
            **size, "label": {"DataType": "String", "StringValue": label}})
    sidecar = start_sidecar(tmp_path, bench.config(tmp_path, app.url))
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 4, timeout_s=30)
    finally:
        assert sidecar.stop() == 0
    assert app.received == []  # none reached the app
    letters = {m["MessageAttributes"]["label"]["StringValue"]:
               m["MessageAttributes"]["dead_letter_reason"]["StringValue"]
               for m in bench.dead_letters() + bench.dead_letters()}
    assert set(letters) == set(bad)  # never lost
    assert "NoSuchKey" in letters["missing"]
    assert "gone" in letters["missing"]
    assert "malformed S3 pointer" in letters["malformed"]
    assert "malformed S3 pointer: not JSON" in letters["not-json"]
    assert "NoSuchBucket" in letters["no-bucket"]
    assert all(r["outcome"] == "dead" and r["attempt"] == 1
               for r in journal_records(tmp_path / "journal"))


def test_unreachable_s3_is_retried_not_dead_lettered(
    tmp_path: Path, app: RecordingApp, bench: Bench
) -> None:
    bench.aws_client().send_message(QueueUrl=bench.url, MessageBody='{"x": 1}' * 40_000)
    config = bench.config(tmp_path, app.url, endpoint_url=f"http://127.0.0.1:{free_port()}")
    config["retry"] = {"max_attempts": 10, "initial_delay_s": 1, "max_delay_s": 1}
    sidecar = start_sidecar(tmp_path, config)
    try:
        wait_until(lambda: len(journal_records(tmp_path / "journal")) >= 2, timeout_s=40)
    finally:
        assert sidecar.stop() == 0
    records = journal_records(tmp_path / "journal")
    assert {r["outcome"] for r in records} == {"retry"}
    assert "transform unavailable" in records[0]["reason"]
    assert bench.dead_letters() == []
    assert len(bench.objects()) == 1


def test_bucket_without_access_is_dead_lettered(tmp_path: Path, app: RecordingApp) -> None:
    """A separate moto server that enforces IAM (its ``reset-auth`` API): the sidecar's user
    may use SQS and S3 except ``s3:GetObject`` on the locked bucket (an explicit Deny)."""
    uid = uuid.uuid4().hex[:8]
    queue, dead, locked = f"acl-{uid}", f"acl-{uid}-dead", f"locked-{uid}"
    with running_moto_server() as server:
        setup = boto3.session.Session(**_setup_credentials())
        iam = setup.client("iam", endpoint_url=server.endpoint_url)
        iam.create_user(UserName="sidecar")
        iam.put_user_policy(UserName="sidecar", PolicyName="p", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": ["sqs:*", "s3:*"], "Resource": "*"},
                {"Effect": "Deny", "Action": "s3:GetObject",
                 "Resource": f"arn:aws:s3:::{locked}/*"}]}))
        key = iam.create_access_key(UserName="sidecar")["AccessKey"]
        sqs = setup.client("sqs", endpoint_url=server.endpoint_url)
        s3 = setup.client("s3", endpoint_url=server.endpoint_url)
        s3.create_bucket(Bucket=locked)
        s3.put_object(Bucket=locked, Key="task", Body=b"secret")
        url = sqs.create_queue(QueueName=queue)["QueueUrl"]
        dead_url = sqs.create_queue(QueueName=dead)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=_pointer(locked, "task"), MessageAttributes={
            "ExtendedPayloadSize": {"DataType": "Number", "StringValue": "6"}})
        _enforce_iam(server.endpoint_url)
        user = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"], "AWS_SESSION_TOKEN": ""}
        as_user = boto3.session.Session(aws_access_key_id=user["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=user["AWS_SECRET_ACCESS_KEY"],
                                        region_name=server.region)
        with pytest.raises(Exception, match="AccessDenied"):  # the deny is really enforced
            as_user.client("s3", endpoint_url=server.endpoint_url).get_object(
                Bucket=locked, Key="task")
        driver = {"type": "sqs", "endpoint_url": server.endpoint_url, "region": server.region,
                  "wait_time_s": 2}
        config = sidecar_config(tmp_path, app.url, driver, [queue], dead_letter={"queue": dead},
                                transforms=[{"name": "s3_claim_check",
                                             "endpoint_url": server.endpoint_url}])
        sidecar = SidecarProcess(tmp_path, config, env=user)
        try:
            sidecar.wait_ready()
            wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=30)
        finally:
            assert sidecar.stop() == 0
        user_sqs = as_user.client("sqs", endpoint_url=server.endpoint_url)
        [letter] = user_sqs.receive_message(QueueUrl=dead_url, WaitTimeSeconds=2,
                                            MessageAttributeNames=["All"])["Messages"]
    assert app.received == []
    reason = letter["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert "AccessDenied" in reason
    assert "access denied" in reason
    assert letter["Body"] == _pointer(locked, "task")  # the pointer kept for a later redrive


def _setup_credentials() -> dict[str, str]:
    return {"aws_access_key_id": "setup", "aws_secret_access_key": "setup",
            "region_name": "us-east-1"}


def _enforce_iam(endpoint_url: str) -> None:
    """moto server checks signatures and IAM policies from now on (no unauthenticated
    actions left)."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset-auth", data=b"0",
                                     method="POST", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


async def test_a_64mb_body_is_held_once(bench: Bench) -> None:
    """Memory stays bounded: fetching a 64 MiB object holds it once, never two copies
    (Python allocations measured with tracemalloc, once the S3 client is loaded)."""
    size = 64 * 1024 * 1024
    bench.s3.put_object(Bucket=bench.bucket, Key="big", Body=b"y" * size)
    bench.s3.put_object(Bucket=bench.bucket, Key="small", Body=b"s")
    transform = S3ClaimCheck(ClaimCheckOptions(endpoint_url=bench.server.endpoint_url))
    warm = Payload(_pointer(bench.bucket, "small").encode(), {"ExtendedPayloadSize": "1"})
    assert (await transform.apply(warm)).body == b"s"  # the client and its model are loaded
    pointer = Payload(_pointer(bench.bucket, "big").encode(),
                      {"ExtendedPayloadSize": str(size)})
    tracemalloc.start()
    try:
        payload = await transform.apply(pointer)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(payload.body) == size
    assert payload.body[:1] == payload.body[-1:] == b"y"
    assert peak < size + 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    await transform.after_settle(Outcome.ack(), payload)
    assert "big" not in bench.objects()
