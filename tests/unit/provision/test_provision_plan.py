"""The pure parts of provisioning and of the claim check: plan decisions, exit codes, the
queue-policy merge (daprd merges, never replaces), pointer parsing, transform options."""

from __future__ import annotations

import json

import pytest

from priority_pubsub.core.errors import ConfigError, TransformError
from priority_pubsub.provision.aws import merge_policy
from priority_pubsub.provision.plan import Action, Mode, Verb, decide, exit_code, summary
from priority_pubsub.settings.config import validate_config
from priority_pubsub.transforms.s3_claim_check import (
    POINTER_CLASS,
    S3Claim,
    parse_pointer,
    pointer_body,
)

WANTED = {"VisibilityTimeout": "30", "RedrivePolicy": {"maxReceiveCount": 9}}


def test_missing_resource_is_created_with_its_wanted_settings() -> None:
    [row] = decide("q", None, WANTED, Mode())
    assert (row.action, row.wanted) == (Verb.CREATE, WANTED)


def test_differences_are_drift_unless_update_one_row_per_setting() -> None:
    current = {"VisibilityTimeout": "7", "RedrivePolicy": {"maxReceiveCount": 9}, "x": "y"}
    [row] = decide("q", current, WANTED, Mode())
    assert row == Action("q", Verb.DRIFT, "VisibilityTimeout", "7", "30")
    [row] = decide("q", current, WANTED, Mode(update=True))
    assert row.action is Verb.UPDATE
    assert decide("q", {**current, "VisibilityTimeout": "30"}, WANTED, Mode()) == \
        [Action("q", Verb.OK)]


@pytest.mark.parametrize(("verbs", "dry_run", "code"), [
    ([Verb.OK, Verb.OK], True, 0), ([Verb.OK, Verb.CREATE], True, 3),
    ([Verb.DRIFT], True, 3), ([Verb.CREATE, Verb.UPDATE], False, 0),
    ([Verb.CREATE, Verb.DRIFT], False, 3), ([], False, 0),
])
def test_exit_codes(verbs: list[Verb], dry_run: bool, code: int) -> None:
    actions = [Action("r", verb) for verb in verbs]
    assert exit_code(actions, Mode(dry_run=dry_run)) == code


def test_summary_says_when_nothing_is_to_do() -> None:
    assert summary([Action("r", Verb.OK)], Mode()).startswith("nothing to do")
    assert "use --update" in summary([Action("r", Verb.DRIFT, "s")], Mode())


def test_policy_merge_keeps_statements_and_adds_topics_once() -> None:
    queue = "arn:aws:sqs:us-east-1:1:q"
    other = {"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue}
    merged = merge_policy({"Statement": [other]}, queue, ["arn:t1"])
    assert merged["Statement"][0] == other
    assert merged["Statement"][1]["Condition"]["ArnEquals"]["aws:SourceArn"] == ["arn:t1"]
    again = merge_policy(merged, queue, ["arn:t1", "arn:t2"])
    assert len(again["Statement"]) == 2
    assert again["Statement"][1]["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        "arn:t1", "arn:t2"]


def test_pointer_formats_of_aws_clients_and_the_bare_object() -> None:
    claim = S3Claim("b", "k")
    assert json.loads(pointer_body(claim)) == [POINTER_CLASS, {"s3BucketName": "b",
                                                              "s3Key": "k"}]
    assert parse_pointer(pointer_body(claim)) == claim
    legacy = b'["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3BucketName":"b","s3Key":"k"}]'
    assert parse_pointer(legacy) == claim
    assert parse_pointer(b'{"s3BucketName": "b", "s3Key": "k"}') == claim


@pytest.mark.parametrize("body", [
    b"nope", b'["java.lang.String", {"s3BucketName": "b", "s3Key": "k"}]', b"[1]",
    b'{"s3BucketName": "b"}', b'{"s3BucketName": "", "s3Key": "k"}', b"42",
])
def test_malformed_pointers_are_refused(body: bytes) -> None:
    with pytest.raises(TransformError, match="malformed S3 pointer"):
        parse_pointer(body)


def _with_transforms(transforms: list[object]) -> None:
    validate_config({"queues": [{"name": "q"}], "transforms": transforms})


def test_transform_entries_take_options_next_to_plain_names() -> None:
    _with_transforms(["base64", {"name": "s3_claim_check", "bucket": "bucket-b",
                                 "threshold_bytes": 1000, "delete_after_ack": False}])
    with pytest.raises(ConfigError, match=r"transforms\.1\.threshold_bytes"):
        _with_transforms(["base64", {"name": "s3_claim_check", "threshold_bytes": -1}])
    with pytest.raises(ConfigError, match=r"transforms\.0\.bukket: unknown key"):
        _with_transforms([{"name": "s3_claim_check", "bukket": "b"}])
    with pytest.raises(ConfigError, match="takes no options"):
        _with_transforms([{"name": "base64", "strict": True}])
    with pytest.raises(ConfigError, match="unknown transform"):
        _with_transforms([{"name": "nope"}])
